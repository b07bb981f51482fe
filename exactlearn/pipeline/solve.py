"""Solve for the heads from labelled configurations (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works).

For head h, ``M_h[j][i] = log rho_h(x_i, e_j) = e_j^T W_h x_i``, so
``M_h = E^T W_h X`` and ``W_h = E^{-T} M_h X^{-1}`` (in the parameter domain:
exact rationals for the exact fields).  Its c-values give
``c_h(x_1, e_j) = -v_h . e_j``, so ``v_h = -E^{-T} c_h`` (solved in the field,
then converted with ``K.to_param``: rational reconstruction in F_p).
"""

from __future__ import annotations

import math

from exactlearn.algebra import linalg
from exactlearn.model import Head


def _inverses(plan, P):
    """(E^{-T}, X^{-1}) over P, with X, E the plan's columns."""
    d = plan.d
    Xm = [[P(plan.X[i][r]) for i in range(d)] for r in range(d)]
    Et = [[P(plan.E[j][r]) for r in range(d)] for j in range(d)]
    return linalg.inverse(Et, P), linalg.inverse(Xm, P)


def solve_W(plan, logs, P, inverses=None):
    """W = E^{-T} M X^{-1} for ``logs[(i, j)] = e_j^T W x_i`` in the param field P.

    Over Q the products run on python-flint ``fmpq_mat`` (same exact result)."""
    d = plan.d
    if P.is_rational:
        return _solve_W_flint(plan, logs)
    Etinv, Xinv = inverses or _inverses(plan, P)
    M = [[logs[(i, j)] for i in range(d)] for j in range(d)]
    W = linalg.matmul(linalg.matmul(Etinv, M, P), Xinv, P)
    return tuple(tuple(row) for row in W)


def _solve_W_flint(plan, logs):
    """One head's W over Q by :func:`_solve_W_all_flint`'s two fraction-free solves (the same
    exact W as ``E^{-T} M X^{-1}`` with fmpq matrices, which at d = 384 took about 7 minutes a
    head against 10 s)."""
    return _solve_W_all_flint(plan, [logs])[0]


def solve_v(plan, cs, K, Etinv=None):
    """v = -E^{-T} c for ``cs[j] = -v . e_j`` (field K); returns field elements."""
    d = plan.d
    if Etinv is None:
        Et = [[K(plan.E[j][r]) for r in range(d)] for j in range(d)]
        Etinv = linalg.inverse(Et, K)
    return linalg.matvec(Etinv, [-c for c in cs], K)


def solve_heads(plan, labelled, K, log=None) -> list:
    """Raw recovered heads (param domain) from ``labelled[(i, j)] = [(rho_h, c_h)]``.

    Over Q (the exact fields' parameters) every head's W comes from one solve
    ``E^T [W_1 X ... W_m X] = [M_1 ... M_m]`` and one inverse of X (python-flint
    ``fmpq_mat``), the same exact W as head by head.  ``log(i, j, h)``, when given,
    is ``K.log`` of head h's rho at (x_i, e_j) computed elsewhere (a cluster's,
    :mod:`exactlearn.pipeline.distributed`)."""
    if not labelled[(0, 0)]:
        return []
    if K.param.is_rational:
        pairs = _solved_in_chunks(plan, labelled, K, log, plan.d, lambda logs: _solve_W_all_flint(plan, logs))
    else:
        inv_P = _inverses(plan, K.param)
        pairs = _solved_in_chunks(plan, labelled, K, log, plan.d,
                                  lambda logs: [solve_W(plan, lg, K.param, inv_P) for lg in logs])
    return [Head(W, v) for W, v in pairs]


def _solved_in_chunks(plan, labelled, K, log, n, solve) -> list:
    """``[(solve's W of head h, v_h)]``: head by head its ``{(i, j): log rho}`` over the n
    final tokens (``n = d`` for :func:`solve_heads`, ``d + 1`` for
    :func:`solve_heads_bias`) and the d directions, then its v (so failures come in that
    order), and ``solve(logs)`` on each chunk of heads within :data:`SOLVE_BUDGET` (over Q;
    else all at once) before the next chunk's logs are taken: at d = 384 the 12 heads'
    logs at once held about 300 MB on the driver (docs/explanation/performance.md)."""
    d, m = plan.d, len(labelled[(0, 0)])
    per = _heads_per_solve(plan) if K.param.is_rational else m
    Etinv_K = linalg.inverse([[K(plan.E[j][r]) for r in range(d)] for j in range(d)], K)
    keys = [(i, j) for i in range(n) for j in range(d)]
    batch = getattr(K, "logs", None) if log is None else None     # Modular: a head's logs at once
    out = []
    for t in range(0, m, per):
        logs, vs = [], []
        for h in range(t, min(m, t + per)):
            if batch is not None:
                vals = batch([labelled[key][h][0] for key in keys])
            else:
                vals = [K.log(labelled[key][h][0]) if log is None else log(*key, h) for key in keys]
            logs.append(dict(zip(keys, vals)))
            v = solve_v(plan, [labelled[(0, j)][h][1] for j in range(d)], K, Etinv_K)
            vs.append(tuple(K.to_param(x) for x in v))
        out.extend(zip(solve(logs), vs))
        del logs
    return out


def _heads_per_solve(plan) -> int:
    """Heads per python-flint solve of :func:`_solve_W_all_flint` within :data:`SOLVE_BUDGET`."""
    return max(1, SOLVE_BUDGET // (plan.d * plan.d * (plan.d + 1)))


#: Budget of one python-flint solve of :func:`_solve_W_all_flint`: d^2 times its right-hand
#: columns (the size of its intermediate entries grows with d too).  All heads at once up to
#: d = 64 with H = 32 (with biases too), as before; one head at a time at d = 384.
SOLVE_BUDGET = 64 * 64 * 65 * 32


def _solve_W_all_flint(plan, logs_per_head, bias=False) -> list:
    """:func:`_solve_W_flint` for every head at once: ``E^T Y = [M_1 ... M_m]`` and then
    ``X^T [W_1^T ... W_m^T] = [Y_1^T ... Y_m^T]``, two python-flint solves (fraction-free,
    in C) instead of products with X^{-1}, whose entries are tall rationals: the same
    exact W.  ``bias``: the plan for biases, X~ = [[x_0 .. x_d], [1 .. 1]] in X's place and
    each head's ``[W_h | u_h]`` (rows of d + 1 entries) returned (:func:`solve_heads_bias`).

    Its callers (:func:`_solved_in_chunks`) pass chunks of heads within :data:`SOLVE_BUDGET`:
    the fraction-free solve's intermediate entries are about d times the plan's bits, so at
    d = 384 the 12 heads at once held several GB (docs/explanation/performance.md, "MiniLM
    with its biases at full width"); each chunk gives the same exact values."""
    import flint
    from gmpy2 import mpq
    d, m = plan.d, len(logs_per_head)
    n = d + 1 if bias else d                       # columns of X (X~)
    cols = [tuple(plan.X[i]) + ((1,) if bias else ()) for i in range(n)]
    X = flint.fmpz_mat(n, n, [cols[i][r] for r in range(n) for i in range(n)])
    Et = flint.fmpz_mat(d, d, [plan.E[j][r] for j in range(d) for r in range(d)])
    den = 1
    for lg in logs_per_head:
        for x in lg.values():
            den = den * int(x.denominator) // math.gcd(den, int(x.denominator))
    N = flint.fmpz_mat(d, n * m, [int(lg[(i, j)] * den) for j in range(d) for lg in logs_per_head
                                  for i in range(n)])
    Y = Et.solve(N)                        # E^{-T} [M_1 ... M_m] den, d x nm
    nm, dm = n * m, d * m
    if m == 1:      # in C: Y's entries, about d times the plan's bits, never become Python objects
        YT = Y.transpose()
    else:
        Y = Y.entries()                    # row-major
        YT = flint.fmpq_mat(n, dm, [Y[r * nm + h * n + c] for c in range(n) for h in range(m) for r in range(d)])
    del Y
    Z = flint.fmpq_mat(X.transpose()).solve(YT).entries()     # Z[c, h d + r] = den W_h[r, c]
    return [tuple(tuple(mpq(int(z.p), int(z.q) * den) for z in (Z[c * dm + h * d + r] for c in range(n)))
                  for r in range(d)) for h in range(m)]


def solve_heads_bias(plan, labelled, K, log=None) -> list:
    """Raw recovered heads (W, v, u) of the plan for biases (docs: explanation/biases.md)
    from ``labelled[(i, j)] = [(rho_h, c_h)]``, i = 0..d: with
    ``M_h[j][i] = log rho_h(x_i, e_j) = e_j^T (W_h x_i + u_h)``,
    ``E^T [W_h | u_h] X~ = M_h`` for ``X~ = [[x_0 .. x_d], [1 .. 1]]``, so
    ``[W_h | u_h] = E^{-T} M_h X~^{-1}`` (parameter domain); v as in :func:`solve_heads`."""
    d = plan.d
    if not labelled[(0, 0)]:
        return []
    P = K.param
    if P.is_rational:                      # two python-flint solves (the same exact [W | u])
        solve = lambda logs: _solve_W_all_flint(plan, logs, bias=True)   # noqa: E731
    else:
        Etinv = linalg.inverse([[P(plan.E[j][r]) for r in range(d)] for j in range(d)], P)
        Xt = [[P(plan.X[i][r]) for i in range(d + 1)] for r in range(d)] + [[P.one] * (d + 1)]
        Xtinv = linalg.inverse(Xt, P)
        solve = lambda logs: [linalg.matmul(linalg.matmul(Etinv, [[lg[(i, j)] for i in range(d + 1)]   # noqa: E731
                                                              for j in range(d)], P), Xtinv, P) for lg in logs]
    return [Head(tuple(tuple(row[:d]) for row in WU), v, tuple(row[d] for row in WU))
            for WU, v in _solved_in_chunks(plan, labelled, K, log, d + 1, solve)]
