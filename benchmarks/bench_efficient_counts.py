"""Queries per prime of the efficient exact plan against the parameter count H(d^2 + d)
(issue 23, sec. 3; docs: explanation/efficient-plan.md).

    PYTHONPATH=$PWD python benchmarks/bench_efficient_counts.py [--d 8 12 16] [--H 2 4 8]
        [--fields modular rational] [--seeds 0 1 2]

Per (field, d, H, seed): a random model (exactlearn.generate.random_model), learned with
plan="efficient"; prints the queries of every prime (the multi-modular method asks the
plan modulo each prime; over the rational field the analysis runs modulo primes too but
the box is asked once), the plan's own count, H(d^2 + d), the ratio, and whether the
answer is certified equal to the canonical heads.
"""

from __future__ import annotations

import argparse
import time

from exactlearn import Modular, Oracle, Rational, learn
from exactlearn.generate import random_model

FIELDS = {"modular": Modular, "rational": Rational}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, nargs="+", default=[8, 12, 16])
    ap.add_argument("--H", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--fields", nargs="+", default=["modular", "rational"], choices=sorted(FIELDS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    a = ap.parse_args(argv)
    print("field     d   H seed  per-prime queries      plan  H(d²+d)  ratio  exact  fallbacks  certificate  s")
    for name in a.fields:
        for d in a.d:
            for H in a.H:
                for seed in a.seeds:
                    model = random_model(d, H, seed=seed)
                    t = time.perf_counter()
                    res = learn(Oracle(model, FIELDS[name]()), d=d, heads=H, seed=seed, plan="efficient")
                    dt = time.perf_counter() - t
                    per = ([r["queries"] for r in res.multimodular["primes"] if r.get("queries")]
                           if res.multimodular else [res.queries])
                    par = H * (d * d + d)
                    ok = res.status == "certified" and res.heads == model.canonical_heads()
                    fb = sum(f["queries"] for f in res.plan_fallbacks)
                    print(f"{name:9s} {d:2d} {H:2d} {seed:4d}  {str(per):20s} {res.plan_queries:6d} {par:8d}"
                          f"  {max(per) / par:5.3f}  {str(ok):5s}  {fb:9d}  {str(res.plan_detail.get('certificate') if res.plan_detail else None):11s}  {dt:5.1f}", flush=True)


if __name__ == "__main__":
    main()
