"""Ratio families and their least-squares fit
(docs: explanation/real-field.md#the-stable-plan-for-float-black-boxes, step 1;
arXiv:2608.03294, approximate oracles).

A query of ``k`` copies of ``a = x + e`` followed by ``m`` copies of ``x`` has the value

    f(t) = A + sum_h c_h / (1 + t rho_h),   t = k / m,   A = V.a,   c_h = -v_h.e,

the paper's family at any positive rational ``t`` (``(x)``: ``t = 0``; ``(a)``: ``t = oo``).
:func:`ratio_nodes` spreads ``t`` geometrically over ``[1/L, L]``.  :func:`fit_ratio_family`
fits ``theta = (A, log rho_1..m, c_1..m)`` with weights ``1/eta_q``: a Loewner start in
``z = t/(1+t)`` (:func:`~exactlearn.strategies.real.loewner.loewner_start`),
Levenberg--Marquardt on ``log rho`` alone (variable projection, :class:`_Projected`), then
Gauss--Newton in the field's precision with the float64 weighted pseudo-inverse ``G``
(:func:`_refine`: residuals in gmpy2, the correction ``G r`` in float64, its rounding added to
the bounds).  ``G`` is the sensitivity (``d theta = G d y``), and every residual is checked
against ``|J G - I| eta`` (:func:`~exactlearn.strategies.real.sensitivity.check_residuals`).

>>> from fractions import Fraction
>>> from exactlearn.fields.real import Real
>>> K = Real(dps=30)
>>> nodes = ratio_nodes(1, 16)
>>> ts = [node_t(k, m) for k, m in nodes]
>>> ys = [K(3) if t is None else K(3) + K(2) / (1 + K(t) * K("1.5")) for t in ts]
>>> fit = fit_ratio_family(K, ts, ys, [1e-25] * len(ts), 1)
>>> K.ctx.nstr(K.ctx.exp(fit.logs[0]), 10), K.ctx.nstr(fit.cs[0], 10), K.ctx.nstr(fit.A, 10)
('1.5', '2.0', '3.0')
"""

from __future__ import annotations

import math

import gmpy2
import numpy as np
from gmpy2 import mpq

from exactlearn.errors import DegenerateDraw, InterpolationError
from exactlearn.strategies.real.fit import RatioFit, fit_paper_family
from exactlearn.strategies.real.loewner import loewner_start
from exactlearn.strategies.real.lsq import (Mpfr, field_precision, fixed_step, from_mpfr,
                                            refine, solve, to_mpfr)
from exactlearn.strategies.real.sensitivity import check_residuals

MPFR = type(gmpy2.mpfr(0))

#: token entries on the dyadic grid 2^-GRID (exact in float32 and float64 at the plan's sizes)
GRID = 20
#: finite nodes per head (oversampling: 2H + 1 unknowns) and beyond them: ``4H + 4``
NODES_PER_HEAD, NODES_EXTRA = 4, 4
#: the same for the plan of a box declared at float64 rounding (not coarse): ``3H + 1``.
#: ``python benchmarks/bench_float.py --grid --seeds 6`` (docs/howto/float-black-box.md,
#: "Fewer queries"): 84 of 84 certified with these and at most three rounds of weak-entry
#: supplements (since removed: the polish asks for its weak entries), errors within 1e-13, 2.7
#: to 3.7 times the paper's count instead of 4.3 to 6.0
LEAN_NODES_PER_HEAD, LEAN_NODES_EXTRA = 3, 1
#: the longest query: t = k/m ranges over [1/L, L], queries have at most L + 1 tokens
MAX_COPIES = 256
#: evaluations of one start's Levenberg--Marquardt fit (a fit that converges takes about 20)
LSQ_EVALUATIONS = 100
#: the same for a family of a box declared coarser than float64 (float32): fitting four heads
#: to float32 samples, MINPACK often stopped at 100 evaluations short of the optimum, where the
#: refinement with its fixed pseudo-inverse then diverged (docs/explanation/real-field.md);
#: on the exponents alone (:class:`_Projected`) a median fit takes about 40
COARSE_EVALUATIONS = 1000
#: :func:`_best_fit` gives up after this many later starts in a row end above FAR times the
#: target cost: at d = 16, H = 6 the searches that tried every start took a third of the
#: learner's time, and of 6,571 fits (16 x 4, 12 x 6, 16 x 6) none that reached the target
#: only from its fourth start or later passed its refinement and residual check.  A coarse
#: box's families (COARSE_EVALUATIONS) try every start (``patience=None``): float32, 16 x 4
#: re-asked a family with the rule (+0.9 % queries) and ran no faster
PATIENCE = 3
FAR = 100


def ratio_nodes(H: int, L: int = MAX_COPIES, lean: bool = False) -> list:
    """The ``(k, m)`` of a family: ``(0, 1)`` (the token x alone, t = 0), ``(1, 0)`` (the
    token a alone, t = oo), and up to ``4H + 4`` (``lean``: ``3H + 1``) geometric
    ``t = k/m`` on ``[1/L, L]`` with ``k = 1`` or ``m = 1`` (distinct: two that round alike
    count once; ascending in t).

    >>> ratio_nodes(1, 16)
    [(0, 1), (1, 16), (1, 7), (1, 3), (1, 1), (3, 1), (7, 1), (16, 1), (1, 0)]
    >>> ratio_nodes(1, 16, lean=True)
    [(0, 1), (1, 16), (1, 3), (3, 1), (16, 1), (1, 0)]
    """
    n = (LEAN_NODES_PER_HEAD * H + LEAN_NODES_EXTRA if lean
         else NODES_PER_HEAD * H + NODES_EXTRA)
    out = []
    for s in range(n):
        u = -math.log(L) + 2 * math.log(L) * s / (n - 1)
        t = math.exp(u)
        node = (max(1, round(t)), 1) if t >= 1 else (1, max(1, round(1 / t)))
        if node not in out:
            out.append(node)
    out.sort(key=lambda km: km[0] / km[1])
    return [(0, 1)] + out + [(1, 0)]


def dyadic(values) -> tuple:
    """``values`` rounded to the nearest multiple of ``2^-GRID``, as exact rationals.

    >>> dyadic([0.5, 1 / 3])
    (mpq(1,2), mpq(349525,1048576))
    """
    scale = 2 ** GRID
    return tuple(mpq(int(round(float(a) * scale)), scale) for a in values)


def node_t(k: int, m: int):
    """``t = k/m`` as an exact rational; ``None`` for ``t = oo`` (``m = 0``)."""
    return None if m == 0 else mpq(k, m)


def family_tokens(x, a, k: int, m: int) -> list:
    """``k`` copies of ``a`` then ``m`` copies of ``x``; ``(1, 0)`` is the token ``a`` alone."""
    return [a] * k + [x] * m


def _model(theta, zs, m):
    """f and the Jacobian at the nodes (float64); ``zs`` are t (np.inf for t = oo)."""
    A, ls, cs = theta[0], theta[1:m + 1], theta[m + 1:]
    rho = np.exp(ls)
    n = len(zs)
    J = np.zeros((n, 2 * m + 1))
    f = np.full(n, A)
    J[:, 0] = 1
    fin = np.isfinite(zs)
    t = zs[fin][:, None]
    den = 1 + t * rho[None, :]
    f[fin] += (cs[None, :] / den).sum(axis=1)
    J[fin, 1:m + 1] = -cs[None, :] * t * rho[None, :] / den ** 2
    J[fin, m + 1:] = 1 / den
    return f, J


class _Projected:
    """Variable projection (Golub--Pereyra, with Kaufman's Jacobian) of the weighted residuals
    ``(f - y) w``: for fixed ``log rho`` the model is linear in ``(A, c)``, whose weighted
    least-squares values (a Householder QR ``B w = Q R`` of the weighted basis, LAPACK) leave
    the residual ``(B c - y) w``, a function of the ``m`` values ``log rho`` alone (evaluated
    as that product, not as the projection ``-(I - Q Q^T) y w``, whose cancellation left
    float64 fits of poorly determined heads short of their minimum); its
    Jacobian is taken as ``(I - Q Q^T)`` times the full Jacobian's ``log rho`` columns (Kaufman's
    approximation: exact up to a term of the residual's order).  The same minimum as the fit of
    all ``2m + 1`` parameters, in a fraction of the evaluations: a float32 box's families,
    whose ``c_h`` the samples determine poorly, no longer crawl along that valley.  A singular
    ``R`` (two equal ``rho``) gives nan residuals (a rejected step).  Residual and Jacobian are
    computed together (MINPACK asks the Jacobian where it evaluated last)."""

    def __init__(self, zs, ys, w, m):
        fin = np.isfinite(zs)
        nf = int(fin.sum())
        self.fin = slice(0, nf) if fin[:nf].all() else fin
        self.t, self.wf, self.yw, self.m = zs[fin][:, None], w[fin][:, None], ys * w, m
        self.B = np.zeros((len(zs), m + 1))
        self.B[:, 0] = w
        # the columns of the heads at the finite nodes, written in place where they are a view
        self.Bh = self.B[self.fin, 1:] if isinstance(self.fin, slice) else None
        self.D = np.zeros((len(zs), m))
        self.key = None
        from scipy.linalg.lapack import dgeqrf, dorgqr, dtrtrs   # scipy on first use (lsq.solve)
        self.lapack = dgeqrf, dorgqr, dtrtrs

    def _at(self, ls):
        key = ls.tobytes()
        if key != self.key:
            m, fin, t = self.m, self.fin, self.t
            dgeqrf, dorgqr, dtrtrs = self.lapack
            trho = t * np.exp(ls)
            inv = np.add(trho, 1.0)
            np.divide(1.0, inv, out=inv)               # 1 / (1 + t rho), no temporary
            if self.Bh is not None:
                np.multiply(inv, self.wf, out=self.Bh)
            else:
                self.B[fin, 1:] = inv * self.wf
            qr, tau, _, _ = dgeqrf(self.B)
            Q = dorgqr(qr, tau)[0]
            qy = Q.T @ self.yw
            coef, info = dtrtrs(qr[:m + 1], qy)
            if info != 0:
                coef = np.full(m + 1, np.nan)
            self.r = self.B @ coef - self.yw
            self.key, self.coef, self.J = key, coef, None
            self.parts = Q, inv, trho
        return self

    def residual(self, ls):
        return self._at(np.asarray(ls, dtype=float)).r

    def jacobian(self, ls):
        """The Jacobian at ``ls``, formed only when asked (MINPACK asks it at the points it
        accepts, the residual at every trial point)."""
        self._at(np.asarray(ls, dtype=float))
        if self.J is None:
            (Q, inv, trho), fin = self.parts, self.fin
            self.D[fin] = -(self.coef[None, 1:] * self.wf) * (inv * inv) * trho
            self.J = self.D - Q @ (Q.T @ self.D)
        return self.J


def _lsq(ls, zs, ys, w, m, evaluations=LSQ_EVALUATIONS):
    """Levenberg--Marquardt (:func:`~exactlearn.strategies.real.lsq.solve`) on the projected
    residuals of :class:`_Projected` from ``ls`` (log rho): ``(theta, weighted sum of
    squares)``, ``theta = (A, log rho, c)`` with ``A``, ``c`` the linear least-squares values at
    the fitted ``log rho``."""
    model = _Projected(zs, ys, w, m)
    got = solve(model.residual, model.jacobian, ls, max_nfev=evaluations)
    coef = model._at(np.asarray(got.x, dtype=float)).coef
    return np.concatenate([coef[:1], got.x, coef[1:]]), 2 * got.cost


def _starts(zs, yf, w, m):
    """The starts of :func:`_best_fit`, in order, each formed only when asked for: the Loewner
    starts (shifts 0, 1, 2; those that fail are passed over), two spread ones, then twelve
    random ones (deterministic: seeded by the number of samples)."""
    for shift in range(3):
        try:
            s0 = loewner_start(zs, yf, w, m, shift)
        except (np.linalg.LinAlgError, ValueError):
            s0 = None
        if s0 is not None:
            yield s0
    top = math.log(MAX_COPIES)
    yield np.linspace(-top, top, m + 2)[1:-1]
    yield np.linspace(-1.5 * top, 1.5 * top, m)
    rng = np.random.default_rng(len(yf))
    yield from [np.sort(rng.uniform(-2 * top, 2 * top, m)) for _ in range(12)]


def _best_fit(zs, yf, w, m, evaluations=LSQ_EVALUATIONS, patience=PATIENCE):
    """Levenberg-Marquardt from the Loewner start, then from spread starts until the
    weighted residuals are of the order of their weights (``evaluations`` each at most), or
    until ``patience`` later starts in a row end above FAR times that target (None: never):
    the best fit."""
    best, target, far = None, 10 * len(zs), 0     # target: residuals within their weights
    for i, ls in enumerate(_starts(zs, yf, w, m)):
        try:
            theta, cost = _lsq(ls, zs, yf, w, m, evaluations)
        except (np.linalg.LinAlgError, ValueError):
            continue
        if np.isfinite(cost) and (best is None or cost < best[1]):
            best = (theta, cost)
        if best is not None and best[1] <= target:
            break
        far = far + 1 if i > 0 and not cost <= FAR * target else 0
        if patience is not None and far >= patience:
            break
    return None if best is None else best[0]


def fit_ratio_family(K, ts, ys, etas, m, *, what="a family", evaluations=LSQ_EVALUATIONS,
                     patience=PATIENCE, paper=False) -> RatioFit:
    """Fit ``m`` heads to the samples ``ys`` at ``ts`` (exact rationals, ``None`` = oo)
    with bounds ``etas`` (floats); module doc.  ``evaluations`` caps each start's
    Levenberg--Marquardt fit (COARSE_EVALUATIONS for a coarse box's families), ``patience``
    the search over starts (:func:`_best_fit`; None for a coarse box's families).  Raises
    :class:`~exactlearn.errors.InterpolationError` when no fit converges,
    :class:`~exactlearn.errors.NoisierThanDeclared` when a residual exceeds its bound.
    ``paper``: the paper plan's nodes ``t = 0 .. n - 1``, fitted in the field's precision
    (:func:`~exactlearn.strategies.real.fit.fit_paper_family`, no float64 search to bound)."""
    if paper:
        return fit_paper_family(K, ys, etas, m, what)
    zs = np.array([np.inf if t is None else float(t) for t in ts])
    yf = np.array([float(y) for y in ys])
    eta = np.asarray(etas, dtype=float)
    if not np.all(eta > 0):
        raise ValueError("every sample needs a positive error bound")
    w = 1 / eta
    if np.max(np.abs(yf)) == 0:
        raise DegenerateDraw("a query family returned only zeros")
    with np.errstate(all="ignore"):
        theta = _best_fit(zs, yf, w, m, evaluations, patience)
    if theta is None or not np.all(np.isfinite(theta)):
        raise InterpolationError(f"{what}: the least-squares fit with {m} heads did not converge")
    with np.errstate(all="ignore"):
        f, J = _model(theta, zs, m)
    Jw = J * w[:, None]
    # no truncation (rcond = 0): a parameter the samples do not determine (a head whose step
    # lies beyond every node) must show up as a huge sensitivity, never as a zero one
    G = np.linalg.pinv(Jw, rcond=0) * w[None, :]
    if not np.all(np.isfinite(G)):
        raise InterpolationError(f"{what}: the samples do not determine {m} heads (a singular "
                                 f"Jacobian: a head's step lies beyond the nodes, or c_h = 0)")
    th, size, res = _refine(K, ts, ys, theta, G, eta, m, what)
    with np.errstate(all="ignore"):
        R = J @ G - np.eye(len(zs))
    worst = check_residuals(K, res, np.abs(R) @ eta, yf, theta[m + 1:],
                            f"{what} fitted with {m} heads")
    bounds = np.abs(G) @ eta + 2 * float(size)       # + the refinement's rounding floor
    return RatioFit(+th[0], [+x for x in th[1:m + 1]], [+x for x in th[m + 1:]], G, bounds, worst)


def _refine(K, ts, ys, theta, G, eta, m, what):
    """Gauss-Newton in the field's precision with the float64 ``G`` (a contraction:
    ``G J = I + O(eps)``): the residuals in the field's precision (gmpy2, 30 bits more), the
    correction ``G r`` in float64.  ``(theta in mpmath, its last step plus the correction's
    rounding, the residuals at theta as floats)``."""
    ctx = K.ctx
    slack = [0.0]
    with ctx.extraprec(30), field_precision(ctx):
        tk = [None if t is None else gmpy2.mpfr(mpq(t)) for t in ts]   # K(t), exactly
        yk = [to_mpfr(ctx.mpf(y)) for y in ys]
        tiny = 1e-6 * float(np.min(np.abs(G) @ eta))     # far below every parameter's bound
        step = fixed_step(G, lambda th: _residuals(th, tk, yk, m), slack)
        out = refine(Mpfr, step, [float(x) for x in theta], goal=gmpy2.mul_2exp(1, -K.prec),
                     steps=24, floor=tiny, linear=True)
        if not out.converged:
            raise InterpolationError(f"{what}: the refinement of the least-squares fit with "
                                     f"{m} heads did not converge")
        res = np.array([float(r) for r in _residuals(out.theta, tk, yk, m)])
        th = [from_mpfr(ctx, x) for x in out.theta]
    return th, float(out.size) + slack[0], res


def _residuals(th, ts, ys, m):
    """``f(t) - y`` at every sample, in gmpy2 at the field's precision (:func:`field_precision`
    entered by the caller; ``ts``, ``ys`` as mpfr, ``None`` for t = oo; ``th`` in mpmath or
    as mpfr).  Head by head over the finite samples, then each sample's correctly rounded sum
    (``gmpy2.fsum``): the same operations as sample by sample, in fewer Python loops."""
    th = [x if isinstance(x, MPFR) else to_mpfr(x) for x in th]
    A, ls, cs = th[0], th[1:m + 1], th[m + 1:]
    fin = [t for t in ts if t is not None]
    terms = [[c / (1 + t * r) for t in fin] for c, r in zip(cs, map(gmpy2.exp, ls))]
    sums = iter([A + gmpy2.fsum(col) for col in zip(*terms)] if m else [A] * len(fin))
    return [(A if t is None else next(sums)) - y for t, y in zip(ts, ys)]
