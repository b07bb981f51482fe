"""The solve: heads from labelled families by sparse weighted least squares
(docs: explanation/real-field.md#the-stable-plan-for-float-black-boxes, step 4;
docs: explanation/biases.md#over-the-real-field).

In the coordinates ``M = E^T W X`` every family measures one entry of M, or a sum or
difference of two, and its c-values ``y_j = c(e_j) = -v.e_j`` likewise (:func:`rows_of`; with
biases ``M~ = E^T [W | u] X~``, ``X~ = [[x_0 .. x_d], [1 .. 1]]``, any scale:
:func:`rows_bias`).  Per head :func:`wls_sparse` fits them (a float64 left inverse G, values
refined in the field's precision, float64 sensitivities ``G S``); then ``W = E^-T M X^-1``,
``v = -E^-T y`` (:func:`solve_stable_heads`; with biases :func:`solve_bias_heads`, the constant
from the single-token limits ``A = c + V.a``).  :func:`undetermined` tells the plan where
supplementary families are needed.

>>> from exactlearn.pipeline.plan import Config
>>> rows_of(Config("within", 2, 1, (0,), (0,)))
([((0, 2), 1), ((1, 2), 1)], [(0, 1), (1, 1)])
>>> undetermined([[(0, 1)], [(0, 1), (1, 1)]], 3)
[2]
"""

from __future__ import annotations

import math

import gmpy2
import numpy as np
from mpmath.libmp import from_rational, round_nearest

from exactlearn.algebra import linalg
from exactlearn.errors import SingularMatrix
from exactlearn.fields.rational import QQ
from exactlearn.model import Head
from exactlearn.strategies.real.lsq import (Mpfr, field_precision, fixed_step, from_mpfr, refine,
                                            to_mpfr)

WEIGHT_RANGE = 1e9       # the least squares' bounds span at most this factor


def rows_of(c):
    """The plan configuration's ``log rho`` and ``c`` as combinations of the unknowns:
    ``([((j, i), coef)], [(j, coef)])`` with ``M[j][i] = e_j^T W x_i`` and ``y_j = c(e_j)``
    (a supplementary family's:
    :func:`~exactlearn.strategies.real.stable_supplement._extra_rows`)."""
    if c.kind == "basis":
        return [((c.j, c.i), 1)], [(c.j, 1)]
    if c.kind == "within":
        return [((0, c.i), 1), ((c.j, c.i), 1)], [(0, 1), (c.j, 1)]
    if c.kind != "across":
        raise ValueError(f"no rows for a configuration of kind {c.kind!r}")
    return [((c.j, 0), 1), ((c.j, c.i), 1)], [(c.j, 1)]


def bias_frame(X, E):
    """``(X~^-1, E^-1)`` as exact rationals for the d + 1 final tokens ``X`` and the d
    directions ``E`` (lists of vectors) of the plan for biases (a :class:`_Frame`)."""
    d = len(E)
    Xt = [[QQ(X[i][r]) for i in range(d + 1)] for r in range(d)] + [[QQ(1)] * (d + 1)]
    Em = [[QQ(E[j][r]) for j in range(d)] for r in range(d)]
    return _Frame(linalg.inverse(Xt, QQ), linalg.inverse(Em, QQ))


class _Frame(tuple):
    """``(X~^-1, E^-1)``, and each as an integer matrix over one denominator (``ints``), so
    that :func:`rows_bias` forms ``alpha`` and ``beta`` from integer dot products: their entries
    have denominators of ~200 digits at d = 32, where the rational sums took 7 ms a family."""

    def __new__(cls, Xi, Ei):
        self = super().__new__(cls, (Xi, Ei))
        self.ints = tuple(_integers(M) for M in (Xi, Ei))
        return self

    def __getnewargs__(self):           # pickle and copy (review helper-76)
        return tuple(self)


def _integers(M) -> tuple:
    """``(N, D)``: the integer matrix ``N = D M`` and the least common denominator ``D``."""
    D = math.lcm(*(int(QQ(a).denominator) for row in M for a in row))
    return [[int(QQ(a) * D) for a in row] for row in M], D


def _times(ints, v) -> tuple:
    """``N v / D`` (``ints = (N, D)``) for a vector ``v`` of rationals, exactly, as integer
    numerators over one denominator: ``([N v dv], D dv)``."""
    N, D = ints
    q = [QQ(a) for a in v]
    dv = math.lcm(*(int(a.denominator) for a in q))
    vn = [int(a * dv) for a in q]
    return [sum(n * x for n, x in zip(row, vn)) for row in N], D * dv


def rows_bias(frame, x, e, f, K):
    """The rows of a family of the plan for biases asked at scale ``f`` (its actual tokens
    ``x`` and ``e``, in ``K``): ``log rho = sum beta_j alpha_i M~[j][i]`` (unknown
    ``j (d + 1) + i``) with ``(x; 1) = X~ alpha`` and ``e = E beta``, and its c-values taken
    back to scale 1 (``c / f``, as the plan's fits are) ``sum (beta_j / f) y_j``; exact
    coefficients (``frame`` from :func:`bias_frame`).

    >>> from exactlearn.fields import Real
    >>> frame = bias_frame([(0, 0), (1, 0), (0, 1)], [(1, 0), (0, 1)])
    >>> rows_bias(frame, (2, 0), (0, 2), 2, Real(dps=20))      # (2 x_1, 2 e_2): 4 M[1][1] - 2 M[1][0]
    ([((1, 0), mpf('-2.0')), ((1, 1), mpf('4.0'))], [(1, mpf('1.0'))])
    """
    d = len(frame[1])
    an, ad = _times(frame.ints[0], [QQ(a) for a in x] + [QQ(1)])     # X~^-1 (x; 1) = an / ad
    bn, bd = _times(frame.ints[1], e)                                  # E^-1 e = bn / bd
    f = QQ(f)
    mk, prec = K.ctx.make_mpf, K.ctx.prec    # K(p / q), rounded once: p / q need not be reduced
    lw = [((j, i), mk(from_rational(bn[j] * an[i], bd * ad, prec, round_nearest)))
          for j in range(d) for i in range(d + 1) if bn[j] != 0 and an[i] != 0]
    lc = [(j, mk(from_rational(bn[j] * int(f.denominator), bd * int(f.numerator), prec,
                               round_nearest))) for j in range(d) if bn[j] != 0]
    return lw, lc


def undetermined(design, p) -> list:
    """The unknowns (column indices) that the rows of ``design`` do not determine."""
    A = _dense(design, max(p, len(design)), p)     # zero rows below: the full null space in Vt
    _, sv, Vt = np.linalg.svd(A, full_matrices=False)
    rank = int(np.sum(sv > 1e-9 * sv[0])) if len(sv) else 0
    null = Vt[rank:]
    return [u for u in range(p) if null.size and np.abs(null[:, u]).max() > 1e-6]


def _dense(design, rows, p):
    """The ``design`` (rows of ``(unknown, coefficient)``) as a float64 ``rows x p`` matrix."""
    A = np.zeros((rows, p))
    for n, row in enumerate(design):
        for col, coef in row:
            A[n, col] = coef
    return A


def wls_sparse(K, design, p, meas, bounds, sens_rows, n_obs, map_rows=None):
    """Weighted least squares of ``meas`` (mpf) over the ``design`` (rows of
    ``(unknown, coefficient)``): values in the field's precision (float64 G plus iterative
    refinement), float64 sensitivities ``S = T G S_meas`` (n_obs columns), ``T`` the linear
    map ``map_rows`` of the unknowns to the quantities wanted (identity when None), applied to
    ``G`` (p x measurements) before the product with the observations' sparse ``S_meas``."""
    ctx = K.ctx
    N = len(design)
    A = _dense(design, N, p)
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
    with ctx.extraprec(30), field_precision(ctx):    # gmpy2 at 30 bits more (lsq.Mpfr)
        slack = [0.0]
        rows = [[(c, to_mpfr(co) if hasattr(co, "_mpf_") else gmpy2.mpfr(co)) for c, co in row]
                for row in design]
        mk = [to_mpfr(ctx.mpf(x)) for x in meas]
        step = fixed_step(G, lambda u: [gmpy2.fsum([co * u[c] for c, co in rows[n]]) - mk[n]
                                        for n in range(N)], slack)    # G (A u - meas)
        start = [float(x) for x in G @ np.array([float(x) for x in meas])]
        out = refine(Mpfr, step, start, goal=gmpy2.mul_2exp(1, -int(ctx.prec)), steps=16,
                     floor=math.inf)         # converged, or at the rounding floor
        if not out.converged:
            raise SingularMatrix("the refinement of a head's least-squares solve did not converge")
        u, size = [from_mpfr(ctx, x) for x in out.theta], float(out.size) + slack[0]
    TG = G if map_rows is None else map_rows(G)
    return [+x for x in u], _sensitivities(TG, sens_rows, n_obs), 2 * float(size)


def _sensitivities(G, sens_rows, n_obs):
    """``S = G S_meas`` (p x n_obs), kept as its factors (:class:`Sensitivities`): measurement
    n's sensitivity row ``row`` over the observations ``ids`` (``sens_rows[n] = (ids, row)``)
    as one sparse matrix, an observation that several measurements share summed."""
    from scipy.sparse import csr_matrix
    lens = [len(ids) for ids, _ in sens_rows]
    SmT = csr_matrix((np.concatenate([np.asarray(r, dtype=float) for _, r in sens_rows]),
                      (np.concatenate([np.asarray(ids, dtype=np.intp) for ids, _ in sens_rows]),
                       np.repeat(np.arange(len(sens_rows)), lens))),
                     shape=(n_obs, len(sens_rows)))            # S_meas^T, n_obs x N
    return Sensitivities(np.ascontiguousarray(G), SmT)


class Sensitivities:
    """The solve's sensitivities ``S = TG S_meas`` (p x n_obs) as their factors: ``TG`` (p x N
    measurements, dense) and ``SmT = S_meas^T`` (n_obs x N, sparse).  An observation belongs to
    one family, hence to one measurement of a head, except the single-token queries several
    families share; so ``|S| eta`` (:meth:`bounds`) is ``|TG| (|S_meas| eta)`` over the others
    and a dense product over the shared ones alone -- never the p x n_obs matrix, which at
    d = 32, H = 4 is 4 arrays of about 0.5 GB.  The certificate of the solve's own heads reads
    the factors too (:class:`~exactlearn.strategies.real.stable_checks.SolveAllowance`);
    :meth:`dense` forms ``S`` where it is small (the v rows, for the constant's sensitivity
    with biases)."""

    def __init__(self, TG, SmT):
        self.TG, self.SmT = TG, SmT

    def bounds(self, etas) -> np.ndarray:
        """``|S| etas`` (p): the first-order bound of each quantity."""
        etas = np.asarray(etas, dtype=float)
        SmT = self.SmT
        nnz = np.diff(SmT.indptr)
        one = np.flatnonzero(nnz == 1)
        w = abs(SmT[one]).T @ etas[one]                         # N: per measurement
        out = np.abs(self.TG) @ w
        shared = np.flatnonzero(nnz > 1)
        if len(shared):
            out += np.abs(self.TG @ SmT[shared].T.toarray()) @ etas[shared]
        return out

    def dense(self) -> np.ndarray:
        """``S`` itself (p x n_obs)."""
        return (self.SmT @ self.TG.T).T


def solve_stable_heads(plan, rows, fits, ids, index, K, m, n_obs):
    """Heads in the field's precision and their float64 sensitivities (module doc, step 5);
    ``rows[n]`` from :func:`rows_of`."""
    d = plan.d
    Xq = [[QQ(plan.X[i][r]) for i in range(d)] for r in range(d)]     # columns -> matrix
    Eq = [[QQ(plan.E[j][r]) for j in range(d)] for r in range(d)]
    return _solve_M(rows, fits, ids, index, K, m, n_obs, linalg.inverse(Xq, QQ),
                    linalg.transpose(linalg.inverse(Eq, QQ)), d)


def _solve_M(rows, fits, ids, index, K, m, n_obs, Xinv, EinvT, d):
    """Per head, M (``d x dc``, ``dc = len(Xinv)``: d, or d + 1 with biases) and the c-values
    by :func:`wls_sparse`, then ``W = E^-T M X^-1`` (``[W | u] = E^-T M~ X~^-1``) and
    ``v = -E^-T c``: ``(heads, SWs, Svs, rounds)``, ``SWs[h]`` with ``d dc`` rows."""
    dc = len(Xinv)
    used = sorted(index)
    dW = [[(j * dc + i, co) for (j, i), co in rows[n][0]] for n in used]
    dv = [rows[n][1] for n in used]
    for design, p, what in ((dW, d * dc, "W" if dc == d else "W and u"), (dv, d, "v")):
        if undetermined(design, p):
            raise SingularMatrix(f"the {len(used)} configurations that could be labelled do not "
                                 f"determine every entry of {what}")
    Xi = np.array([[float(a) for a in row] for row in Xinv])
    Ei = np.array([[float(a) for a in row] for row in EinvT])
    XiK = [[K(a) for a in row] for row in Xinv]
    EiK = [[K(a) for a in row] for row in EinvT]
    e_norm = float(np.abs(Ei).sum(axis=1).max())
    x_norm = float(np.abs(Xi).sum(axis=0).max())
    floor = float(K.ctx.ldexp(1, -K.prec)) * 64 * dc * dc
    ctx = K.ctx
    heads, SWs, Svs, rounds = [], [], [], []

    def to_W(G):                        # rows (j, i) of M -> rows (r, q) of E^-T M X^-1
        N = G.shape[1]
        T = (Ei @ G.reshape(d, dc * N)).reshape(d, dc, N)
        return np.einsum("iq,riN->rqN", Xi, T).reshape(d * dc, N)
    for h in range(m):
        ml, bl, sl, mc, bc, sc = _head_measurements(fits, ids, index, used, h, m)
        # W = E^-T M X^-1 and v = -E^-T c, applied to the measurements' left inverses
        Mu, SW, rM = wls_sparse(K, dW, d * dc, ml, bl, sl, n_obs, map_rows=to_W)
        cu, Sv, rc = wls_sparse(K, dv, d, mc, bc, sc, n_obs, map_rows=lambda G: -(Ei @ G))
        Wt, v = _heads_of_M(ctx, EiK, XiK, Mu, cu, d, dc)
        heads.append(Head(Wt, v) if dc == d else
                     Head(tuple(tuple(row[:d]) for row in Wt), v, tuple(row[d] for row in Wt)))
        SWs.append(SW)
        Svs.append(Sv)
        size = max(abs(float(a)) for row in Wt for a in row) + max(abs(float(a)) for a in v)
        rounds.append((rM * e_norm * x_norm + floor * size, rc * e_norm + floor * size))
    return heads, SWs, Svs, rounds


def _heads_of_M(ctx, EiK, XiK, Mu, cu, d, dc):
    """``W = E^-T M X^-1`` and ``v = -E^-T c`` in the field's precision, each product rounded
    to it and each sum of products rounded once (mpmath's ``fsum``, in gmpy2: the same
    numbers, :func:`~exactlearn.strategies.real.lsq.to_mpfr`)."""
    with field_precision(ctx):
        Ei = [[to_mpfr(a) for a in row] for row in EiK]
        Xi = [[to_mpfr(a) for a in row] for row in XiK]
        M = [[to_mpfr(Mu[j * dc + i]) for i in range(dc)] for j in range(d)]
        EM = [[gmpy2.fsum([Ei[r][j] * M[j][i] for j in range(d)]) for i in range(dc)]
              for r in range(d)]
        Wt = [[gmpy2.fsum([EM[r][i] * Xi[i][q] for i in range(dc)]) for q in range(dc)]
              for r in range(d)]
        c = [to_mpfr(a) for a in cu]
        v = [-gmpy2.fsum([Ei[r][j] * c[j] for j in range(d)]) for r in range(d)]
    Wt = tuple(tuple(from_mpfr(ctx, a) for a in row) for row in Wt)
    return Wt, tuple(from_mpfr(ctx, a) for a in v)


def _head_measurements(fits, ids, index, used, h, m) -> tuple:
    """Head h's measurements over the labelled families ``used``: its log rho values, their
    bounds and sensitivity rows, then the same for its c-values."""
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
    return ml, bl, sl, mc, bc, sc


def solve_bias_heads(plan, frame, rows, fits, ids, index, K, m, n_obs, scales, tokens_a):
    """The plan for biases (module doc): heads ``(W, v, u)`` in the field's precision, the
    constant c, and float64 sensitivities ``(S[W | u], Sv, Sc)`` with rounding terms.
    ``scales[n]`` is the scale family n was asked at and ``tokens_a[n]`` its token a (as
    asked): ``A_n = c + V.a_n``, so each labelled family gives ``c = A_n - V.a_n``; c is their
    mean weighted by ``1 / bound(A_n)^2``, its sensitivity ``sum w_n (G_A,n - a_n^T S_V)``.
    Returns ``(heads, c, SWs, Svs, Sc, rounds, c_round)``; ``SWs[h]`` has ``d (d + 1)`` rows
    (row r of ``[W | u]``: its d entries of W, then u[r])."""
    d = plan.d
    Xinv, Einv = frame
    heads, SWs, Svs, rounds = _solve_M(rows, fits, ids, index, K, m, n_obs, Xinv,
                                       linalg.transpose(Einv), d)
    ctx = K.ctx
    used = sorted(index)
    floor = float(ctx.ldexp(1, -K.prec)) * 64 * (d + 1) * (d + 1)
    # the constant: every labelled family's limit A_n = c + V.a_n
    V = [ctx.fsum(hd.v[r] for hd in heads) for r in range(d)]
    SV = sum(S.dense() for S in Svs)
    Scst, worst = np.zeros(n_obs), 0.0
    cs = []
    b0 = max(min(float(fits[n].bounds[0]) for n in used), 1e-300)
    for n in used:
        a = tokens_a[n]
        bA = max(float(fits[n].bounds[0]), 1e-300)
        cs.append((n, fits[n].A - ctx.fsum(V[r] * K(a[r]) for r in range(d)), (b0 / bA) ** 2))
    wsum = sum(w for _, _, w in cs)
    wK = ctx.fsum(ctx.mpf(w) for _, _, w in cs)    # the weights in the field's precision
    c = ctx.fsum(cn * ctx.mpf(w) for _, cn, w in cs) / wK
    for n, cn, w in cs:
        row = np.zeros(n_obs)
        row[ids[n]] += fits[n].G[0]
        row -= np.array([float(t) for t in tokens_a[n]]) @ SV
        Scst += (w / wsum) * row
        worst = max(worst, max(abs(float(t)) for t in tokens_a[n]))
    c_round = floor * (abs(float(c)) + 1) + d * worst * max(r[1] for r in rounds)
    return heads, c, SWs, Svs, Scst, rounds, c_round
