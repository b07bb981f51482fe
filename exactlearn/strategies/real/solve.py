"""The heads from labelled poles over the real field: weighted least squares with
sensitivities (docs: explanation/real-field.md).

Every configuration ``(x, e)`` -- basis, within and across -- measures
``e^T W_h x = log rho_h`` and ``-v_h.e = c_h`` linearly: ``2d^2 - 1`` measurements of
the ``d^2`` entries of ``W_h`` and the ``d`` of ``v_h`` (``d log rho = d rho / rho``).
They are combined by weighted least squares with weights ``1 / B^2`` (``u = G m``,
``G = (A^T Om A)^-1 A^T Om``; with exact data this is the paper's
``W_h = E^-T M_h X^-1``, ``v_h = -E^-T c_h``, docs: explanation/algorithm.md#how-it-works), so a
configuration whose poles crowd is outweighed by the others; ``S_u = G S_m`` (the
weights depend on the data only through the bounds: a second-order effect).
The rounding of the final solves is ``r = 2^-prec 64 N sum_n |G_n m_n|``.

>>> from exactlearn.fields.real import Real
>>> from exactlearn.strategies.real.sensitivity import LO, Sens, sens_context
>>> K = Real(dps=30)
>>> S = sens_context(K)
>>> etas = {0: LO.mpf("1e-20"), 1: LO.mpf("1e-20")}
>>> u, su, ru = wls(K, S, [[1], [1]], [K(2), K(4)], [Sens.unit(S, 0), Sens.unit(S, 1)], etas)
>>> K.format(u[0]), LO.nstr(su[0].bound(etas), 3)          # the mean; its bound
('3.0', '1.0e-20')
"""

from __future__ import annotations

from gmpy2 import mpq

from exactlearn.model import Head
from exactlearn.strategies.real.sensitivity import LO, combine


def wls(K, S, A, meas, sens, etas) -> tuple:
    """Weighted least squares ``min sum_n (A_n . u - meas_n)^2 / B_n^2`` (``B_n`` the
    first-order bound of measurement n): ``u = G meas`` with ``G = (A^T Om A)^-1 A^T Om``;
    returns ``(u, sensitivities G S, rounding allowances)``."""
    ctx = K.ctx
    N, p = len(A), len(A[0])
    bounds = [s.bound(etas) for s in sens]
    # the normal equations lose log2(max w / min w) bits (plus the conditioning of A)
    spread = int(2 * LO.log(max(bounds) / min(bounds), 2)) if min(bounds) > 0 else 0
    with ctx.extraprec(80 + spread):
        om = [1 / K(b) ** 2 for b in bounds]
        Am = [[K(a) for a in row] for row in A]
        normal = ctx.matrix([[ctx.fsum(om[n] * Am[n][i] * Am[n][j] for n in range(N))
                              for j in range(p)] for i in range(p)])
        inv = ctx.inverse(normal)
        G = [[ctx.fsum(inv[i, j] * Am[n][j] for j in range(p)) * om[n] for n in range(N)]
             for i in range(p)]
        u = [ctx.fsum(G[i][n] * meas[n] for n in range(N)) for i in range(p)]
    su = [combine(S, ((G[i][n], sens[n]) for n in range(N))) for i in range(p)]
    ru = [LO.ldexp(64 * N, -K.prec) * LO.fsum(abs(LO.convert(G[i][n] * meas[n]))
                                              for n in range(N)) for i in range(p)]
    return [+x for x in u], su, ru


def solve_heads(plan, fits, index, K, S, etas) -> list:
    """Every head's ``(Head, S_W, R_W, S_v, R_v)`` -- its parameters, their sensitivities and
    rounding allowances (rows of W, then v) -- from the fits and the labels ``index[n][h]``
    (the pole of head h in configuration n), sorted by head."""
    d = plan.d
    configs = plan.configs
    m = len(index[plan.index("basis", 0, 0)])
    A_W = [[mpq(c.e[r]) * mpq(c.x[q]) for r in range(d) for q in range(d)] for c in configs]
    A_v = [[-mpq(c.e[r]) for r in range(d)] for c in configs]
    raw = []
    for h in range(m):
        logs, slogs, cs, scs = [], [], [], []
        for n in range(len(configs)):
            f = fits[n]
            p = index[n][h]
            logs.append(K.log(f.rhos[p]))
            slogs.append(f.srho[p].scaled(1 / f.rhos[p]))
            cs.append(f.cs[p])
            scs.append(f.sc[p])
        w, Sw, Rw = wls(K, S, A_W, logs, slogs, etas)
        v, Sv, Rv = wls(K, S, A_v, cs, scs, etas)
        W = [w[r * d:(r + 1) * d] for r in range(d)]
        SW = [Sw[r * d:(r + 1) * d] for r in range(d)]
        RW = [Rw[r * d:(r + 1) * d] for r in range(d)]
        raw.append((Head(tuple(tuple(r) for r in W), tuple(v)), SW, RW, Sv, Rv))
    raw.sort(key=lambda t: t[0])
    return raw
