"""Float64 / float32 black boxes over the real field: the stable plan against the paper plan.

A numpy float64 (or float32) attention layer written apart from exactlearn's oracle code
(tests/float_layers.py), weights ~ N(0, std^2), is learned with ``learn(box, field="real",
tokens="float64", plan=...)``.  For each case (d, H) and seed it prints whether the run was
certified, the largest parameter error against the layer's exact weights, the run's
``error_bound``, whether the bound covers the error, the queries against the paper's count,
the longest query and the wall time, split into the box's own time (``box``: time spent inside
the layer's ``__call__``/``batch`` only) and the learner's (``learner`` = wall - box - the
benchmark's own checks beside the box), and their ratio ``learner/box``; then a summary line
per case with the median of that ratio (issue 23 section 2: the target is <= 2); after
``--grid`` (stable plan, float64) a ``TARGETS`` line says which of issue 23's targets the run
met (every run certified within its bound and 1e-13; queries <= 2.5 x the paper's count;
median learner / box <= 2 at d = 16, H = 4 and 6).
With ``--dtype float32`` it also prints ``box_error/eta``: the box's largest error on every
query it answered (against a float64 evaluation of the same weights) over the eta it had
-- with ``--noise auto`` each query's eta by its scale (``noise_estimated["by_scale"]``, the
plan's own scales) -- and ``box_error/eta_before_probe``, the same over the one eta measured
before the probe at token norms 1/2, 2, 8 (all that ``noise="auto"`` used before).

    python benchmarks/bench_float.py --cases 4x2 6x3 8x4 --seeds 5
    python benchmarks/bench_float.py --cases 4x2 --plan paper --seeds 5
    python benchmarks/bench_float.py --cases 4x2 --dtype float32 --noise 2e-5 --noise-rel 1e-6
    python benchmarks/bench_float.py --f32-grid --dtype float32 --noise auto --seeds 2
    python benchmarks/bench_float.py --cases 4x2 6x3 --noise auto   # eta measured from the box
    python benchmarks/bench_float.py --minilm 0 --dprime 8     # needs the minilm extra

The declared noise (``--noise`` absolute, ``--noise-rel`` relative to |y|) must cover the
layer's real error: a float64 layer here errs by up to about 1.5e-15 times the largest
output on the stable plan's queries (``--measure`` prints it), hence the default 5e-14.
``--noise auto`` measures it instead (``learn(noise="auto")``; ``--noise-rel`` is then
ignored) and prints the queries spent measuring (``noise_queries``, part of ``queries``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import numpy as np                                   # noqa: E402
from gmpy2 import mpq                                # noqa: E402

from float_layers import NumpyAttention             # noqa: E402
from exactlearn import learn                        # noqa: E402
from exactlearn.fields.real import Real             # noqa: E402
from exactlearn.model import Head, canonicalize     # noqa: E402
from exactlearn.pipeline.plan import paper_count    # noqa: E402
from exactlearn.strategies.real.learn import max_parameter_error   # noqa: E402
from exactlearn.strategies.real.stable_plan import Noise             # noqa: E402


def truth(box):
    return canonicalize([Head(tuple(tuple(mpq(a) for a in r) for r in W), tuple(mpq(a) for a in v))
                         for W, v in box.exact_heads()])


def minilm_box(layer, dprime, dtype):
    """A float numpy evaluation of the 12 heads of all-MiniLM-L6-v2 layer ``layer`` restricted
    to a random d'-dimensional subspace (exactlearn.demo.minilm.subspace_model, seed 0), the
    weights rounded to ``dtype``."""
    from fractions import Fraction
    from exactlearn.demo.minilm import subspace_model
    model, _ = subspace_model(layer=layer, dprime=dprime, seed=0)
    heads = [(np.array([[float(Fraction(a)) for a in row] for row in h.W]),
              np.array([float(Fraction(a)) for a in h.v])) for h in model.heads]
    return NumpyAttention(heads, dtype=dtype)


#: where a failed run stopped, from its message (``stage`` in the per-run line)
STAGES = (("measuring eta", "eta"), ("scale probe", "probe"),
          ("could not be resolved", "families"), ("do not determine every entry", "labelling"),
          ("weighted residual sum of squares", "polish"), ("keeps every output", "residual test"),
          ("resolve more heads", "resolution test"), ("misses", "certificate"),
          ("not finite", "polish"), ("did not converge", "polish"), ("pencil", "pencil"))


def stage_of(reason: str) -> str:
    """The stage a failure message names (STAGES), ``-`` for none."""
    return next((name for key, name in STAGES if key in reason), "-")


class TimedBox:
    """The box with a stopwatch: ``seconds`` is the time spent inside its ``__call__`` (and
    ``batch`` when it has one), nothing else; the other attributes are the box's."""

    def __init__(self, box):
        self.box, self.seconds = box, 0.0
        if hasattr(box, "batch"):
            self.batch = self._batch

    def __call__(self, X):
        t0 = time.perf_counter()
        try:
            return self.box(X)
        finally:
            self.seconds += time.perf_counter() - t0

    def _batch(self, queries):
        t0 = time.perf_counter()
        try:
            return self.box.batch(queries)
        finally:
            self.seconds += time.perf_counter() - t0

    def __getattr__(self, name):
        if name == "box":              # not yet set (a copy in progress)
            raise AttributeError(name)
        return getattr(self.box, name)


def one(d, H, seed, args):
    dtype = np.float32 if args.dtype == "float32" else np.float64
    layer = (minilm_box(args.minilm, d, dtype) if args.minilm is not None
             else NumpyAttention.from_seed(d, H, seed, std=args.std, dtype=dtype))
    box = TimedBox(layer)
    bench = [0.0]                      # the benchmark's own work beside the box (not learner's)
    K = Real(dps=args.dps)
    target, tokens = box, args.dtype
    seen = []
    if args.dtype == "float32" and args.plan == "stable":
        ref = NumpyAttention([(W.astype(np.float64), v.astype(np.float64))
                              for W, v in zip(box.W, box.v)])    # the same weights, float64

        def target(X):                 # the box, its true error beside (rounding ~1e-16)
            y = box(X)
            t0 = time.perf_counter()
            X64 = np.asarray(X, dtype=np.float64)
            seen.append((float(y), float(y) - float(ref(X64)),
                         float(np.sqrt((X64 ** 2).sum(axis=1)).max())))
            bench[0] += time.perf_counter() - t0
            return y
    if args.plan == "paper":           # its tokens are not dyadic: round them to floats, as a
        tokens = "exact"               # user would (a perturbation of order 1e-16 per entry)

        def target(toks):
            t0 = time.perf_counter()
            X = np.array([[float(a) for a in t] for t in toks], dtype=dtype)
            bench[0] += time.perf_counter() - t0
            return box(X)
    t0 = time.perf_counter()
    auto = args.noise == "auto"
    res = learn(target, d=d, heads=H, field=K, tokens=tokens, plan=args.plan, noise=args.noise,
                noise_rel=args.noise_rel if args.plan == "stable" and not auto else None, seed=seed,
                retries=args.retries)
    wall = time.perf_counter() - t0
    learner = wall - box.seconds - bench[0]
    row = {"d": d, "H": H, "seed": seed, "status": res.status, "queries": res.queries,
           "paper_count": paper_count(d, H), "max_length": res.max_length,
           "attempts": res.attempts, "wall": wall, "box": box.seconds, "learner": learner,
           "ratio": learner / max(box.seconds, 1e-9), "error": None, "bound": None, "covers": None,
           "reason": (res.error or "")[:160], "stage": stage_of(res.error or ""),
           "estimate": (res.real_detail or {}).get("estimate", "-"),
           "start": (res.real_detail or {}).get("start", "-"),
           "noise_queries": res.noise_queries,
           # where the queries went (real_detail): the probe's, the supplementary and the
           # targeted families (each of the plan's nodes), the configurations rescued at
           # another scale
           "mechanisms": {k: (res.real_detail or {}).get(k) for k in (
               "probe_queries", "supplementary_families", "targeted_families")}
           | {"rescued": len((res.real_detail or {}).get("rescued_configurations") or {})}}
    if seen:                           # the box's largest true error over the eta it had
        est = res.noise_estimated or {}
        eta = float(est.get("noise", args.noise if not auto else 0))
        rel = float(est.get("noise_rel", args.noise_rel if not auto else 0))
        ys, es, norms = np.array(seen).T
        row["eta"] = f"{eta:.3g}+{rel:.3g}|y|"
        if est.get("by_scale"):        # eta by each query's largest token norm (noise="auto")
            nz = Noise(K, 0, 0)
            nz.by_scale([(float(r["max_token_norm"]), float(r["noise"]), float(r["noise_rel"]))
                         for r in est["by_scale"]])
            etas = np.array([nz.of(y, 0, n) for y, n in zip(ys, norms)])
            row["eta"] += " at sigma, by scale"
            pre = est["preliminary"]        # the one eta measured before the probe (d52c45b's)
            row["err_over_pre"] = float(np.max(np.abs(es) / (float(pre["noise"]) + float(
                pre["noise_rel"]) * np.abs(ys))))
        else:
            etas = eta + rel * np.abs(ys)
        row["err_over_eta"] = float(np.max(np.abs(es) / etas))
    if res.certified:
        err, _ = max_parameter_error(res.heads, truth(layer), K)
        row.update(error=float(err), bound=float(res.error_bound), covers=bool(err <= res.error_bound))
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["4x2", "6x3", "8x4"], help="d x H")
    ap.add_argument("--grid", action="store_true",
                    help="the acceptance grid: d in 4 6 8 12 16, H in 2 3 4 6, d >= 2H (14 cases)")
    ap.add_argument("--f32-grid", action="store_true",
                    help="the float32 target grid: d in 4 6 8 12 16, H in 2 3 4 with H | d, "
                         "and H = 6, 8 at d = 12, 16 (issue 22 section 3)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--plan", default="stable", choices=["stable", "paper"])
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--noise", type=lambda s: s if s == "auto" else float(s), default=5e-14,
                    help="declared eta (a float), or auto: measured from the box")
    ap.add_argument("--noise-rel", type=float, default=1e-15)
    ap.add_argument("--std", type=float, default=0.5)
    ap.add_argument("--dps", type=int, default=30)
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--minilm", type=int, default=None, metavar="LAYER",
                    help="learn the 12 heads of this all-MiniLM-L6-v2 layer instead (float copy)")
    ap.add_argument("--dprime", type=int, default=8, help="with --minilm: the subspace dimension")
    args = ap.parse_args(argv)
    if args.minilm is not None:
        args.cases = [f"{args.dprime}x12"]
    elif args.f32_grid:
        args.cases = [f"{d}x{H}" for d in (4, 6, 8, 12, 16) for H in (2, 3, 4) if d % H == 0]
        args.cases += ["12x6", "16x8"]
    elif args.grid:
        args.cases = [f"{d}x{H}" for d in (4, 6, 8, 12, 16) for H in (2, 3, 4, 6) if d >= 2 * H]
    summaries = {}
    for case in args.cases:
        d, H = (int(x) for x in case.split("x"))
        rows = summaries[(d, H)] = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            r = one(d, H, seed, args)
            rows.append(r)
            print(f"d={d} H={H} seed={seed} {r['status']} err={r['error']} bound={r['bound']} "
                  f"covers={r['covers']} queries={r['queries']} (paper {r['paper_count']}) "
                  f"longest={r['max_length']} attempts={r['attempts']} estimate={r['estimate']} "
                  f"start={r['start']} noise_queries={r['noise_queries']} "
                  + "".join(f"{k}={v} " for k, v in r["mechanisms"].items())
                  + (f"eta={r['eta']} box_error/eta={r['err_over_eta']:.3g} " if 'eta' in r else "")
                  + (f"box_error/eta_before_probe={r['err_over_pre']:.3g} " if 'err_over_pre' in r
                     else "")
                  + f"{r['wall']:.1f}s box={r['box']:.2f}s learner={r['learner']:.2f}s "
                  f"learner/box={r['ratio']:.2f} queries/paper={r['queries'] / r['paper_count']:.2f}"
                  + ("" if r["status"] == "certified" else f" stage={r['stage']}") + " "
                  f"{r['reason']}",
                  flush=True)
        cert = [r for r in rows if r["status"] == "certified"]
        errs = [r["error"] for r in cert]
        print(f"SUMMARY plan={args.plan} dtype={args.dtype} d={d} H={H}: certified {len(cert)}/{len(rows)}, "
              f"max error {max(errs) if errs else None}, every bound covers: "
              f"{all(r['covers'] for r in cert)}, mean wall {np.mean([r['wall'] for r in rows]):.1f}s, "
              f"max wall {max(r['wall'] for r in rows):.1f}s, queries / paper count "
              f"{np.mean([r['queries'] / r['paper_count'] for r in rows]):.2f}, median learner/box "
              f"{np.median([r['ratio'] for r in rows]):.2f} (box {np.mean([r['box'] for r in rows]):.1f}s, "
              f"learner {np.mean([r['learner'] for r in rows]):.1f}s mean)",
              flush=True)
    if args.grid and args.plan == "stable" and args.dtype == "float64":
        print(targets(summaries), flush=True)


def targets(summaries) -> str:
    """Issue 23's targets on the float64 grid, each with whether this run met it: every run
    certified with its error within its bound and at most 1e-13, queries / paper count at
    most 2.5 (each case's mean), median learner / box at most 2 at d = 16, H = 4 and 6."""
    rows = [r for rs in summaries.values() for r in rs]
    ok = all(r["status"] == "certified" and r["covers"] and r["error"] <= 1e-13 for r in rows)
    qp = max(np.mean([r["queries"] / r["paper_count"] for r in rs]) for rs in summaries.values())
    lb = {k: float(np.median([r["ratio"] for r in summaries[k]]))
          for k in ((16, 4), (16, 6)) if k in summaries}
    met = lambda b: "met" if b else "NOT met"
    return (f"TARGETS (issue 23): {sum(r['status'] == 'certified' for r in rows)}/{len(rows)} "
            f"certified, every error within its bound and <= 1e-13: {met(ok)}; largest case mean "
            f"queries / paper count {qp:.2f} <= 2.5: {met(qp <= 2.5)}; median learner / box "
            + ", ".join(f"{d}x{H} {v:.2f}" for (d, H), v in lb.items())
            + f" <= 2: {met(lb and max(lb.values()) <= 2)}")


if __name__ == "__main__":
    main()
