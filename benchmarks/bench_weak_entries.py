"""Where the stable plan's errors sit against the polish's bounds (docs/howto/float-black-box.md,
"The polish asks for its weak entries").

For each grid case and seed (the numpy float64 layers of tests/float_layers.py, as
bench_float.py) it learns the layer and prints the largest error of W against the layer's own
weights, the rank of that entry among the certified per-entry bounds (``W_bounds``; 0: the
largest), the largest bound over the median, and the families the polish asked
(``targeted_families``).  ``--polish-rounds 0`` learns without the families the polish asks for
its weak entries (exactlearn.strategies.real.stable_ask_more.POLISH_ROUNDS):

    python benchmarks/bench_weak_entries.py --polish-rounds 0
    python benchmarks/bench_weak_entries.py --cases 8x4 12x4 --seeds 2
    python benchmarks/bench_weak_entries.py --runs 12:3:6 16:2:20 --polish-factor 3

``--runs d:H:seed ...`` learns those runs instead of the grid's; ``--polish-factor`` sets
``POLISH_BOUND_FACTOR`` (a W entry is weak above that many times the median bound).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import numpy as np                                          # noqa: E402

import exactlearn.strategies.real.stable_ask_more as more   # noqa: E402
from exactlearn import learn                                # noqa: E402
from exactlearn.fields.real import Real                     # noqa: E402
from exactlearn.model import Head, canonicalize             # noqa: E402
from exactlearn.strategies.real.learn import max_parameter_error   # noqa: E402
from float_layers import NumpyAttention                     # noqa: E402
from gmpy2 import mpq                                       # noqa: E402

GRID = ["4x2", "6x2", "6x3", "8x2", "8x3", "8x4", "12x2", "12x3", "12x4", "12x6", "16x2",
        "16x3", "16x4", "16x6"]


def one(d, H, seed):
    layer = NumpyAttention.from_seed(d, H, seed, std=0.5, dtype=np.float64)
    truth = canonicalize([Head(tuple(tuple(mpq(a) for a in r) for r in W), tuple(mpq(a) for a in v))
                          for W, v in layer.exact_heads()])
    K = Real(dps=30)
    res = learn(layer, d=d, heads=H, field=K, tokens="float64", plan="stable", noise=5e-14,
                noise_rel=1e-15, seed=seed)
    if not res.certified:
        return f"{d}x{H} seed={seed} {res.status}: {res.error[:100]}", None
    err, pairing = max_parameter_error(res.heads, truth, K)
    E, B = [], []
    for t, r in enumerate(pairing):
        E.append(np.abs(np.array([[float(a) for a in row] for row in truth[t].W])
                        - np.array([[float(a) for a in row] for row in res.heads[r].W])).ravel())
        B.append(np.array([[float(a) for a in row] for row in res.detail.W_bounds[r]]).ravel())
    E, B = np.concatenate(E), np.concatenate(B)
    w = int(np.argmax(E))
    rank = int((B > B[w]).sum())
    paper = 4 * H * d * d - 2 * H + 1
    return (f"{d}x{H} seed={seed} err={float(err):.2e} W_err={E.max():.2e} its_bound={B[w]:.2e} "
            f"rank={rank}/{len(B)} max/median_bound={B.max() / np.median(B):.1f} "
            f"queries/paper={res.queries / paper:.2f} "
            f"targeted={res.real_detail['targeted_families']}"), (float(err), rank, B.max() / np.median(B))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=GRID)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--polish-rounds", type=int, default=more.POLISH_ROUNDS)
    ap.add_argument("--polish-factor", type=float, default=more.POLISH_BOUND_FACTOR)
    ap.add_argument("--runs", nargs="+", metavar="D:H:SEED", default=None)
    a = ap.parse_args(argv)
    more.POLISH_ROUNDS, more.POLISH_BOUND_FACTOR = a.polish_rounds, a.polish_factor
    runs = ([tuple(map(int, r.split(":"))) for r in a.runs] if a.runs else
            [(*map(int, c.split("x")), seed) for c in a.cases for seed in range(a.seeds)])
    rows = []
    for d, H, seed in runs:
        line, row = one(d, H, seed)
        print(line, flush=True)
        if row is not None:
            rows.append(row)
    above = [r for r in rows if r[0] > 1e-13]
    print(f"SUMMARY polish_rounds={a.polish_rounds} polish_factor={a.polish_factor:g}: "
          f"{len(rows)} certified, the worst error's entry "
          f"has the largest bound in {sum(r[1] == 0 for r in rows)}; {len(above)} above 1e-13, "
          f"their largest bound {min((r[2] for r in above), default=0):.1f} to "
          f"{max((r[2] for r in above), default=0):.1f} times the median")


if __name__ == "__main__":
    main()
