"""The polish: one weighted least-squares fit of every head to every observation
(docs: explanation/real-field.md#the-stable-plan-for-float-black-boxes, step 5;
docs: explanation/biases.md#over-the-real-field).

Every query is ``k`` copies of ``a`` and ``m`` of the final token ``x``, so with
``z_h = (a - x)^T W_h x``, ``p_h = k e^z / (k e^z + m)`` and ``u = v_h . token``

    f = sum_h u_x + p_h (u_a - u_x),   df/dz_h = p_h (1 - p_h) (u_a - u_x),
    df/dv_h = (1 - p_h) x + p_h a,

and ``W_h`` enters only through ``z_h``: the normal equations are assembled per family
(``D_f = vec((a - x) x^T)``; with biases ``[W_h | u_h]`` and ``(x; 1)``, and the constant one
more parameter; :mod:`~exactlearn.strategies.real.stable_normal`).  Each parameter's
first-order bound is ``sum_q |S_pq| eta_q``, ``S = A^-1 J^T Sigma^-1``, plus the residuals'
float64 rounding propagated the same way, the parameters' rounding and twice the last
Gauss--Newton step.  :func:`polish` returns a :class:`Polished` without heads when the normal
matrix is too ill-conditioned (``COND_LIMIT``; at the solve's heads it names the weak
directions), too large (``MAX_PARAMETERS``) or the iteration does not settle; its weighted
residual sum of squares over N (:func:`_excess`) above 1 is
:class:`~exactlearn.errors.NoisierThanDeclared`.  The residuals' allowance
(:class:`~exactlearn.strategies.real.stable_checks.Hat`), the minimax bound
(:mod:`~exactlearn.strategies.real.stable_minimax`) and the resolution test's statistics
(:mod:`~exactlearn.strategies.real.stable_split`) live beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mpmath
import numpy as np

from exactlearn.model import Head, HeadSet
from exactlearn.strategies.real.lsq import EPS, last, refine, solve
from exactlearn.strategies.real.stable_normal import (Families, LM_STEPS, MAX_DENSE,
                                                      MAX_PARAMETERS, MAX_STEPS, Weak,
                                                      family_values, head_arrays,
                                                      normal_equations, v_jacobian)
from exactlearn.strategies.real.stable_scaled import Scaled


@dataclass
class Polished:
    """What :func:`polish` gives: the ``heads`` fitted to every observation (None when it did
    not solve), their bounds before ``SAFETY`` as ``(first order, rounding)`` float64 arrays --
    ``W_bounds`` ``[h][r][c]`` (``[W | u]``'s with biases), ``v_bounds`` ``[h][r]``,
    ``constant_bound`` (biases only, else None) -- the weighted residual sum of squares over
    the number of observations (``excess``), and the start's directions few observations see
    (``weak``, a :class:`Weak`; None when not formed)."""

    heads: object = None
    W_bounds: tuple = ()
    v_bounds: tuple = ()
    excess: float = 0.0
    weak: Weak | None = None
    constant_bound: tuple | None = None
    #: ``(observations, start, etas, families, parts, A^-1)`` of the fit, for
    #: :func:`~exactlearn.strategies.real.stable_checks.hat`
    normal: tuple | None = field(default=None, repr=False, compare=False)
    #: ``defer=True`` when the start names weak directions: the polish itself, on demand
    resume: object = field(default=None, repr=False, compare=False)

    @property
    def solved(self) -> bool:
        """Whether the polish fitted heads (the rest is then set)."""
        return self.heads is not None

    @property
    def bias(self) -> bool:
        return self.constant_bound is not None


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
        return [family_values(fam, f, Wt, Vt, c=ct)[:3] for f in range(len(fam.pairs))]

    def residual(theta):
        return np.concatenate([val - fam.y[f] for f, (val, _, _) in enumerate(values(theta))]) / eta

    def jacobian(theta):
        return np.concatenate([np.concatenate([gz[:, h:h + 1] * fam.D[f][None, :] for h in range(H)]
                                              + [v_jacobian(fam, gv, len(val))], axis=1)
                               for f, (val, gz, gv) in enumerate(values(theta))]) / eta[:, None]

    theta0 = np.concatenate([W.reshape(-1), V.reshape(-1)] + ([[c]] if fam.bias else []))
    got = solve(residual, jacobian, theta0, ftol=1e-9, max_nfev=steps)
    if got.status <= 0:
        return None
    return split(got.x)


#: float64's precision for :func:`~exactlearn.strategies.real.lsq.refine`: its steps
#: ``theta - step`` round to 53 bits to nearest, as numpy's float64 sums do
_F64 = mpmath.mp.clone()
_F64.prec = 53


class _Unsolved(Exception):
    """The normal matrix at a point of :func:`_gauss_newton` is too ill-conditioned."""


class _Deferred(Exception):
    """``defer``: the start's weak directions are named; the iteration waits (:func:`polish`)."""


def _gauss_newton(fam, W, V, c, far, warm=False, defer=False, named=True):
    """Gauss--Newton on the normal equations
    (:func:`~exactlearn.strategies.real.stable_normal.normal_equations`) from ``(W, V, c)``, as
    the steps of :func:`~exactlearn.strategies.real.lsq.refine` at float64's precision: a step
    that raises the weighted cost (beyond ``1e-9`` of it, rounding) is not taken, and one that
    lowers it by at most ``1e-6`` of it settles, as does one that reaches float64's floor (every
    residual within its rounding, ``normal_equations``' ``beyond`` 0: on the float64 grid the
    first step from the solve's heads, where three to five more steps only moved the cost's
    rounding).  Returns ``(W, V, c, A, b, parts, weak, factor)`` at the last point taken
    (``weak``: the start's weak directions, :class:`Weak`, none named when not ``named``;
    ``factor``: A's :class:`~exactlearn.strategies.real.stable_scaled.Scaled` when a step formed
    it, A then None, else None); ``None`` when no step is taken from a start that is not ``far``
    (Levenberg--Marquardt's end), the matrix stops solving after the start or ``MAX_STEPS``
    steps do not settle; the start's :class:`Weak` when its matrix does not solve.  A start
    must lie above float64's floor of the cost, or its first step can be refused (step 5 of
    docs: explanation/real-field.md#the-stable-plan-for-float-black-boxes)."""
    H, d = V.shape
    shape, nW = W.shape, W.size
    kept, weak0 = [], []                # the points taken: (W, V, c, A, b, parts, cost)
    factors = {}                        # their normal matrices' factors, where a step formed one
    spare = []                          # normal matrices no longer read: reused

    def judge(th):
        """Takes the point ``th`` or not: False when the iteration stops there."""
        x = np.array([float(t) for t in th])
        W1, V1 = x[:nW].reshape(shape), x[nW:nW + H * d].reshape(H, d)
        c1 = x[-1] if fam.bias else c
        A1, b1, parts1, (cost1, beyond1) = normal_equations(
            fam, W1, V1, c1, out=spare.pop() if spare else None)
        cost = kept[-1][-1] if kept else None
        if cost is not None and cost1 > cost * (1 + 1e-9):
            spare.append(A1)            # not taken: its array serves the next point
            return False                                # no further decrease: keep the last
        if kept:                        # the last point's arrays alone are read (A, scaled by
            if kept[-1][3] is not None:             # its step, is reused: 152 MB of page
                spare.append(kept[-1][3])           # faults each at d = 32, H = 4 with biases)
            kept[-1] = (None,) * 6 + kept[-1][-1:]
        kept.append((W1, V1, c1, A1, b1, parts1, cost1))
        # settled: a decrease <= 1e-6 of the cost, or float64's floor (residuals within rounding)
        return cost is None or (cost - cost1 > 1e-6 * cost and beyond1 > 0)

    def step(th):
        if not judge(th):
            return [0.0] * len(th)                      # refine converges: the iteration ends
        factors.clear()                 # the last point's factor alone is returned
        first = len(kept) == 1          # deferred: its weak directions alone, no solve
        factors[len(kept) - 1] = scaled = Scaled(kept[-1][3], name_weak=first and named,
                                                 solve=not (defer and first), overwrite_a=True)
        spare.append(kept[-1][3])       # A, scaled in place, is read no more (its factor is):
        kept[-1] = kept[-1][:3] + (None,) + kept[-1][4:]    # the next point's, not a fresh one
        delta, _, weak = scaled.solved(kept[-1][4], inverse=False)
        if len(kept) == 1:
            weak0.append(Weak([_direction(u, H, d, shape[2]) for u in weak]))
            if defer and weak0[0].directions:
                raise _Deferred
        if delta is None:
            raise _Unsolved
        return [-x for x in delta]

    theta = np.concatenate([W.reshape(-1), V.reshape(-1)] + ([[c]] if fam.bias else []))
    try:
        out = refine(_F64, step, theta.tolist(), goal=0, steps=MAX_STEPS)
    except _Unsolved:
        return weak0[0] if len(kept) == 1 and weak0[0].directions else None
    except _Deferred:
        return _Deferred(weak0[0])
    if not out.converged and judge(out.theta):
        return None                                     # MAX_STEPS steps, still not settled
    if len(kept) == 1 and not (far or warm):
        return None                                     # no step decreased the cost
    fac = factors.get(len(kept) - 1)    # A was scaled in place when it has one: not handed on
    return kept[-1][:3] + (None if fac else kept[-1][3],) + kept[-1][4:6] + (weak0[0], fac)


def _heads_of(W, V, c, bias, mpf):
    """Heads (with their u, and a :class:`~exactlearn.model.HeadSet` carrying c, with biases)
    from float64 arrays; a float64 is exact in any precision."""
    d = V.shape[1]
    out = [Head(tuple(tuple(mpf(float(a)) for a in row[:d]) for row in W[h]),
                tuple(mpf(float(a)) for a in V[h]),
                tuple(mpf(float(row[d])) for row in W[h]) if bias else None)
           for h in range(len(W))]
    return HeadSet(out, constant=mpf(float(c)), bias=True) if bias else out


class _ZRows:
    """``Z[f, h, p] = D_f . rows[p, head h's W block]`` for a group of live families (:meth:`of`):
    ``D_f = vec((a - x) xt^T)`` (``xt = (x; 1)`` with biases), so ``(a - x)^T R xt`` with ``R`` the
    row's d x dc block, ``R xt`` once per final token of the group (one to three), d + dc
    products a family and parameter instead of d dc.  A group at a time: 2.5 MB for 32 families
    at 1,632 parameters, not ``F_live x H x P'`` at once (53 MB at d = 16, H = 6; page faults)."""

    def __init__(self, fam, rows, H, dd):
        ends, self.diff, groups = fam.ends()
        self.xt = ends
        self.end = np.empty(len(self.diff), dtype=np.intp)    # each live family's final token
        for j, sel in enumerate(groups):
            self.end[sel] = j
        self.H, self.d, self.dc = H, self.diff.shape[1], ends.shape[1]
        self.R = np.ascontiguousarray(      # the rows' W blocks, head by head: H x P' x dd
            rows[:, :H * dd].reshape(len(rows), H, dd).transpose(1, 0, 2))

    def of(self, li) -> np.ndarray:
        """Z of the live families ``li`` (indices into :attr:`Families.live`), ``G x H x P'``."""
        P, d = self.R.shape[1], self.d
        Z = np.empty((len(li), self.H, P))
        used, back = np.unique(self.end[li], return_inverse=True)
        for h in range(self.H):
            T = (self.xt[used] @ self.R[h].reshape(-1, self.dc).T).reshape(len(used), P, d)
            for j in range(len(used)):
                sel = np.flatnonzero(back.ravel() == j)
                Z[sel, h, :] = self.diff[li[sel]] @ T[j].T
        return Z


def sensitivity_rows(fam, parts, rows, H, dd, chunk=32):
    """``(families, observations, S^T)``, families of one size ``n`` at a time (at most
    ``chunk``): the sensitivities ``S = A^-1 J^T Sigma^-1`` (module doc) of the parameters
    whose rows of ``A^-1`` are ``rows`` (all of ``A^-1`` for every parameter) to those
    families' observations, ``G x n x len(rows)``, the families' ``G`` indices and their
    observations' ``G x n`` indices into :class:`Families`' flat arrays.  The W-part of
    family f's z_h is D_f placed at head h's rows, so ``(rows T_f^T)^T`` is formed from
    ``D_f . rows_h`` for the group's families that see W (:class:`_ZRows`; :attr:`Families.live`:
    a single token repeated has none); each group's products are batched, the weights applied to the
    Jacobian's rows before them.  32 families a group keep ``S^T`` near the cache (about
    8 MB at 1,632 parameters; 256 took 40 % longer at d = 16, H = 6)."""
    zr = _ZRows(fam, rows, H, dd)
    at = np.full(len(parts), -1, dtype=np.intp)
    at[fam.live] = np.arange(len(fam.live))
    VT = np.ascontiguousarray(rows[:, H * dd:].T)
    sizes = np.array([len(part[2]) for part in parts], dtype=np.intp)
    for n in np.unique(sizes):
        same = np.flatnonzero(sizes == n)
        for lo in range(0, len(same), chunk):
            g = same[lo:lo + chunk]
            w = np.stack([parts[f][2] for f in g])                          # G x n
            Jv = np.concatenate([parts[f][1] for f in g]) * w.reshape(-1, 1)
            ST = (Jv @ VT).reshape(len(g), n, -1)                          # G x n x P'
            li = at[g]
            live = li >= 0
            if live.all():
                ST += (np.stack([parts[f][0] for f in g]) * w[:, :, None]) @ zr.of(li)
            elif live.any():
                gz = np.stack([parts[f][0] for f in g[live]]) * w[live][:, :, None]
                ST[live] += gz @ zr.of(li[live])
            yield g, fam.starts[g][:, None] + np.arange(n), ST


def polish(heads, K, rec, start, etas, far=None, bias=False, warm=False,
           iterate=True, defer=False, named=True) -> Polished:
    """Heads fitted to every observation since ``start`` and their bounds before ``SAFETY``
    (:class:`Polished`; module doc).  ``far``: the heads are only a start (the pencil's), so
    Levenberg--Marquardt (``LM_STEPS``) runs first, on the observations from index ``far`` on
    (the plan's families: fewer, and all of ``t``).  With ``bias`` (``heads`` a
    :class:`~exactlearn.model.HeadSet` with its constant): the heads come back with their u and
    constant, the W bounds are ``[W | u]``'s, and the constant's bound is set.  ``warm``: the
    heads are a polish's of fewer observations, taken even when no step lowers the cost (the
    bounds add twice the step still to go); ``iterate=False``: no step at all, the heads and
    their bounds at them (the same allowance for the step not taken).  ``defer``: when the
    start names weak directions, no step is taken yet: the result has no heads, the ``weak``
    directions, and ``resume()`` -- the polish of these observations as without ``defer``
    (bit for bit), for a caller that asks families for those directions and fits again.
    ``named=False`` (a caller that reads no ``weak``): none named, no eigenvectors formed."""
    H, d = len(heads), len(heads[0].v)
    dd = d * (d + 1) if bias else d * d
    if H * (dd + d) + bias > MAX_PARAMETERS:
        return Polished()
    W, V, c = head_arrays(heads, bias)
    if far is not None:
        got = _levenberg(Families(rec, far, etas, bias), W, V, LM_STEPS, c)
        if got is None:
            return Polished()
        W, V, c = got
    fam = Families(rec, start, etas, bias)
    kept = (len(rec.observations), start, np.array(etas, dtype=float))
    return _fitted(fam, (W, V, c), K, bias, (far is not None, warm, iterate, defer, named), kept)


def _fitted(fam, start, K, bias, how, kept) -> Polished:
    """:func:`polish` on ``fam`` from ``start = (W, V, c)``; ``how = (far, warm, iterate, defer,
    named)``; ``kept``: the observations' count, start index, etas (:attr:`Polished.normal`)."""
    (W, V, c), (far, warm, iterate, defer, named) = start, how
    H, d = V.shape
    dd = W[0].size
    if not iterate:                     # the bounds at the heads as they are: no step taken
        got = (W, V, c) + tuple(normal_equations(fam, W, V, c)[:3]) + (None, None)
    else:
        got = _gauss_newton(fam, W, V, c, far, warm, defer, named)
    if isinstance(got, _Deferred):      # weak directions named: the fit on demand
        return Polished(weak=got.args[0], resume=lambda: _fitted(
            fam, start, K, bias, (far, warm, iterate, False, named), kept))
    if not isinstance(got, tuple):                  # None, or the start's weak directions
        return Polished(weak=got)
    W, V, c, A, b, parts, weak0, scaled = got
    shape = W.shape
    nxt, inv, _ = (scaled or Scaled(A, name_weak=False, overwrite_a=True)).solved(b)
    if inv is None:
        return Polished()
    step = np.abs(nxt)            # the step still to go from the estimate: its distance to the fit
    excess = _excess(fam, parts)
    first, rnd = np.zeros(len(b)), np.zeros(len(b))
    for g, obs, ST in sensitivity_rows(fam, parts, inv, H, dd):
        aS = np.abs(ST, out=ST)
        size = np.stack([parts[f][3] for f in g])
        first += np.tensordot(fam.eta_all[obs], aS, axes=2)
        rnd += np.tensordot(8 * EPS * (size + np.abs(fam.y_all[obs])), aS, axes=2)
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
    return Polished(out, (fW, rW), (fV, rV), excess, weak0,
                    (float(first[-1]), float(rnd[-1])) if bias else None, kept + (fam, parts, inv))


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

