"""The real field's one nonlinear least-squares driver and its one refinement in the field's
precision (docs: explanation/real-field.md#the-stable-plan-for-float-black-boxes, step 1).

Every float64 fit (a ratio family's poles, the pencil's heads, the polish from a far start) is
a call of :func:`solve`: ``scipy.optimize.least_squares`` (``"lm"``, MINPACK, through
``scipy.optimize.leastsq`` with least_squares' settings: :func:`_lmder`; ``"trf"`` with fewer
residuals than parameters), the analytic Jacobian, tolerances at float64's epsilon; the caller
reads scipy's ``status``, ``x``, ``cost`` and ``nfev``.  :func:`refine` is the one iteration in
the field's own precision (mpmath, or gmpy2 at the same precision: :func:`to_mpfr`,
:func:`field_precision`): ``theta <- theta - step(theta)``, a step of zeros ending it (how the
polish's Gauss--Newton, in a context of 53 bits, stops on its cost).

>>> import numpy as np
>>> got = solve(lambda th: np.array([th[0] - 3.0, 2 * (th[0] - 3.0)]),
...             lambda th: np.array([[1.0], [2.0]]), np.zeros(1))
>>> bool(got.status > 0), float(got.x[0]), float(got.cost)
(True, 3.0, 0.0)
>>> under = solve(lambda th: np.array([th[0] + th[1] - 1.0]), lambda th: np.ones((1, 2)),
...               np.zeros(2))            # fewer residuals than parameters: "trf"
>>> bool(under.status > 0), round(float(under.x.sum()), 12)
(True, 1.0)
>>> import mpmath
>>> ctx = mpmath.mp.clone(); ctx.prec = 200
>>> two = ctx.mpf(2)
>>> out = refine(ctx, lambda th: [(th[0] ** 2 - two) / (2 * th[0])], [ctx.mpf(1.5)],
...              goal=ctx.ldexp(1, -200), steps=20)
>>> out.converged, abs(out.theta[0] - ctx.sqrt(2)) < ctx.ldexp(1, -195)
(True, True)
"""

from __future__ import annotations

import math

from contextlib import contextmanager
from dataclasses import dataclass

import gmpy2
import numpy as np
from mpmath.libmp import from_man_exp
from threadpoolctl import ThreadpoolController

EPS = float(np.finfo(float).eps)


def solve(residual, jacobian, theta0, *, method=None, ftol=EPS, xtol=EPS, gtol=EPS,
          max_nfev=None):
    """``scipy.optimize.least_squares(residual, theta0, jac=jacobian, ...)`` (module doc):
    ``method`` ``"lm"`` when there are at least as many residuals as parameters, else
    ``"trf"``, unless given.  A residual that is not finite at a trial point (an overflow
    far from the start) is replaced by ``BIG``, so the step is rejected; one that is not
    finite at the start gives ``status = -1`` (nothing evaluated further)."""
    from scipy.optimize import OptimizeResult, least_squares   # on first use: the exact fields never import scipy
    theta0 = np.asarray(theta0, dtype=float)
    with np.errstate(all="ignore"):
        r0 = np.asarray(residual(theta0), dtype=float)
        if not (np.all(np.isfinite(r0)) and np.all(np.isfinite(theta0))):
            return OptimizeResult(x=theta0, fun=r0, cost=np.inf, status=-1, success=False,
                                  nfev=1, njev=0, message="not finite at the start")
        if method is None:
            method = "lm" if len(r0) >= len(theta0) else "trf"
        if method == "lm":
            return _lmder(residual, jacobian, theta0, ftol, xtol, gtol, max_nfev)
        return least_squares(lambda th: _finite(residual(th)), theta0,
                             jac=lambda th: _finite(jacobian(th)), method=method, ftol=ftol,
                             xtol=xtol, gtol=gtol, max_nfev=max_nfev)


#: MINPACK's info (lmder) as least_squares' status.  6, 7 and 8 (ftol, xtol, gtol "too small":
#: no further progress is possible in float64) are convergence at machine precision, reported
#: as that tolerance being met (least_squares never sees them: it refuses tolerances below eps,
#: while these fits ask for eps itself, where MINPACK may still return them).
_STATUS = {0: -1, 1: 2, 2: 3, 3: 4, 4: 1, 5: 0, 6: 2, 7: 3, 8: 1}


def _lmder(residual, jacobian, theta0, ftol, xtol, gtol, max_nfev):
    """``least_squares(method="lm")`` without its per-evaluation wrapping: the same MINPACK
    ``lmder`` call (through ``scipy.optimize.leastsq``: no column scaling given, so MINPACK
    scales by the Jacobian's columns as least_squares' default ``x_scale="jac"`` does; factor
    100; at most ``100 n`` evaluations unless given), so the same iterates, at a fraction of
    the Python overhead of each evaluation of these small fits."""
    from scipy.optimize import OptimizeResult, leastsq
    n = theta0.size
    x, _, info, _, ier = leastsq(lambda th: _finite(residual(th)), theta0,
                                 Dfun=lambda th: _finite(jacobian(th)), full_output=True,
                                 ftol=ftol, xtol=xtol, gtol=gtol,
                                 maxfev=100 * n if max_nfev is None else max_nfev)
    f = info["fvec"]
    return OptimizeResult(x=x, cost=0.5 * float(np.dot(f, f)), fun=f, status=_STATUS[ier],
                          success=_STATUS[ier] > 0, nfev=info["nfev"], njev=info.get("njev"))


BIG = 1e100          # a non-finite residual or derivative at a trial point, in its stead


def _finite(a):
    a = np.asarray(a, dtype=float)
    if math.isfinite(a.sum()):          # no inf or nan (a finite sum may overflow: checked)
        return a
    return a if np.isfinite(a).all() else np.nan_to_num(a, nan=BIG, posinf=BIG, neginf=-BIG)


def last(fn):
    """``fn`` remembering its last argument and value: what a residual and its Jacobian share
    is computed once at a point (MINPACK asks the Jacobian at the point it evaluated last).

    >>> calls = []
    >>> sq = last(lambda th: calls.append(1) or th * th)
    >>> float(sq(np.array([3.0]))[0]), float(sq(np.array([3.0]))[0]), len(calls)
    (9.0, 9.0, 1)
    """
    memo = [None, None]

    def once(theta):
        key = np.asarray(theta, dtype=float).tobytes()
        if memo[0] != key:
            memo[0], memo[1] = key, fn(theta)
        return memo[1]
    return once


def to_mpfr(x):
    """An mpmath ``mpf`` as the same number in gmpy2's ``mpfr``, for arithmetic at the
    field's precision (:func:`field_precision`) about ten times faster than mpmath's; exact
    inside that context (a mantissa of at most its precision), infinities and nan as
    themselves.

    >>> import mpmath
    >>> ctx = mpmath.mp.clone(); ctx.prec = 120
    >>> third = ctx.mpf(1) / 3
    >>> with field_precision(ctx):
    ...     r = to_mpfr(third)
    ...     exact = ctx.mpf(r.as_integer_ratio()[0]) / r.as_integer_ratio()[1] == third
    ...     one = r * 3 == 1
    ...     neg = to_mpfr(-third) < 0
    >>> exact, one, neg
    (True, True, True)
    """
    sign, man, exp, bc = x._mpf_
    if not man:
        return gmpy2.mpfr(float(x))
    r = gmpy2.mul_2exp(gmpy2.mpfr(man, max(int(bc), 1)), int(exp))
    return -r if sign else r


def field_precision(ctx):
    """gmpy2's context at ``ctx``'s precision (its ``prec`` now, extra precision included),
    rounding to nearest as mpmath does: the arithmetic of :func:`to_mpfr`'s numbers."""
    return gmpy2.context(precision=int(ctx.prec))


def from_mpfr(ctx, r):
    """A gmpy2 ``mpfr`` (finite) as the same number in mpmath, exactly (not rounded to
    ``ctx``'s precision: ``+x`` does that); the inverse of :func:`to_mpfr`.

    >>> import mpmath
    >>> ctx = mpmath.mp.clone(); ctx.prec = 120
    >>> third = ctx.mpf(1) / 3
    >>> with field_precision(ctx):
    ...     back = from_mpfr(ctx, to_mpfr(third))
    >>> back == third, from_mpfr(ctx, gmpy2.mpfr(0)) == 0
    (True, True)
    """
    man, exp = r.as_mantissa_exp()
    return ctx.make_mpf(from_man_exp(int(man), int(exp)))


class Mpfr:
    """gmpy2's ``mpfr`` as the context of :func:`refine` (inside :func:`field_precision`): the
    same steps as in the mpmath context of that precision (both round to nearest), at a
    fraction of the cost; :func:`from_mpfr` brings the result back."""

    mpf = staticmethod(gmpy2.mpfr)
    inf = gmpy2.inf()


_BLAS: list = []      # the process's ThreadpoolController (found once)
_SAVED: list = []     # per open one_blas_thread, innermost last: the BLAS threads at its entry


def _blas():
    if not _BLAS:
        # scipy (imported on first use, module doc) brings its own OpenBLAS: load it before the
        # controller looks for the process's BLAS libraries, so that it pins that one too
        import scipy.optimize  # noqa: F401
        _BLAS.append(ThreadpoolController())
    return _BLAS


@contextmanager
def one_blas_thread():
    """BLAS (numpy's and scipy's OpenBLAS) at one thread inside the block.  The learner's linear
    algebra is many small SVDs, eigendecompositions and products (matrices of tens to a few
    hundred rows), which threads do not speed up; on a loaded machine a thread pool waiting
    for busy cores made them 20--170 times slower (issue 23).  The box runs with the threads
    each BLAS library had when the block was entered (:func:`box_blas_threads`); on leaving
    (an exception too) they are restored.

    >>> with one_blas_thread():
    ...     inside = [c.num_threads for c in _blas()[0].select(user_api="blas").lib_controllers]
    >>> all(n == 1 for n in inside)
    True
    """
    ctl = _blas()[0]
    _SAVED.append(ctl.select(user_api="blas").info())
    try:
        with ctl.limit(limits=1, user_api="blas"):
            yield
    finally:
        _SAVED.pop()


@contextmanager
def box_blas_threads():
    """Inside :func:`one_blas_thread`: the BLAS thread counts at its entry (per library), for
    the black box's own computation; outside it, the counts as they are."""
    if not _SAVED or not _SAVED[-1]:
        yield
        return
    with _blas()[0].limit(limits=_SAVED[-1]):
        yield


@dataclass(frozen=True)
class Refined:
    """What :func:`refine` did: ``theta`` (in the context), the size of its last step,
    the steps taken and whether it converged (a step within ``goal``, or the rounding floor)."""

    theta: list
    size: object
    steps: int
    converged: bool


def refine(ctx, step, theta, *, goal, steps, floor=None, linear=False) -> Refined:
    """``theta <- theta - step(theta)`` in ``ctx`` (module doc) until every component's step is
    at most ``goal`` times ``max(1, |theta_i|)`` (converged), or -- with ``floor`` given --
    the step no longer halves from the third on while it is at most ``floor`` (the rounding
    floor of a fixed float64 ``step``: converged too); not converged after ``steps``.

    ``linear``: ``step`` is a fixed linear map of the residuals, so near a solution the steps
    shrink geometrically.  Then a step within ``floor`` that is at most half the one before
    also converges (a contraction by at least 2 seen: the distance left is at most that step,
    which the callers' bounds add twice); and the iteration stops, not converged, once two
    steps in a row show that their contraction cannot bring the step to ``floor`` within the
    steps left (a step that grows, or shrinks too slowly)."""
    theta = [ctx.mpf(t) for t in theta]
    prev = size = None
    doomed = 0
    for it in range(steps):
        delta = step(theta)
        theta = [t - s for t, s in zip(theta, delta)]
        size = max(abs(s) for s in delta)
        if all(abs(s) <= goal * max(1, abs(t)) for s, t in zip(delta, theta)):
            return Refined(theta, size, it + 1, True)
        if floor is not None and it >= 1 and size <= floor and (
                (linear and size <= prev / 2) or (it >= 2 and size > prev / 2)):
            return Refined(theta, size, it + 1, True)
        if linear and floor is not None and it >= 1 and size > floor:
            q = size / prev if prev else ctx.inf
            left = steps - it - 1
            doomed = doomed + 1 if (not q < 1 or size * q ** left > floor) else 0
            if doomed >= 2:
                return Refined(theta, size, it + 1, False)
        prev = size
    return Refined(theta, size, steps, False)


def fixed_step(G, residuals, slack):
    """A step for :func:`refine` with a fixed float64 pseudo-inverse ``G`` (a contraction:
    ``G J = I + O(eps)``): ``residuals(theta)`` in the field's precision, the correction
    ``G r`` in float64, whose rounding -- at most ``(n + 2) eps |G| |r|``, its own and r's to
    float64 -- goes to ``slack[0]`` (for the caller's bounds).  A diverging step gives nan (not
    converged)."""
    gabs, n = np.abs(G), G.shape[1]

    def step(theta):
        rf = np.array([float(r) for r in residuals(theta)])
        with np.errstate(all="ignore"):
            slack[0] = float(np.max(gabs @ np.abs(rf))) * (n + 2) * EPS
            return [gmpy2.mpfr(float(x)) for x in G @ rf]
    return step
