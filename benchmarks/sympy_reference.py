"""A plain sympy implementation of the paper plan: the speed reference of issues 2 and 3.

Everything is sympy: the oracle evaluates with ``sympy.Rational`` and
``2**(D*s)``, each configuration is interpolated with
``sympy.polys.polyfuncs.rational_interpolate``, poles come from
``sympy.roots``, heads are matched by products of rho, and W, v are solved with
``sympy.Matrix``.  It uses the same plan (exactlearn.pipeline.plan.paper_plan) and the
same random draw as ``exactlearn learn --seed S --range R``, so both learn the
same thing; it does no certificate and no degeneracy handling beyond raising.

    python benchmarks/sympy_reference.py MODEL.json H [--seed S] [--range R]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import sympy
from sympy import Matrix, Rational, symbols
from sympy.polys.polyfuncs import rational_interpolate

from exactlearn.pipeline.plan import draw_paper_plan


def load(path):
    obj = json.load(open(path))
    heads = [(Matrix([[Rational(x) for x in row] for row in h["W"]]),
              Matrix([Rational(x) for x in h["v"]])) for h in obj["heads"]]
    return obj["d"], heads


def oracle(heads, D, tokens):
    xn = Matrix(tokens[-1])
    out = Rational(0)
    for W, v in heads:
        ws = [2 ** (D * (Matrix(t).T * W * xn)[0]) for t in tokens]
        out += sum(w * (v.T * Matrix(t))[0] for w, t in zip(ws, tokens)) / sum(ws)
    return out


def learn(d, heads, H, seed, R):
    D = sympy.ilcm(*[x.q for W, _ in heads for x in W] + [1])
    rng = random.Random(seed)
    plan = draw_paper_plan(d, H, rng, R)
    k = symbols("k")
    fits = {}
    for n, c in enumerate(plan.configs):
        data = [(j, oracle(heads, D, c.tokens(j))) for j in range(2 * H + 1)]
        P, Q = sympy.fraction(sympy.cancel(rational_interpolate(data, H, X=k)))
        Qp = sympy.Poly(Q, k)
        Qp = Qp * (1 / Qp.eval(0))
        Pp = sympy.Poly(P, k) * (1 / sympy.Poly(Q, k).eval(0))
        dQ = Qp.diff(k)
        poles = []
        for p in sympy.roots(Qp, k):
            rho = -1 / p
            poles.append((rho, rho * Pp.eval(p) / dQ.eval(p)))
        fits[(c.kind, c.i, c.j)] = poles

    def pair(base, other, joint):
        out = []
        for rho, _ in base:
            (r,) = [o for o in other if any(sympy.simplify(rho * o[0] - s[0]) == 0 for s in joint)]
            out.append(r)
        return out

    lab = {(0, 0): fits[("basis", 0, 0)]}
    for i in range(d):
        if i:
            lab[(i, 0)] = pair(lab[(0, 0)], fits[("basis", i, 0)], fits[("across", i, 0)])
        for j in range(1, d):
            lab[(i, j)] = pair(lab[(i, 0)], fits[("basis", i, j)], fits[("within", i, j)])
    X = Matrix([[plan.X[i][r] for i in range(d)] for r in range(d)])
    E = Matrix([[plan.E[j][r] for j in range(d)] for r in range(d)])
    out = []
    for h in range(len(lab[(0, 0)])):
        M = Matrix(d, d, lambda j, i: sympy.log(lab[(i, j)][h][0], 2) / D)
        W = E.T.inv() * M * X.inv()
        v = -E.T.inv() * Matrix([lab[(0, j)][h][1] for j in range(d)])
        out.append((W, v))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("H", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--range", type=int, default=50)
    a = ap.parse_args(argv)
    d, heads = load(a.model)
    t0 = time.perf_counter()
    got = learn(d, heads, a.H, a.seed, a.range)
    print(json.dumps({"seconds": round(time.perf_counter() - t0, 3), "heads": len(got)}))


if __name__ == "__main__":
    sys.exit(main())
