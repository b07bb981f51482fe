"""The stable plan's polish: one weighted least-squares fit of every head to every observation
(docs "The real field", "The stable plan for float black boxes", step 5).

The solve (:mod:`~exactlearn.strategies.real.stable_solve`) combines per-family fits, each
of which estimates its own ``2H + 1`` parameters from its own ``4H + 6`` queries; a head whose
poles sit close to another's in many families is then poorly determined.  The polish fits the
``H (d^2 + d)`` parameters of the model itself to all the observations at once (Gauss--Newton
from the solve's heads, weights ``1 / eta_q^2``): the families' shared parameters tie them
together, so the estimate is the model's weighted least-squares one.

Every query is ``k`` copies of ``a`` and ``m`` of the final token ``x`` (module doc of
:mod:`~exactlearn.strategies.real.stable_certificate`), so with ``z_h = (a - x)^T W_h x``,
``p_h = k e^z / (k e^z + m)`` and ``u = v_h . token``

    f = sum_h u_x + p_h (u_a - u_x),   df/dz_h = p_h (1 - p_h) (u_a - u_x),
    df/dv_h = (1 - p_h) x + p_h a,

and ``W_h`` enters a family ``(a, x)`` only through ``z_h``: the normal equations are
assembled per family (``D_f = vec((a - x) x^T)``), at ``F (H + Hd)^2`` work for ``F``
families instead of ``N (H d^2)^2`` for ``N`` queries.

The first-order bound of each parameter is ``sum_q |S_pq| eta_q`` with the estimator's
sensitivity ``S = A^-1 J^T Sigma^-1`` at the solution (exact data gives the true heads, so
the estimate moves by ``S`` times the output errors, to first order), plus the float64
rounding of the residuals propagated the same way, the rounding of the parameters and twice
the last Gauss--Newton step.  :func:`polish` returns ``None`` when the normal matrix is too
ill-conditioned for float64 (``COND_LIMIT``; at the solve's heads it returns the
undetermined directions instead, :class:`Weak`), too large (more than ``MAX_PARAMETERS``
unknowns, e.g. d = 32 with H = 4) or the iteration does not settle; the plan then keeps the
solve's heads (from the pencil start it has none: the run fails).

:func:`polish` also reports the estimate's weighted residual sum of squares over the number of
observations (:func:`_excess`): at most 1 when the outputs are within their ``eta_q``
(first order: the estimate fits no worse than the true heads), so a larger value is
:class:`~exactlearn.errors.NoisierThanDeclared` -- a box about twice as noisy as declared
fails here, whatever the propagated tolerances of the certificate allow.

**Biases** (docs/explanation/biases.md): with ``constant`` given, each head's query bias u
joins W as a last column -- ``z_h = (a - x)^T [W_h | u_h] (x; 1)``, so ``D_f = vec((a - x)
(x; 1)^T)`` -- and the constant c is one more parameter whose derivative is 1 in every
observation (a column of ones beside the v block): ``H (d^2 + 2d) + 1`` unknowns.
"""

from __future__ import annotations

import weakref

import numpy as np

from exactlearn.model import Head, HeadSet
from exactlearn.strategies.real.lsq import last, solve
from exactlearn.strategies.real.stable_certificate import family_key

COND_LIMIT = 1e12        # the Jacobi-scaled normal matrix's condition at most this
WEAK_COND = 1e8          # directions with eigenvalues below the largest over this are weak
MAX_PARAMETERS = 4096    # H (d^2 + d) at most this: the dense normal matrix stays <= 128 MB
MAX_STEPS = 8            # Gauss--Newton steps
LAWSON_STEPS = 60        # reweightings of :func:`minimax_bound`
MAX_DENSE = 2 * 10 ** 7  # N P at most this for the dense Jacobian of :func:`minimax_bound`
LM_STEPS = 100           # Levenberg--Marquardt steps from a far start
EPS = 2.0 ** -52
LD_EPS = float(np.finfo(np.longdouble).eps)   # 2^-63 where long double is x87's, else EPS


class _Families:
    """The observations grouped by their token pair ``(a, x)``, as float64 arrays; with
    ``bias`` ``D`` is formed with ``(x; 1)`` (module doc)."""

    def __init__(self, rec, start, etas, bias=False):
        self.bias = bool(bias)
        groups = _grouped(rec, start)
        self.pairs = list(groups)
        self.a = np.array([[float(t) for t in a] for a, _ in self.pairs])
        self.x = np.array([[float(t) for t in x] for _, x in self.pairs])
        self.diff = self.a - self.x
        xt = np.concatenate([self.x, np.ones((len(self.pairs), 1))], axis=1) if bias else self.x
        self.D = np.einsum("fr,fc->frc", self.diff, xt).reshape(len(self.pairs), -1)
        self.q, self.k, self.m, self.y, self.eta = [], [], [], [], []
        for key in self.pairs:
            rows = groups[key]
            idx = np.array([r[0] for r in rows])
            self.q.append(idx)
            self.k.append(np.array([r[1] for r in rows], dtype=float))
            self.m.append(np.array([r[2] for r in rows], dtype=float))
            self.y.append(np.array([r[3] for r in rows]))
            self.eta.append(np.asarray(etas)[idx])
        # the same, flat: every observation in family order, ``starts`` where each begins
        sizes = np.array([len(q) for q in self.q], dtype=np.intp)
        self.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
        self.fi = np.repeat(np.arange(len(self.pairs)), sizes)
        flat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0))
        self.k_all, self.m_all = flat(self.k), flat(self.m)
        self.y_all, self.eta_all = flat(self.y), flat(self.eta)
        with np.errstate(divide="ignore"):
            self.logkm = np.log(self.k_all) - np.log(self.m_all)


_GROUPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _grouped(rec, start) -> dict:
    """The observations since ``start`` grouped by their token pair: ``{(a, x): [(q, k, m,
    y)]}``.  A recorder's observations are only ever appended, so the grouping of its first
    ``n`` is kept (per recorder, while it lives) for the polish, its hat and its tests, which
    group the same observations again."""
    n = len(rec.observations)
    try:
        memo = _GROUPED.setdefault(rec, {})
    except TypeError:                   # a recorder without weak references: not kept
        memo = {}
    got = memo.get((start, n))
    if got is None:
        got = {}
        for q in range(start, n):
            tokens, y = rec.observations[q]
            a, x, k, m = family_key(tokens)
            got.setdefault((a, x), []).append((q, k, m, float(y)))
        memo.clear()                    # the latest grouping only
        memo[(start, n)] = got
    return got


def _values(fam, f, W, V, dt=np.float64, c=0.0):
    """Per query of family ``f``: the model's value, ``df/dz`` (n x H), ``df/dv`` (n x H x d)
    and the size of its terms (for the rounding of the residual); computed in the float type
    ``dt`` (``np.longdouble``: the residuals of :func:`split_gain`).  ``W`` is ``[W | u]``
    (H x d x (d + 1)) and ``c`` the constant for a biased family set (module doc)."""
    W, V = np.asarray(W, dtype=dt), np.asarray(V, dtype=dt)
    z = W.reshape(len(W), -1) @ np.asarray(fam.D[f], dtype=dt)    # H
    ua, ux = V @ np.asarray(fam.a[f], dtype=dt), V @ np.asarray(fam.x[f], dtype=dt)
    k, m = np.asarray(fam.k[f], dtype=dt), np.asarray(fam.m[f], dtype=dt)
    with np.errstate(divide="ignore", over="ignore"):
        s = np.log(k)[:, None] - np.log(m)[:, None] + z[None, :]     # n x H
        p = np.where(k[:, None] == 0, 0.0, 1 / (1 + np.exp(-s)))
    du = ua - ux
    val = (ux[None, :] + p * du[None, :]).sum(axis=1)
    gz = p * (1 - p) * du[None, :]
    gv = (1 - p)[:, :, None] * fam.x[f][None, None, :] + p[:, :, None] * fam.a[f][None, None, :]
    size = (np.abs(ux)[None, :] + p * np.abs(du)[None, :]).sum(axis=1)
    if fam.bias:
        val = val + dt(c)
        size = size + abs(float(c))
    return val, gz, gv, size


def _jv(fam, gv, n):
    """The v block of the Jacobian (n x H d), and with biases the constant's column of ones."""
    Jv = gv.reshape(n, -1)
    return np.concatenate([Jv, np.ones((n, 1))], axis=1) if fam.bias else Jv


def _normal(fam, W, V, c=0.0):
    """The normal matrix ``A`` and right-hand side ``b`` (module doc), the per-family reduced
    Jacobians and weights, and the weighted cost: every observation at once (the values of
    :func:`_values`), the sums per family by ``np.add.reduceat``.  The v block of a query
    is ``(1 - p_h) x + p_h a`` per head, so its products reduce to per-family sums of
    ``w p_h p_g``-type weights times ``x x^T``, ``x a^T``, ``a a^T``."""
    H, d = V.shape
    dd = fam.D.shape[1]
    nv = H * d + fam.bias
    P = H * dd + nv
    F = len(fam.pairs)
    fi = fam.fi
    Z = fam.D @ W.reshape(H, -1).T                   # F x H: z_h of each family
    UA, UX = fam.a @ V.T, fam.x @ V.T
    with np.errstate(divide="ignore", over="ignore"):
        s = fam.logkm[:, None] + Z[fi]                # N x H
        p = np.where(fam.k_all[:, None] == 0, 0.0, 1 / (1 + np.exp(-s)))
    du, ux = (UA - UX)[fi], UX[fi]
    val = (ux + p * du).sum(axis=1)
    gz = p * (1 - p) * du
    size = (np.abs(ux) + p * np.abs(du)).sum(axis=1)
    if fam.bias:
        val = val + c
        size = size + abs(float(c))
    q = 1 - p
    w = 1 / fam.eta_all ** 2
    r = fam.y_all - val
    cost = float(w @ r ** 2)

    def per_family(X):
        return np.add.reduceat(X, fam.starts, axis=0)

    wg, wq, wp, wr = w[:, None] * gz, w[:, None] * q, w[:, None] * p, w * r
    Nzz = per_family(wg[:, :, None] * gz[:, None, :])                    # F x H x H
    Sx = per_family(wg[:, :, None] * q[:, None, :])                      # sum w gz_h (1 - p_g)
    Sa = per_family(wg[:, :, None] * p[:, None, :])                      # sum w gz_h p_g
    Txx = per_family(wq[:, :, None] * q[:, None, :])
    Txa = per_family(wq[:, :, None] * p[:, None, :])                     # [f, h, g]: (1-p_h) p_g
    Taa = per_family(wp[:, :, None] * p[:, None, :])
    xs, as_ = fam.x, fam.a
    Avv = (np.einsum("fhg,fi,fj->higj", Txx, xs, xs, optimize=True)
           + np.einsum("fhg,fi,fj->higj", Txa, xs, as_, optimize=True)
           + np.einsum("fgh,fi,fj->higj", Txa, as_, xs, optimize=True)
           + np.einsum("fhg,fi,fj->higj", Taa, as_, as_, optimize=True)).reshape(H * d, H * d)
    Nzv = np.zeros((F, H, nv))
    Nzv[:, :, :H * d] = (np.einsum("fhg,fi->fhgi", Sx, xs)
                         + np.einsum("fhg,fi->fhgi", Sa, as_)).reshape(F, H, H * d)
    bz = per_family(wr[:, None] * gz)                                     # F x H
    Rx, Ra = per_family(wr[:, None] * q), per_family(wr[:, None] * p)     # F x H
    bv = np.zeros(nv)
    bv[:H * d] = (np.einsum("fh,fi->hi", Rx, xs) + np.einsum("fh,fi->hi", Ra, as_)).reshape(-1)
    A = np.zeros((P, P))
    A[H * dd:H * dd + H * d, H * dd:H * dd + H * d] = Avv
    if fam.bias:                                     # the constant's column of ones
        Nzv[:, :, -1] = per_family(wg)
        col = (np.einsum("fh,fi->hi", per_family(wq), xs)
               + np.einsum("fh,fi->hi", per_family(wp), as_)).reshape(-1)
        A[H * dd:-1, -1] = col
        A[-1, H * dd:-1] = col
        A[-1, -1] = float(w.sum())
        bv[-1] = float(wr.sum())
    Dm = fam.D
    for h in range(H):
        rows = slice(h * dd, (h + 1) * dd)
        for g in range(h, H):
            blk = Dm.T @ (Nzz[:, h, g][:, None] * Dm)
            A[rows, g * dd:(g + 1) * dd] = blk
            A[g * dd:(g + 1) * dd, rows] = blk.T
        cross = Dm.T @ Nzv[:, h, :]
        A[rows, H * dd:] = cross
        A[H * dd:, rows] = cross.T
    b = np.concatenate([Dm.T @ bz[:, h] for h in range(H)] + [bv])
    gv = q[:, :, None] * xs[fi][:, None, :] + p[:, :, None] * as_[fi][:, None, :]
    Jv = gv.reshape(len(r), H * d)
    if fam.bias:
        Jv = np.concatenate([Jv, np.ones((len(r), 1))], axis=1)
    ends = list(fam.starts[1:]) + [len(r)]
    parts = [(gz[i:j], Jv[i:j], w[i:j], size[i:j], r[i:j]) for i, j in zip(fam.starts, ends)]
    return A, b, parts, cost


class Weak:
    """Directions of the parameters the observations determine weakly (the Jacobi-scaled
    normal matrix's eigenvalues below its largest over ``WEAK_COND``): ``directions``,
    ``(head, W direction as a d x d array)`` each.  :func:`polish` returns one alone when
    some eigenvalue is below the largest over ``COND_LIMIT`` (float64 cannot solve), and as
    the last item of its result otherwise; the plan can ask families that see those
    directions and polish again."""

    def __init__(self, directions):
        self.directions = directions


def _solve(A, b):
    """``(A^-1 b, A^-1, [])`` with Jacobi scaling, or ``(None, None, weak directions)`` when
    A is too ill-conditioned."""
    s = np.sqrt(np.maximum(np.diag(A), 1e-300))
    As = A / s[:, None] / s[None, :]
    ev, U = np.linalg.eigh(As)
    if ev[-1] <= 0:
        return None, None, []
    weak = [U[:, k] / s for k in np.flatnonzero(ev <= ev[-1] / WEAK_COND)]
    if ev[0] <= ev[-1] / COND_LIMIT:
        return None, None, weak
    inv = (U / ev[None, :]) @ U.T / s[:, None] / s[None, :]
    return inv @ b, inv, weak


def _levenberg(fam, W, V, steps, c=0.0):
    """Levenberg--Marquardt (:func:`~exactlearn.strategies.real.lsq.solve`, at most ``steps``
    evaluations) from a start farther off (the pencil start of
    :mod:`~exactlearn.strategies.real.stable_pencil`): ``(W, V, c)`` once a tolerance is met,
    else ``None`` (also when the dense Jacobian would exceed ``MAX_DENSE``); with biases W is
    ``[W | u]`` and c the constant (module doc)."""
    H, d = V.shape
    n = W.size
    nv = H * d
    eta = np.concatenate(fam.eta)
    if len(eta) * (n + nv + fam.bias) > MAX_DENSE:
        return None

    def split(theta):
        return (theta[:n].reshape(W.shape), theta[n:n + nv].reshape(H, d),
                theta[-1] if fam.bias else 0.0)

    @last
    def values(theta):
        Wt, Vt, ct = split(theta)
        return [_values(fam, f, Wt, Vt, c=ct)[:3] for f in range(len(fam.pairs))]

    def residual(theta):
        return np.concatenate([val - fam.y[f] for f, (val, _, _) in enumerate(values(theta))]) / eta

    def jacobian(theta):
        return np.concatenate([np.concatenate([gz[:, h:h + 1] * fam.D[f][None, :] for h in range(H)]
                                              + [_jv(fam, gv, len(val))], axis=1)
                               for f, (val, gz, gv) in enumerate(values(theta))]) / eta[:, None]

    theta0 = np.concatenate([W.reshape(-1), V.reshape(-1)] + ([[c]] if fam.bias else []))
    got = solve(residual, jacobian, theta0, ftol=1e-9, max_nfev=steps)
    if got.status <= 0:
        return None
    return split(got.x)


def _arrays(heads, bias):
    """``(W, V, c)`` as float64 arrays: W is ``[W | u]`` with biases (module doc)."""
    if bias:
        W = np.array([[[float(a) for a in row] + [float(b)] for row, b in zip(h.W, h.u)]
                      for h in heads])
    else:
        W = np.array([[[float(a) for a in row] for row in h.W] for h in heads])
    V = np.array([[float(a) for a in h.v] for h in heads])
    return W, V, float(getattr(heads, "constant", 0)) if bias else 0.0


def _heads_of(W, V, c, bias, mpf):
    """Heads (with their u, and a :class:`~exactlearn.model.HeadSet` carrying c, with biases)
    from float64 arrays; a float64 is exact in any precision."""
    d = V.shape[1]
    out = [Head(tuple(tuple(mpf(float(a)) for a in row[:d]) for row in W[h]),
                tuple(mpf(float(a)) for a in V[h]),
                tuple(mpf(float(row[d])) for row in W[h]) if bias else None)
           for h in range(len(W))]
    return HeadSet(out, constant=mpf(float(c)), bias=True) if bias else out


def polish(heads, K, rec, start, etas, far=None, bias=False):
    """Heads fitted to every observation since ``start`` and their bounds ``(BW, Bv)`` before
    ``SAFETY`` (first-order bound, rounding), or ``None`` (module doc).  ``far``: the heads
    are only a start (the pencil's), so Levenberg--Marquardt (``LM_STEPS``) runs first, on
    the observations from index ``far`` on (the plan's families: fewer, and all of ``t``).
    With ``bias`` (``heads`` a :class:`~exactlearn.model.HeadSet` with its constant): the
    heads come back with their u and constant, ``BW`` is ``[W | u]``'s, and a sixth item
    ``(bound, rounding)`` of the constant follows."""
    H, d = len(heads), len(heads[0].v)
    dd = d * (d + 1) if bias else d * d
    if H * (dd + d) + bias > MAX_PARAMETERS:
        return None
    W, V, c = _arrays(heads, bias)
    if far is not None:
        got = _levenberg(_Families(rec, far, etas, bias), W, V, LM_STEPS, c)
        if got is None:
            return None
        W, V, c = got
    fam = _Families(rec, start, etas, bias)
    A, b, parts, cost = _normal(fam, W, V, c)
    step = np.zeros(len(b)) if far is not None else None    # after Levenberg--Marquardt
    weak0 = None
    shape = W.shape
    for it in range(MAX_STEPS):
        delta, inv, weak = _solve(A, b)
        if it == 0:
            weak0 = Weak([_direction(u, H, d, shape[2]) for u in weak])
        if delta is None:
            return weak0 if it == 0 and weak else None
        W1 = W + delta[:H * dd].reshape(shape)
        V1 = V + delta[H * dd:H * dd + H * d].reshape(H, d)
        c1 = c + delta[-1] if bias else c
        A1, b1, parts1, cost1 = _normal(fam, W1, V1, c1)
        if cost1 > cost * (1 + 1e-9):
            break                                   # no further decrease: keep (W, V)
        W, V, c, A, b, parts, step = W1, V1, c1, A1, b1, parts1, np.abs(delta)
        settled = cost - cost1 <= 1e-6 * cost
        cost = cost1
        if settled:
            break
    else:
        return None
    nxt, inv, _ = _solve(A, b)
    if inv is None or step is None:
        return None
    step = np.abs(nxt)            # the step still to go from the estimate: its distance to the fit
    excess = _excess(fam, parts)
    first, rnd = np.zeros(len(b)), np.zeros(len(b))
    # columns of A^-1 T_f^T: the W-part of family f's z_h is D_f placed at head h's rows
    Zcols = [inv[:, h * dd:(h + 1) * dd] @ fam.D.T for h in range(H)]         # P x F each
    Vcols = inv[:, H * dd:]
    for f, (gz, Jv, w, size, _) in enumerate(parts):
        C = np.concatenate([np.stack([Zcols[h][:, f] for h in range(H)], axis=1), Vcols], axis=1)
        S = C @ np.concatenate([gz, Jv], axis=1).T * w[None, :]               # P x n
        aS = np.abs(S)
        first += aS @ fam.eta[f]
        rnd += aS @ (8 * EPS * (size + np.abs(fam.y[f])))
    theta = np.concatenate([W.reshape(-1), V.reshape(-1)] + ([[c]] if bias else []))
    rnd += 2 * step + 4 * EPS * np.abs(theta)
    mpf = K.ctx.mpf                                  # a float64 is exact in any precision
    if not bias:
        out = [Head(tuple(tuple(mpf(float(a)) for a in row) for row in W[h]),
                    tuple(mpf(float(a)) for a in V[h])) for h in range(H)]
    else:
        out = _heads_of(W, V, c, bias, mpf)
    fW = first[:H * dd].reshape(shape)
    rW = rnd[:H * dd].reshape(shape)
    fV = first[H * dd:H * dd + H * d].reshape(H, d)
    rV = rnd[H * dd:H * dd + H * d].reshape(H, d)
    if bias:
        return out, (fW, rW), (fV, rV), excess, weak0, (float(first[-1]), float(rnd[-1]))
    return out, (fW, rW), (fV, rV), excess, weak0


def hat(polished, rec, start, etas):
    """The :class:`Hat` of a :func:`polish` result (its heads, bounds) on the observations it
    fitted, or None when its normal matrix no longer solves."""
    heads, (fW, rW), (fV, rV) = polished[:3]
    bias = len(polished) > 5
    W, V, c = _arrays(heads, bias)
    fam = _Families(rec, start, etas, bias)
    A, _, parts, _ = _normal(fam, W, V, c)
    _, inv, _ = _solve(A, np.zeros(len(A)))
    if inv is None:
        return None
    extra = [[polished[5][0]]] if bias else []
    first = np.concatenate([np.ravel(fW), np.ravel(fV)] + extra)
    rnd = np.concatenate([np.ravel(rW), np.ravel(rV)] + ([[polished[5][1]]] if bias else []))
    return Hat(fam, parts, inv, len(heads), W.shape[1], first, rnd)


def minimax_bound(polished, rec, start, etas):
    """A lower bound, to first order about the fit, on ``min max_q |y_q - f(q)| / eta_q`` over
    every model with as many heads as ``polished`` (a :func:`polish` result): above 1, no such
    model keeps every output within its eta (docs/explanation/real-field.md, "The residual
    test").  The fit's own largest ratio when that is at most 1 (no bound needed), None when
    the dense Jacobian would exceed ``MAX_DENSE``.

    With scaled residuals ``s = r / eta`` and Jacobian ``Js = J / eta``, every ``u`` with
    ``Js^T u = 0`` and ``|u|_1 = 1`` gives ``max_q |s_q - (Js d)_q| >= u.s`` for every step d
    (weak duality of the Chebyshev fit).  The residual ``rr`` of a least-squares fit with
    weights ``c`` gives ``u = c rr / |c rr|_1``, ``u.s = sum c rr^2 / sum c |rr|``; Lawson's
    reweighting ``c <- c |rr|`` drives it up to the Chebyshev value (``LAWSON_STEPS``).  The
    float64 rounding of the residuals is taken off; the linearisation and float64 solves are
    what the caller's margin covers."""
    heads = polished[0]
    bias = len(polished) > 5
    W, V, c = _arrays(heads, bias)
    H, d = V.shape
    fam = _Families(rec, start, etas, bias)
    vals = [_values(fam, f, W, V, c=c) for f in range(len(fam.pairs))]
    eta = np.concatenate(fam.eta)
    s = np.concatenate([fam.y[f] - v[0] for f, v in enumerate(vals)]) / eta
    err = float(np.max(np.concatenate([8 * EPS * (v[3] + np.abs(fam.y[f]))
                                       for f, v in enumerate(vals)]) / eta))
    if np.max(np.abs(s)) <= 1:
        return float(np.max(np.abs(s)))
    if len(s) * H * (fam.D.shape[1] + d) > MAX_DENSE:
        return None
    cols = [np.concatenate([np.concatenate([gz[:, h:h + 1] * fam.D[f][None, :] for h in range(H)],
                                           axis=1), _jv(fam, gv, len(val))], axis=1)
            for f, (val, gz, gv, _) in enumerate(vals)]
    return chebyshev_bound(np.concatenate(cols) / eta[:, None], s, err)


def chebyshev_bound(Js, s, err=0.0) -> float:
    """Lawson's lower bound (:func:`minimax_bound`) on ``min_d max_q |s_q - (Js d)_q|``, less
    ``err`` (the rounding of ``s``)."""
    c = np.full(len(s), 1.0 / len(s))
    best = 0.0
    for _ in range(LAWSON_STEPS):
        sq = np.sqrt(c)
        step = np.linalg.lstsq(Js * sq[:, None], s * sq, rcond=None)[0]
        rr = s - Js @ step
        a = np.abs(rr)
        if not a.sum() > 0:
            break
        best = max(best, float(c @ (rr * rr)) / float(c @ a) - err)
        if best > 2:
            break
        c = c * a
        c = c / c.sum()
    return best


class Hat:
    """The estimate's first-order residuals, one observation at a time: with output errors
    ``eps``, the fitted model's residual at q is ``sum_p ([p = q] - (J S)_qp) eps_p``, ``S`` the
    sensitivity of the module doc; :meth:`allowance` bounds it (docs/explanation/real-field.md,
    "The residual test") at ``N P`` work for the one row of ``J S``."""

    def __init__(self, fam, parts, inv, H, d, first, rnd):
        self.fam, self.parts, self.inv, self.H, self.d = fam, parts, inv, H, d
        self.first, self.rnd = first, rnd
        self.where = {int(q): (f, i) for f, idx in enumerate(fam.q) for i, q in enumerate(idx)}

    def allowance(self, q, safety, second_order) -> float:
        """``safety b_q + second_order T_q + |J_q| rnd``: ``b_q = sum_p |[p = q] - (J S)_qp|
        eta_p`` the first-order worst case of the residual at observation q, ``T_q = |J_q|
        first`` the entry-by-entry effect of the parameter bounds, ``rnd`` the parameters'
        rounding."""
        fam, H = self.fam, self.H
        dd = fam.D.shape[1]
        f0, i0 = self.where[q]
        gz, Jv = self.parts[f0][0], self.parts[f0][1]
        Jq = np.concatenate([np.concatenate([gz[i0, h] * fam.D[f0] for h in range(H)]), Jv[i0]])
        u = self.inv @ Jq
        Zu = np.stack([fam.D @ u[h * dd:(h + 1) * dd] for h in range(H)], axis=1)    # F x H
        uv = u[H * dd:]
        b = 0.0
        for f, (gz, Jv, w, _, _) in enumerate(self.parts):
            row = (gz @ Zu[f] + Jv @ uv) * w                 # (J S)_q,p over family f
            if f == f0:
                row[i0] -= 1.0
            b += float(np.abs(row) @ fam.eta[f])
        aJ = np.abs(Jq)
        return safety * b + second_order * float(aJ @ self.first) + float(aJ @ self.rnd)


def _direction(u, H, d, dc=None):
    """``(head, d x dc W direction)`` of a parameter direction (``dc = d + 1`` with biases:
    ``[W | u]``): the head it weighs most; the direction is zero when the parameters of v
    carry it (no family of W can see it)."""
    dc = d if dc is None else dc
    Wu = u[:H * d * dc].reshape(H, d, dc)
    h = int(np.argmax(np.abs(Wu).reshape(H, -1).max(axis=1)))
    if not np.abs(Wu).max() >= 1e-3 * np.abs(u).max():
        return h, np.zeros((d, dc))
    return h, Wu[h]


def _excess(fam, parts):
    """The weighted residual sum of squares at the estimate (the residuals its normal
    equations were built from), each residual first reduced by its float64 rounding, over
    the number of observations.  When every output is within its ``eta_q`` of the model's
    value, the true heads leave at most ``N`` (each term at most 1), and the least-squares
    estimate no more: a larger value convicts the declared noise."""
    total, n = 0.0, 0
    for f, (_, _, _, size, r) in enumerate(parts):
        red = np.maximum(np.abs(r) - 8 * EPS * (size + np.abs(fam.y[f])), 0.0)
        total += float(np.sum((red / fam.eta[f]) ** 2))
        n += len(r)
    return total / n


def spectrum(heads, rec, start, etas) -> np.ndarray:
    """The eigenvalues of the Jacobi-scaled normal matrix at ``heads`` over the observations
    since ``start``, ascending: how well they determine every direction of the parameters
    (:func:`polish` solves when the smallest is above the largest over ``COND_LIMIT``)."""
    W = np.array([[[float(a) for a in row] for row in h.W] for h in heads])
    V = np.array([[float(a) for a in h.v] for h in heads])
    A = _normal(_Families(rec, start, etas), W, V)[0]
    s = np.sqrt(np.maximum(np.diag(A), 1e-300))
    return np.linalg.eigvalsh(A / s[:, None] / s[None, :])



RESOLVE_DOF = 5          # observations beyond the columns' rank at least this (and the extra)
RESOLVE_RCOND = 1e-9     # columns' singular values below this of the largest add no dimension


def split_gain(heads, rec, start, etas, bias=False):
    """The resolution test's statistics (docs/explanation/real-field.md, "The resolution test")
    at ``heads``, the residuals ``y - f`` computed in ``np.longdouble``: a dict with ``extra``,
    the dimensions the columns a split head adds (below) add to the null model's -- the model's
    own gradient ``J`` and, for each family, the columns its own rounding of exponents and
    values would add (``p_h' (v_h . (a - x))``, ``p_h``, 1); ``gain``, ``rest``, ``dof`` and
    ``floor`` with each residual over its float64 rounding scale ``EPS (size + |y|)``: how
    much the sum of squares falls when those columns are fitted too, what is left, ``n`` (the
    observations) less the rank, and the mean square of the long-double rounding; ``n``; and
    ``gain_eta``, the fall with each residual over its declared ``eta_q`` instead.

    Two heads ``W +- delta Dir`` (``v_1, v_2``) against one ``W`` (``v_1 + v_2``) differ to
    second order by ``p''(z) (D . Dir)^2 (w . (a - x))`` and, where the centre is off, to first
    order by ``p'(z) (D . Dir) (w' . (a - x))`` for some vectors ``w, w'``: the columns are
    ``p_h'' D_i D_j (a - x)_k`` (``i <= j``) and ``p_h' D_i (a - x)_k`` for every head ``h``,
    those of the second kind dropped first, then the ``k`` contracted with ``v_h``, when they
    outnumber half the observations, or leave fewer than the extra dimensions (and
    ``RESOLVE_DOF``) observations beyond their rank.  None when even the last does."""
    m, d = len(heads), len(heads[0].v)
    fam = _Families(rec, start, etas, bias)
    W, V, c = _arrays(heads, bias)
    N = sum(len(y) for y in fam.y)
    dd = fam.D.shape[1]
    iu = np.triu_indices(dd)
    counts = {"full": m * dd * d + m * len(iu[0]) * d, "second": m * len(iu[0]) * d,
              "contracted": m * len(iu[0])}
    for mode in ("full", "second", "contracted"):
        if counts[mode] <= N // 2:
            got = _split_gain(fam, W, V, N, iu, mode, c)
            if got is not None:
                return got
    return None


def _split_gain(fam, W, V, N, iu, mode, c=0.0):
    """:func:`split_gain` with the columns of ``mode``; None when too few observations are
    left beyond their rank."""
    m, d = V.shape
    s_all, J_all, Q_all, fl, B_all, tau_all = [], [], [], [], [], []
    for f in range(len(fam.pairs)):
        val, gz, gv, size = _values(fam, f, W, V, c=c)
        ld = _values(fam, f, W, V, np.longdouble, c)[0]
        eta = np.maximum(EPS * (size + np.abs(fam.y[f])), 1e-300)   # the weights (doc)
        tau_all.append(eta / fam.eta[f])      # from these weights to those of the declared eta
        s_all.append((np.asarray(fam.y[f], dtype=np.longdouble) - ld).astype(float) / eta)
        fl.append(8 * LD_EPS * (size + np.abs(fam.y[f])) / eta)
        Dm = fam.D[f]
        J = np.concatenate([gz[:, h:h + 1] * Dm[None, :] for h in range(m)]
                           + [gv.reshape(len(val), m * d)], axis=1)
        J_all.append(J / eta[:, None])
        z = W.reshape(m, -1) @ Dm
        with np.errstate(divide="ignore", over="ignore"):
            sz = np.log(fam.k[f])[:, None] - np.log(fam.m[f])[:, None] + z[None, :]
            p = np.where(fam.k[f][:, None] == 0, 0.0, 1 / (1 + np.exp(-sz)))      # n x m
        p1 = p * (1 - p)
        p2 = p1 * (1 - 2 * p)
        diff = fam.diff[f]
        quad = (Dm[:, None] * Dm[None, :])[iu]                                     # pairs
        cols = []
        for h in range(m):
            if mode == "full":
                cols.append((p1[:, h:h + 1, None] * np.outer(Dm, diff).ravel()[None, None, :])
                            .reshape(len(val), -1))
            if mode in ("full", "second"):
                cols.append((p2[:, h:h + 1, None] * np.outer(quad, diff).ravel()[None, None, :])
                            .reshape(len(val), -1))
            else:
                cols.append(p2[:, h:h + 1] * quad[None, :] * float(V[h] @ diff))
        Q_all.append(np.concatenate(cols, axis=1) / eta[:, None])
        B_all.append(np.concatenate([p1 * (V @ diff)[None, :], p, np.ones((len(val), 1))],
                                    axis=1) / eta[:, None])
    s = np.concatenate(s_all)
    nb = sum(b.shape[1] for b in B_all)
    if N * (nb + J_all[0].shape[1] + Q_all[0].shape[1]) > MAX_DENSE:
        return None
    Bf = np.zeros((N, nb))                  # each family's own columns, on its rows only
    r0 = c0 = 0
    for b in B_all:
        Bf[r0:r0 + len(b), c0:c0 + b.shape[1]] = b
        r0, c0 = r0 + len(b), c0 + b.shape[1]
    J = np.concatenate([np.concatenate(J_all), Bf], axis=1)
    Q = np.concatenate(Q_all)

    def fit(M, s):
        M = M / np.maximum(np.sqrt((M * M).sum(axis=0)), 1e-300)[None, :]
        U, sv, _ = np.linalg.svd(M, full_matrices=False)
        r = int(np.sum(sv > RESOLVE_RCOND * sv[0])) if len(sv) else 0
        U = U[:, :r]
        rr = s - U @ (U.T @ s)
        return float(rr @ rr), r

    JQ = np.concatenate([J, Q], axis=1)
    rss0, r0 = fit(J, s)
    rss1, r1 = fit(JQ, s)
    tau = np.concatenate(tau_all)             # the same fits with the declared eta's weights
    e0 = fit(J * tau[:, None], s * tau)[0]
    e1 = fit(JQ * tau[:, None], s * tau)[0]
    floor = float(np.mean(np.concatenate(fl) ** 2))
    if N - r1 < max(r1 - r0, RESOLVE_DOF):
        return None                         # too few observations left to estimate the noise
    return {"gain": rss0 - rss1, "extra": r1 - r0, "rest": rss1, "dof": N - r1, "n": N,
            "floor": floor, "gain_eta": e0 - e1}
