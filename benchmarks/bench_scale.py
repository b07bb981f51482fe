"""Scaling benchmark (README, "Scale"): whole ``exactlearn learn`` processes on the modular
field for d = 8 .. 64, with H = d/2 and with H = 4.

    python benchmarks/bench_scale.py                      # both series, PNG to docs/img/scale.png
    python benchmarks/bench_scale.py --max-d 32           # a quicker run
    python benchmarks/bench_scale.py --only 64:32 --workers 2   # one case, serial and on 2 Dask workers

Each case is one process (``random-model --seed 3 --den 1``, then ``learn --field modular
--heads H --seed 1 --json``), run twice: without a height bound (the analysis prime and a
confirmation prime: 2 passes of the plan) and with ``--max-height B`` (``--max-height``,
default 2^20, above the model's heights: one pass).  Printed per run: wall time of the
whole process, the learner's and the oracle's seconds (``learner_seconds``,
``oracle_seconds`` of the JSON), their ratio, the passes of the plan (primes asked) and
**the whole run / one oracle pass** ratio (wall time over ``oracle_seconds / passes``: 1
would be the oracle's own time for one pass), the process's peak resident memory
(``ru_maxrss``), its CPU seconds (user + system, ``ru_utime + ru_stime``: less moved by the
load of a shared machine than the wall time), the queries per prime (the paper's
``4Hd^2 - 2H + 1``) and in total (every prime of the multi-modular method), and ``uptime``'s
load average before the run (the machine is shared).  Each run's line ends with issue 23's
target for it (whole run / one oracle pass <= 3 without a height bound, <= 2 with one, at
d = 32, H = 16 and d = 64, H = 32) and whether it is met.  The exponent of
each quantity against d is fitted by least squares on log-log (per series, cases with
d >= 16), and the projection for d = 384, H = 12 (a MiniLM layer) is printed from them:
T(d, H) = C d^a H^b with a from the H = 4 series, a + b from the H = d/2 series and C
from the largest case -- a projection, not a measurement.  ``--workers N`` also runs the
largest case of each series on a loopback Dask cluster of N workers (``--workers``) and
checks that its JSON equals the serial one (timings aside).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

# the child: run the CLI, then report this process's peak memory and CPU seconds on stderr
CHILD = ("import resource, sys\nfrom exactlearn.cli import main\nrc = main(sys.argv[1:])\n"
         "u = resource.getrusage(resource.RUSAGE_SELF)\n"
         "print('maxrss_kb', u.ru_maxrss, file=sys.stderr)\n"
         "print('cpu_s', u.ru_utime + u.ru_stime, file=sys.stderr)\n"
         "sys.exit(rc)\n")

#: issue 23's targets for whole run / one oracle pass: (without a height bound, with one)
TARGETS = {(32, 16): (3, 2), (64, 32): (3, 2)}

DS = [8, 12, 16, 24, 32, 48, 64]


def load() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def run_case(d, H, tmp, workers=None, max_height=None) -> dict:
    path = os.path.join(tmp, f"m{d}_{H}.json")
    if not os.path.exists(path):
        subprocess.run([sys.executable, "-m", "exactlearn.cli", "random-model", "--d", str(d),
                        "--heads", str(H), "--seed", "3", "--den", "1", "--out", path], check=True)
    cmd = [sys.executable, "-c", CHILD, "learn", "--model", path, "--field", "modular",
           "--heads", str(H), "--seed", "1", "--json"]
    if workers:
        cmd += ["--workers", str(workers)]
    if max_height:
        cmd += ["--max-height", str(max_height)]
    before = load()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    rss = next((int(line.split()[1]) for line in p.stderr.splitlines() if line.startswith("maxrss_kb")), 0)
    cpu = next((float(line.split()[1]) for line in p.stderr.splitlines() if line.startswith("cpu_s")),
               float("nan"))
    r = json.loads(p.stdout)
    per = [q["queries"] for q in r["multimodular"]["primes"]]
    passes = sum(1 for q in per if q)
    one_pass = r["oracle_seconds"] / passes if passes else float("nan")
    return {"d": d, "H": H, "workers": workers or 0, "wall": wall, "learner": r["learner_seconds"],
            "oracle": r["oracle_seconds"], "rss_mb": rss / 1024, "cpu": cpu, "queries": r["queries"],
            "per_prime": per, "status": r["status"], "load": before, "json": r,
            "max_height": max_height, "passes": passes, "one_pass": one_pass,
            "run_per_pass": wall / one_pass if one_pass else float("nan")}


def fit(points) -> float:
    """Least-squares slope of log y against log d."""
    xs = [math.log(d) for d, _ in points]
    ys = [math.log(max(y, 1e-9)) for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def show(c) -> None:
    ratio = c["learner"] / c["oracle"] if c["oracle"] else float("nan")
    where = f"{c['workers']} Dask workers" if c["workers"] else "serial"
    bound = f"B=2^{c['max_height'].bit_length() - 1}" if c.get("max_height") else "no bound"
    target = TARGETS.get((c["d"], c["H"]))
    goal = ""
    if target is not None and not c["workers"]:
        t = target[1] if c.get("max_height") else target[0]
        goal = f"  target <= {t}: {'met' if c['run_per_pass'] <= t else 'NOT met'}"
    print(f"d={c['d']:3d} H={c['H']:2d} {where:15} {bound:9} wall {c['wall']:7.1f} s  "
          f"cpu {c.get('cpu', float('nan')):7.1f} s  "
          f"learner {c['learner']:7.1f} s  oracle {c['oracle']:7.1f} s  learner/oracle {ratio:4.2f}  "
          f"passes {c['passes']}  whole run / one oracle pass {c['run_per_pass']:5.2f}  "
          f"peak {c['rss_mb']:6.0f} MB  queries {c['queries']} ({'+'.join(map(str, c['per_prime']))})  "
          f"{c['status']}  load before {c['load']}{goal}", flush=True)


def plot(series, path, bounded=None, commit="") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for label, cases in series.items():
        ds = [c["d"] for c in cases]
        for key, style in (("wall", "-o"), ("learner", "--s"), ("oracle", ":^")):
            axes[0].loglog(ds, [c[key] for c in cases], style, label=f"{key}, {label}")
        axes[1].semilogx(ds, [c["run_per_pass"] for c in cases], "-o", label=f"{label}, no bound (2 passes)")
        if bounded and bounded.get(label):
            bs = bounded[label]
            axes[1].semilogx([c["d"] for c in bs], [c["run_per_pass"] for c in bs], "--s",
                             label=f"{label}, --max-height (1 pass)")
        axes[2].loglog(ds, [c["rss_mb"] for c in cases], "-o", label=label)
    axes[0].set_xlabel("d")
    axes[0].set_ylabel("seconds (whole process)")
    axes[0].set_title("modular field, 2 primes per run (no height bound)")
    axes[0].legend(fontsize=7)
    axes[1].set_xlabel("d")
    axes[1].set_ylabel("whole run / one oracle pass")
    axes[1].set_title("1 would be the oracle's own time for one pass")
    axes[1].set_ylim(bottom=0)
    axes[1].legend(fontsize=7)
    axes[2].set_xlabel("d")
    axes[2].set_ylabel("peak resident memory (MB)")
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    fig.text(0.01, 0.01, f"python benchmarks/bench_scale.py{(' at ' + commit) if commit else ''}",
             fontsize=7, alpha=0.7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-d", type=int, default=64)
    ap.add_argument("--only", default=None, metavar="D:H", help="one case only")
    ap.add_argument("--workers", type=int, default=None,
                    help="also run the largest case of each series on N loopback Dask workers")
    ap.add_argument("--png", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "docs", "img", "scale.png"))
    ap.add_argument("--json-out", default=None, help="write every case as JSON")
    ap.add_argument("--max-height", type=int, default=2 ** 20,
                    help="the declared height bound of the bounded runs (default 2^20; 0: none)")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp()
    commit = _commit()
    print(f"{os.cpu_count()} cores; modular field, whole processes (bench_scale.py at {commit or '?'})",
          flush=True)
    if args.only:
        d, H = map(int, args.only.split(":"))
        cases = [run_case(d, H, tmp)]
        show(cases[0])
        if args.max_height:
            cases.append(run_case(d, H, tmp, max_height=args.max_height))
            show(cases[-1])
        if args.workers:
            c = run_case(d, H, tmp, args.workers)
            show(c)
            print("identical to serial (timings aside):", _same(cases[0], c))
            cases.append(c)
        _dump(args, {"only": cases})
        return
    series = {"H = d/2": [], "H = 4": []}
    bounded = {"H = d/2": [], "H = 4": []}
    for d in [x for x in DS if x <= args.max_d]:
        for label, H in (("H = d/2", d // 2), ("H = 4", 4)):
            if H < 1 or (label == "H = 4" and d // 2 == 4):
                if label == "H = 4" and d // 2 == 4:
                    series[label].append(series["H = d/2"][-1])      # the same case
                continue
            c = run_case(d, H, tmp)
            show(c)
            series[label].append(c)
            if args.max_height:
                bounded[label].append(run_case(d, H, tmp, max_height=args.max_height))
                show(bounded[label][-1])
    print("\nfitted exponents against d (least squares on log-log, d >= 16):")
    expo = {}
    for label, cases in series.items():
        pts = [c for c in cases if c["d"] >= 16]
        if len(pts) < 2:
            continue
        expo[label] = {k: fit([(c["d"], c[k]) for c in pts]) for k in ("wall", "learner", "oracle", "rss_mb")}
        print(f"  {label:8}: " + ", ".join(f"{k} d^{v:.2f}" for k, v in expo[label].items()))
    if "H = d/2" in expo and "H = 4" in expo:
        big = series["H = d/2"][-1]
        a = expo["H = 4"]["wall"]
        b = expo["H = d/2"]["wall"] - a
        C = big["wall"] / (big["d"] ** a * big["H"] ** b)
        t = C * 384 ** a * 12 ** b
        am = expo["H = 4"]["rss_mb"]
        bm = expo["H = d/2"]["rss_mb"] - am
        mem = big["rss_mb"] / (big["d"] ** am * big["H"] ** bm) * 384 ** am * 12 ** bm
        q = 4 * 12 * 384 ** 2 - 2 * 12 + 1
        print(f"\nPROJECTION (not measured): d=384, H=12 ({q} queries per prime, {2 * q} in all): "
              f"T = C d^{a:.2f} H^{b:.2f} = {t:.0f} s serial ({t / 3600:.1f} h), about "
              f"{t / 8:.0f} s on 8 workers and {t / 32:.0f} s on 32 at perfect speed-up; "
              f"peak memory about {mem:.0f} MB")
    if args.workers:
        for label, cases in series.items():
            c = run_case(cases[-1]["d"], cases[-1]["H"], tmp, args.workers)
            show(c)
            print("identical to serial (timings aside):", _same(cases[-1], c))
    if args.png:
        plot(series, args.png, bounded, commit)
        print(f"figure: {os.path.normpath(args.png)}")
    _dump(args, {**series, **{f"{k}, bounded": v for k, v in bounded.items()}})


def _commit() -> str:
    """The checkout's commit (short), with "+changes" when the tree differs from it; "" outside git."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return rev + ("+changes" if dirty else "")


def _same(a, b) -> bool:
    ja, jb = dict(a["json"]), dict(b["json"])
    for j in (ja, jb):
        j.pop("learner_seconds"), j.pop("oracle_seconds")
    return ja == jb


def _dump(args, obj) -> None:
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({k: [{x: y for x, y in c.items() if x != "json"} for c in v] for k, v in obj.items()},
                      f, indent=1)


if __name__ == "__main__":
    main()
