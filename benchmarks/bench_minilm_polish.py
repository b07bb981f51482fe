"""Why twelve MiniLM heads in d' = 8 defeat the stable plan's per-family fits, and why the
global fit from a close start (the pencil start) does not (docs "Known limits"; needs the
``minilm`` extra).

Part 1 (families): for basis-like families ``(x, x + s e_j)`` of a float64 numpy copy of
all-MiniLM-L6-v2 layer ``--layer`` restricted to d' = 8 (exactlearn.demo.minilm.subspace_model,
seed 0), it prints the rms of the twelve exponents ``log rho_h`` and the smallest gap
between two of them: the per-family fit must separate twelve logistic steps that close.

Part 2 (the polish): it asks the paper's configurations ``(x_i, e_j)`` and ``(x_i, e_1 + e_j)``
as ratio families at each scale of ``--scales`` (tokens on the dyadic grid 2^-20, exact in
float64), then runs the stable plan's polish (exactlearn.strategies.real.stable_polish) from
the true heads perturbed by the relative sizes ``--perturb``: the error against the true
heads, the bound, the noise test, and the normal matrix's spectrum at the true heads.

    python benchmarks/bench_minilm_polish.py --scales 2 4 8 --perturb 1e-6 1e-3 --token-seed 0
"""

from __future__ import annotations

import argparse
import os
import sys
from fractions import Fraction

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import numpy as np                                   # noqa: E402
from gmpy2 import mpq                                # noqa: E402

from float_layers import NumpyAttention             # noqa: E402
from exactlearn.demo.minilm import subspace_model   # noqa: E402
from exactlearn.fields.real import Real             # noqa: E402
from exactlearn.model import Head                   # noqa: E402
from exactlearn.strategies.real import stable_polish as P   # noqa: E402
from exactlearn.strategies.real.stable_normal import spectrum   # noqa: E402
from exactlearn.strategies.real.ratio import family_tokens, ratio_nodes   # noqa: E402

H, D = 12, 8


class Observations:
    """What the polish reads: ``observations``, a list of ``(tokens, y)``."""

    def __init__(self):
        self.observations = []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", type=int, default=0)
    ap.add_argument("--scales", type=float, nargs="+", default=[2.0, 4.0, 8.0])
    ap.add_argument("--perturb", type=float, nargs="+", default=[1e-6, 1e-3])
    ap.add_argument("--noise", type=float, default=5e-14)
    ap.add_argument("--token-seed", type=int, default=0, help="the draw of X and E in part 2")
    args = ap.parse_args(argv)
    model, _ = subspace_model(layer=args.layer, dprime=D, seed=0)
    heads = [(np.array([[float(Fraction(a)) for a in r] for r in h.W]),
              np.array([float(Fraction(a)) for a in h.v])) for h in model.heads]
    box = NumpyAttention(heads)
    K = Real(dps=30)
    rng = np.random.default_rng(0)
    print("part 1: twelve exponents per family (x, x + s e_j)")
    for trial in range(6):
        for s in (1.5, 2.0, 3.0):
            x = np.round(rng.normal(size=D) * s * 2 ** 20) / 2 ** 20
            e = np.zeros(D)
            e[trial % D] = s
            logs = np.sort([e @ W @ x for W, _ in heads])
            print(f"  family {trial} s={s}: rms log rho {np.sqrt(np.mean(logs ** 2)):.2f}, "
                  f"smallest gap {np.diff(logs).min():.3f}")
    rec = Observations()
    nodes = ratio_nodes(H)

    def ask(x, a):
        xq, aq = tuple(mpq(Fraction(float(t))) for t in x), tuple(mpq(Fraction(float(t))) for t in a)
        for k, m in nodes:
            toks = family_tokens(xq, aq, k, m)
            y = box(np.array([[float(t) for t in tok] for tok in toks]))
            rec.observations.append((toks, K.from_output(y)))

    trng = np.random.default_rng(args.token_seed)
    X0 = np.linalg.qr(trng.normal(size=(D, D)))[0]
    E0 = np.linalg.qr(trng.normal(size=(D, D)))[0]
    for sg in args.scales:
        X = np.round(X0 * sg * 2 ** 20) / 2 ** 20
        E = np.round(E0 * sg * 2 ** 20) / 2 ** 20
        for i in range(D):
            for j in range(D):
                ask(X[:, i], X[:, i] + E[:, j])
                if i > 0 and j > 0:
                    ask(X[:, i], X[:, i] + E[:, 0] + E[:, j])
    etas = np.array([args.noise + 1e-15 * abs(float(y)) for _, y in rec.observations])
    print(f"part 2: {len(etas)} queries at scales {args.scales}")
    true = [Head(tuple(tuple(K.ctx.mpf(float(a)) for a in r) for r in W),
                 tuple(K.ctx.mpf(float(a)) for a in v)) for W, v in heads]
    ev = spectrum(true, rec, 0, etas)
    print(f"  normal matrix at the true heads: {len(ev)} unknowns, eigenvalues below the "
          f"largest over 1e8: {int(np.sum(ev < ev[-1] / 1e8))}, over 1e12: "
          f"{int(np.sum(ev < ev[-1] / 1e12))}, over 1e16: {int(np.sum(ev < ev[-1] / 1e16))}")
    for pert in args.perturb:
        start = [Head(tuple(tuple(K.ctx.mpf(float(a) * (1 + pert * rng.normal())) for a in r) for r in W),
                      tuple(K.ctx.mpf(float(a) * (1 + pert * rng.normal())) for a in v))
                 for W, v in heads]
        got = P.polish(start, K, rec, 0, etas)
        if not got.solved:
            print(f"  start perturbed by {pert:g}: the polish does not solve "
                  f"({'too ill-conditioned' if got.weak is not None else 'no convergence'})")
            continue
        out, (fW, rW), (fV, rV), excess = got.heads, got.W_bounds, got.v_bounds, got.excess
        err = max(abs(float(a) - b) for h, (W, v) in zip(out, heads)
                  for a, b in zip([x for row in h.W for x in row] + list(h.v),
                                  list(W.ravel()) + list(v)))
        bound = max(float((2 * fW + rW).max()), float((2 * fV + rV).max()))
        print(f"  start perturbed by {pert:g}: error {err:.3g}, bound {bound:.3g}, "
              f"weighted residual / N {excess:.3g}"
              + ("" if excess <= 1 else " (the noise test fails: not converged)"))


if __name__ == "__main__":
    main()
