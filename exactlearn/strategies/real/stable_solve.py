"""The stable plan's solve: heads from labelled families by sparse weighted least squares
(docs "The real field", "The stable plan for
float black boxes", step 4).

In the coordinates ``M = E^T W X`` (``M[j][i] = e_j^T W x_i``) every family measures one
entry of M, or a sum or difference of two, and its c-values ``y_j = c(e_j) = -v.e_j``
likewise (:func:`rows_of`).  Per head, a weighted least-squares fit (:func:`wls_sparse`:
a float64 left inverse G, values by iterative refinement in the field's precision
(:func:`~exactlearn.strategies.real.lsq.refine`), float64
sensitivities ``G S``) gives M and y; then ``W = E^-T M X^-1``, ``v = -E^-T y``
(:func:`solve_stable_heads`).  :func:`undetermined` and :func:`weak_entries` tell the plan
where supplementary families are needed.

>>> from exactlearn.pipeline.plan import Config
>>> rows_of(Config("within", 2, 1, (0,), (0,)))
([((0, 2), 1), ((1, 2), 1)], [(0, 1), (1, 1)])
>>> undetermined([[(0, 1)], [(0, 1), (1, 1)]], 3)
[2]
"""

from __future__ import annotations

import math

import numpy as np

from exactlearn.algebra import linalg
from exactlearn.errors import SingularMatrix
from exactlearn.fields.rational import QQ
from exactlearn.model import Head
from exactlearn.strategies.real.lsq import refine

WEAK = 10                # an entry whose bound proxy exceeds 10 x the median gets supplements
WEIGHT_RANGE = 1e9       # the least squares' bounds span at most this factor


def rows_of(c, k=None):
    """The configuration's ``log rho`` and ``c`` as combinations of the unknowns:
    ``([((j, i), coef)], [(j, coef)])`` with ``M[j][i] = e_j^T W x_i`` and ``y_j = c(e_j)``.
    ``k``: a supplementary family ``(x_i, e_j - e_k)``."""
    if c.kind == "basis":
        return [((c.j, c.i), 1)], [(c.j, 1)]
    if c.kind == "within":
        return [((0, c.i), 1), ((c.j, c.i), 1)], [(0, 1), (c.j, 1)]
    if c.kind == "across":
        return [((c.j, 0), 1), ((c.j, c.i), 1)], [(c.j, 1)]
    return [((c.j, c.i), 1), ((k, c.i), -1)], [(c.j, 1), (k, -1)]


def undetermined(design, p) -> list:
    """The unknowns (column indices) that the rows of ``design`` do not determine."""
    A = np.zeros((max(1, len(design)), p))
    for r, row in enumerate(design):
        for col, coef in row:
            A[r, col] = coef
    _, sv, Vt = np.linalg.svd(A)
    rank = int(np.sum(sv > 1e-9 * sv[0])) if len(sv) else 0
    null = Vt[rank:]
    return [u for u in range(p) if null.size and np.abs(null[:, u]).max() > 1e-6]


def weak_entries(rows, fits, index, m, d) -> list:
    """Entries of M that some head has only poorly determined: a least-squares proxy of its
    bound (``sqrt diag (A^T B^-2 A)^-1``) above WEAK times the median over every head and
    entry, the worst tenth of the entries at most."""
    used = sorted(index)
    A = np.zeros((len(used), d * d))
    for r, n in enumerate(used):
        for (j, i), co in rows[n][0]:
            A[r, j * d + i] = co
    proxies = []
    for h in range(m):
        b = np.array([fits[n].bounds[1 + index[n][h]] for n in used])
        b = np.minimum(b, WEIGHT_RANGE * b.min())
        Aw = A / b[:, None]
        try:
            proxies.append(np.sqrt(np.abs(np.diag(np.linalg.pinv(Aw.T @ Aw, rcond=1e-15)))))
        except np.linalg.LinAlgError:
            return []
    proxies = np.array(proxies)
    worst = proxies.max(axis=0) / np.median(proxies)      # against every head's median
    weak = [u for u in np.argsort(-worst) if worst[u] > WEAK]
    return weak[:max(1, d * d // 10)]


def wls_sparse(K, design, p, meas, bounds, sens_rows, n_obs):
    """Weighted least squares of ``meas`` (mpf) over the ``design`` (rows of
    ``(unknown, coefficient)``): values in the field's precision (float64 G plus iterative
    refinement), float64 sensitivities ``S = G S_meas`` (p x n_obs)."""
    ctx = K.ctx
    N = len(design)
    A = np.zeros((N, p))
    for n, row in enumerate(design):
        for col, coef in row:
            A[n, col] = coef
    b = np.asarray(bounds, dtype=float)
    # any left inverse G gives an unbiased estimator whose sensitivities G S are exact, so the
    # weights need not be optimal: capping the bounds' range at 1e9 keeps the weighted matrix's
    # condition (and so G A - I, which the refinement removes) well inside float64
    b = np.minimum(np.maximum(b, 1e-300), WEIGHT_RANGE * max(b.min(), 1e-300))
    sw = 1 / b
    try:
        G = np.linalg.pinv(A * sw[:, None], rcond=1e-14) * sw[None, :]
    except np.linalg.LinAlgError:
        raise SingularMatrix("the weighted least-squares system of a head is singular") from None
    with ctx.extraprec(30):
        Gm = [[ctx.mpf(float(g)) for g in row] for row in G]

        def step(u):                   # G (A u - meas): G A = I + O(eps), a contraction
            r = [ctx.fsum(co * u[c] for c, co in design[n]) - meas[n] for n in range(N)]
            return [ctx.fdot(row, r) for row in Gm]

        out = refine(ctx, step, [ctx.fdot(row, meas) for row in Gm], goal=ctx.ldexp(1, -ctx.prec),
                     steps=16, floor=math.inf)         # converged, or at the rounding floor
        if not out.converged:
            raise SingularMatrix("the refinement of a head's least-squares solve did not converge")
        u, size = out.theta, out.size
    S = np.zeros((p, n_obs))
    for n, (ids, row) in enumerate(sens_rows):
        S[:, ids] += np.outer(G[:, n], row)
    return [+x for x in u], S, 2 * float(size)


def solve_stable_heads(plan, rows, fits, ids, index, K, m, n_obs):
    """Heads in the field's precision and their float64 sensitivities (module doc, step 5);
    ``rows[n]`` from :func:`_rows`."""
    d = plan.d
    used = sorted(index)
    dW = [[(j * d + i, co) for (j, i), co in rows[n][0]] for n in used]
    dv = [rows[n][1] for n in used]
    for design, p, what in ((dW, d * d, "W"), (dv, d, "v")):
        if undetermined(design, p):
            raise SingularMatrix(f"the {len(used)} configurations that could be labelled do not "
                                 f"determine every entry of {what}")
    Xq = [[QQ(plan.X[i][r]) for i in range(d)] for r in range(d)]     # columns -> matrix
    Eq = [[QQ(plan.E[j][r]) for j in range(d)] for r in range(d)]
    Xinv = linalg.inverse(Xq, QQ)
    EinvT = linalg.transpose(linalg.inverse(Eq, QQ))
    Xi = np.array([[float(a) for a in row] for row in Xinv])
    Ei = np.array([[float(a) for a in row] for row in EinvT])
    XiK = [[K(a) for a in row] for row in Xinv]
    EiK = [[K(a) for a in row] for row in EinvT]
    heads, SWs, Svs, rounds = [], [], [], []
    e_norm = float(np.abs(Ei).sum(axis=1).max())
    x_norm = float(np.abs(Xi).sum(axis=0).max())
    floor = float(K.ctx.ldexp(1, -K.prec)) * 64 * d * d
    for h in range(m):
        ml, bl, sl, mc, bc, sc = [], [], [], [], [], []
        for n in used:
            f = fits[n]
            p = index[n][h]
            ml.append(f.logs[p])
            bl.append(f.bounds[1 + p])
            sl.append((ids[n], f.G[1 + p]))
            mc.append(f.cs[p])
            bc.append(f.bounds[1 + m + p])
            sc.append((ids[n], f.G[1 + m + p]))
        Mu, SM, rM = wls_sparse(K, dW, d * d, ml, bl, sl, n_obs)
        cu, Sc, rc = wls_sparse(K, dv, d, mc, bc, sc, n_obs)
        M = [[Mu[j * d + i] for i in range(d)] for j in range(d)]
        # W = E^-T M X^-1, v = -E^-T c
        EM = [[K.ctx.fsum(EiK[r][j] * M[j][i] for j in range(d)) for i in range(d)] for r in range(d)]
        W = tuple(tuple(K.ctx.fsum(EM[r][i] * XiK[i][q] for i in range(d)) for q in range(d))
                  for r in range(d))
        v = tuple(-K.ctx.fsum(EiK[r][j] * cu[j] for j in range(d)) for r in range(d))
        SMr = SM.reshape(d, d, n_obs)
        SW = np.einsum("rj,jin,iq->rqn", Ei, SMr, Xi, optimize=True).reshape(d * d, n_obs)
        heads.append(Head(W, v))
        SWs.append(SW)
        Svs.append(-(Ei @ Sc))
        size = max(abs(float(a)) for row in W for a in row) + max(abs(float(a)) for a in v)
        rounds.append((rM * e_norm * x_norm + floor * size, rc * e_norm + floor * size))
    return heads, SWs, Svs, rounds
