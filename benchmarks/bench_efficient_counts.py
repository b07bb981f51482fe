"""Queries per prime of the efficient exact plan against the parameter count H(d^2 + d)
(issue 23, sec. 3; docs: explanation/efficient-plan.md).

    PYTHONPATH=$PWD python benchmarks/bench_efficient_counts.py [--d 8 12 16] [--H 2 4 8]
        [--fields modular rational] [--seeds 0 1 2]

Per (field, d, H, seed): a random model (exactlearn.generate.random_model), learned with
plan="efficient"; prints the queries of every prime (the multi-modular method asks the
plan modulo each prime; over the rational field the analysis runs modulo primes too but
the box is asked once), the plan's own count, H(d^2 + d), the ratio, and whether the
answer is certified equal to the canonical heads.

    PYTHONPATH=$PWD python benchmarks/bench_efficient_counts.py --families 300

instead tests ``known_c.poles_known_c`` on that many random families per H = 3, 4, 5, 6, 8
over F_p (random poles and c-values, seed 7): how many its 2H − 2 samples leave undetermined
(a counted fallback in a run) and how many it answers wrongly (must be 0).
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
    ap.add_argument("--families", type=int, default=0, help="test poles_known_c on random families instead")
    a = ap.parse_args(argv)
    if a.families:
        families(a.families)
        return
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


def families(n: int) -> None:
    import random

    from exactlearn.strategies.efficient.known_c import poles_known_c
    K = Modular()
    rng = random.Random(7)
    for H in (3, 4, 5, 6, 8):
        undetermined = wrong = 0
        for _ in range(n):
            rho = [K(rng.randrange(1, 2 ** 100)) for _ in range(H)]
            c = [K(rng.randrange(-10 ** 6, 10 ** 6) or 1) for _ in range(H)]
            gs = [sum((ci / (1 + K(k) * ri) for ri, ci in zip(rho, c)), K.zero) for k in range(1, 2 * H - 1)]
            got = poles_known_c(gs, c, K)
            undetermined += got is None
            wrong += got is not None and got != rho
        print(f"H={H}: {n} random families over F_p, 2H-2 = {2 * H - 2} samples: "
              f"undetermined {undetermined}, wrong {wrong}", flush=True)


if __name__ == "__main__":
    main()
