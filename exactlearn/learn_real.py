"""Learning over the real field: query scaling, error propagation, tolerance certificate.

Over :class:`~exactlearn.fields.real.Real` nothing is exact, so the paper plan of
SPEC §3 is run with three additions (SPEC §4 "Real", §6).  :func:`run_real` is what
:func:`exactlearn.learner.learn` calls for an inexact field and the paper plan.

1. Query directions and scaling (the rule)
-------------------------------------------
Conditioning depends on how spread the exponents ``s = e^T W_h x`` are: at ``|s| >> 1``
some ``rho_h = e^s`` are huge or tiny and their heads all but vanish from the samples;
when the ``s_h`` of one configuration crowd together their poles do.  So:

* **Directions.**  The learner draws X and E as usual (integers in ``[-R, R]``,
  ``R = 1000`` by default for this field) and replaces each by the *exactly orthogonal*
  rational matrix of its skew part (Cayley, :func:`orthogonal_plan`): unit tokens,
  perfectly conditioned final solves, exact rational queries.
* **Scale.**  Both are multiplied by one rational ``sigma`` (a multiple of 1/16):

      sigma = sqrt(TARGET / s_rms),   TARGET = 1,

  where ``s_rms`` is the root mean square of ``log rho_h`` over the poles of a *probe*:
  the plan's own family ``(x_1, e_1)`` sampled at unit scale for ``k = 0 .. 2H``
  (``2H + 1`` queries; if it cannot be analysed it is repeated at a quarter of the scale,
  at most 4 times).  Exponents scale by ``sigma^2``, so the probe's exponents then have
  rms about 1 and every configuration's are of order one (on all-MiniLM-L6-v2 heads:
  rms targets 1-2 give errors around 1e-55 at 100 digits, 4 already fails some draws).
  ``query_scale=`` fixes ``sigma`` (no probe).  Probe queries are counted in ``queries``
  and reported separately as ``probe_queries``: ``queries = plan count + probe_queries``
  (probe queries the plan repeats, when ``sigma = 1``, are reused, not asked twice).

2. Error propagation (the a-posteriori ``error_bound``)
------------------------------------------------------
Every observation ``y_q`` differs from the true ``f(q)`` by at most
``eta_q = eta + u_q``: the oracle's stated noise ``eta`` plus its rounding,
``u_q = 2^-prec * 64 (d + 4) * Y`` with ``Y`` the largest ``sum_h sum_i p_i |v_h.x_i|``
(first bounded by ``H max|y|``, then recomputed from the recovered heads).  Every
derived quantity ``z`` is tracked to first order as a *linear functional of the
observation errors*, ``dz = sum_q S_z[q] eps_q``, and bounded by the worst case
``B_z = sum_q |S_z[q]| eta_q`` (exact in the linear model: correlations through shared
observations are kept, not added up).  Step by step:

* **Interpolation + roots + coefficients** (one configuration, samples at ``k = 0..2H``).
  The Loewner fit (:meth:`Real.rational_interpolate`, its ``noise`` set to
  ``max eta_k / max|y|``) and the roots give a start; Newton / Gauss-Newton on
  ``theta = (A, rho_1..rho_m, c_1..c_m)`` with ``f(k) = A + sum_h c_h / (1 + k rho_h)``
  refines it at ``60 + 8n`` extra bits.  The estimator interpolates (m = H) or is the
  least-squares fit (m < H), so to first order ``d theta = J^+ d y`` with the Jacobian
  ``J[k] = (1, -c_h k / (1 + k rho_h)^2, 1 / (1 + k rho_h))``: ``S_theta = J^+ S_y``.
  This is the conditioning of interpolation and root finding together.
* **V and computed samples**: ``V = E^-T s``, ``s_j = -sum_h c_h(x_1, e_j)``; a
  configuration outside the group of ``x_1`` takes ``y_0 = V.x`` with ``S = sum_r x_r S_V_r``.
* **Logs**: ``d log rho = d rho / rho``.
* **Solves**: every configuration ``(x, e)`` -- basis, within and across -- measures
  ``e^T W_h x = log rho_h`` and ``-v_h.e = c_h`` linearly, ``2d^2 - 1`` measurements of
  the ``d^2`` entries of ``W_h`` and the ``d`` of ``v_h``.  They are combined by weighted
  least squares with weights ``1 / B^2`` (``u = G m``, ``G = (A^T Om A)^-1 A^T Om``; with
  exact data this is ``W_h = E^-T M_h X^-1``, ``v_h = -E^-T c_h`` of SPEC §3), so a
  configuration whose poles crowd is outweighed by the others; ``S_u = G S_m`` (the
  weights depend on the data only through the bounds: a second-order effect).

The reported bound of each parameter is ``2 B + r``: the factor 2 covers second-order
terms, which are below ``1e-3`` of the first-order ones because the learner *fails*
(an explicit degenerate-draw error) when any relative first-order bound of a ``rho``
or ``c`` exceeds ``LINEAR_LIMIT = 1e-3``; ``r = 2^-prec 64 N sum_n |G_n m_n|`` is the
rounding of the final solves.  ``error_bound`` is the largest over all heads and entries.
The sensitivities are kept at ``dps + 30`` digits: the rows of an ill-conditioned
``J^+`` are as large as its condition number and cancel in sums.

3. Decisions and the certificate
--------------------------------
* Matching (products of ``rho`` and sums of ``c``, :mod:`exactlearn.match`) runs in
  ``K.with_tolerance(tol, sep)`` with ``tol = 30 * max_z B_z / max(1, |z|) * max(1, max rho)``
  over all fitted ``rho`` and ``c``: equal within that, unequal above
  ``sep = min(sqrt(tol), 10^6 tol)``, undecided (a failure) between.  The limit check
  ``A = V.a`` of every configuration fails when ``|A - V.a| > 10 B + r``.
* Certificate: every observation is recomputed from the recovered heads and must agree
  within ``eta_q + sum |df/dW| B_W + sum |df/dv| B_v + rounding`` -- the noise plus the
  effect of the parameter uncertainty.  It never claims exactness: the result says
  ``"certificate": "within tolerance"`` and reports the largest residual/tolerance ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field as dc_field

import mpmath
from gmpy2 import mpq

from . import linalg
from .certify import CertificateError
from .fields.base import FieldError
from .fields.rational import QQ
from .interpolate import InterpolationError, cauchy_interpolate, poles
from .match import label_basis
from .model import Head, distinct_tokens
from .plan import paper_plan

TARGET = mpq(1)          # the probe family's exponents are scaled to rms about TARGET
PROBE_TRIES = 4
SAFETY = 2               # reported bound = SAFETY * first-order bound + rounding
LINEAR_LIMIT = 1e-3           # a float: compared with low-precision bounds
LIMIT_FACTOR = 10        # the check A = V.a allows LIMIT_FACTOR first-order bounds
MATCH_FACTOR = 30

_LO = mpmath.MPContext()  # sensitivities and bounds need only a few digits
_LO.dps = 20


def _degenerate(msg):
    from .learner import Degenerate as LearnerDegenerate
    return LearnerDegenerate(msg)


# -- first-order sensitivities -------------------------------------------------------------
_SENS_CTX: dict = {}


def sens_context(K):
    """The context of the sensitivities: ``K.dps + 30`` digits.  The rows of an
    ill-conditioned ``J^+`` are as large as its condition number and cancel in sums
    (e.g. ``sum_h c_h = y_0 - A``), so they need the working precision and more."""
    ctx = _SENS_CTX.get(K.dps)
    if ctx is None:
        ctx = _SENS_CTX[K.dps] = mpmath.MPContext()
        ctx.dps = K.dps + 30
    return ctx


class Sens:
    """A linear functional of the observation errors: ``{observation index: coefficient}``."""

    __slots__ = ("ctx", "c")

    def __init__(self, ctx, coeffs=None):
        self.ctx = ctx
        self.c = coeffs if coeffs is not None else {}

    @classmethod
    def unit(cls, ctx, q) -> "Sens":
        return cls(ctx, {q: ctx.one})

    def scaled(self, a) -> "Sens":
        a = self.ctx.convert(a)
        return Sens(self.ctx, {q: x * a for q, x in self.c.items()})

    def add(self, other: "Sens", a=1) -> "Sens":
        return _combine(self.ctx, [(1, self), (a, other)])

    def bound(self, etas):
        """Worst case ``sum_q |S[q]| eta_q`` (a low-precision number)."""
        return _LO.convert(self.ctx.fsum(abs(x) * etas[q] for q, x in self.c.items()))


def _combine(ctx, terms) -> Sens:
    out: dict = {}
    for a, s in terms:
        a = ctx.convert(a)
        if a == 0:
            continue
        for q, x in s.c.items():
            out[q] = out.get(q, ctx.zero) + x * a
    return Sens(ctx, out)


# -- asking ------------------------------------------------------------------------------
class _Asker:
    """Asks through the learner's recorder; an identical earlier query is reused."""

    def __init__(self, rec):
        self.rec = rec
        self.seen: dict = {}

    def __call__(self, tokens):
        key = tuple(tuple(t) for t in tokens)
        got = self.seen.get(key)
        if got is None:
            y = self.rec(tokens)
            got = (y, len(self.rec.observations) - 1)
            self.seen[key] = got
        return got


# -- one configuration ---------------------------------------------------------------------
@dataclass
class Fit:
    """A fitted family ``f(k) = A + sum_h c_h / (1 + k rho_h)`` with first-order sensitivities."""

    A: object
    rhos: list
    cs: list
    sA: Sens
    srho: list
    sc: list
    poles: list = dc_field(default_factory=list)     # [(rho, c)] as handed to match

    def bounds(self, etas):
        return self.sA.bound(etas), [s.bound(etas) for s in self.srho], [s.bound(etas) for s in self.sc]


def fit_family(K, H, ys, ssens, etas, computed0=False, m=None) -> Fit:
    """Fit ``ys`` (k = 0..2H) and propagate the sample sensitivities ``ssens`` (module doc).

    ``computed0``: ``ys[0]`` is the computed ``V.x``, not an observation.  Its error
    (``V`` comes from extrapolated limits) is far above the observations' and would
    swamp the pole-count decisions of the Loewner start, so the start is taken from the
    observed samples alone: all ``2H + 1`` points with the observations' noise when the
    group of ``x_1`` showed ``m = H`` poles (the interpolant is unique and its dependence
    on ``ys[0]`` is in the sensitivities), or ``m`` poles through the observed samples
    ``k = 1 .. 2m + 1`` when ``m < H``.  The refinement then uses every sample.
    """
    ctx = K.ctx
    n = 2 * H + 1
    eta_k = [s.bound(etas) for s in ssens]
    ymax = max(abs(y) for y in ys)
    if ymax == 0:
        raise _degenerate("a query family returned only zeros")
    noise = max(eta_k[1:] if computed0 else eta_k) / _LO.convert(ymax)
    noise = min(max(noise, _LO.ldexp(1, -K.prec)), _LO.mpf("1e-3"))
    Kc = K.with_tolerance(K.tol, K.sep, noise=K(noise))
    if computed0 and m is not None and m < H:
        rf = cauchy_interpolate([Kc(k) for k in range(1, 2 * m + 2)], ys[1:2 * m + 2], m, Kc)
    else:
        rf = cauchy_interpolate([Kc(k) for k in range(n)], ys, H, Kc)
    pl = poles(rf, Kc)
    m = len(pl)
    theta = [rf.limit(Kc)] + [r for r, _ in pl] + [c for _, c in pl]
    extra = 60 + 8 * n
    goal = ctx.ldexp(1, -(K.prec + 8))
    with ctx.extraprec(extra):
        theta = [ctx.mpf(t) for t in theta]
        yv = [ctx.mpf(y) for y in ys]
        for _ in range(12):
            J, r = _jacobian(ctx, theta, m, n, yv)
            delta = _pinv(ctx, J, m, n) * r
            theta = [t - delta[i] for i, t in enumerate(theta)]
            if all(abs(delta[i]) <= goal * max(1, abs(t)) for i, t in enumerate(theta)):
                break
        else:
            raise InterpolationError(f"the refinement of a fitted family with {m} poles did not "
                                     f"converge: its samples do not fit {m} poles (a pole hidden "
                                     f"in the group of x_1, e.g. v_h.e = 0, or an output error "
                                     f"larger than stated)")
        if any(t <= 0 for t in theta[1:m + 1]):
            raise InterpolationError("a fitted rho is not positive")
        J, _ = _jacobian(ctx, theta, m, n, yv)
        Jp = _pinv(ctx, J, m, n)
        S = sens_context(K)
        rows = [[S.convert(Jp[i, k]) for k in range(n)] for i in range(2 * m + 1)]
    theta = [+t for t in theta]
    sens = [_combine(S, zip(rows[i], ssens)) for i in range(2 * m + 1)]
    rhos, cs = theta[1:m + 1], theta[m + 1:]
    return Fit(theta[0], rhos, cs, sens[0], sens[1:m + 1], sens[m + 1:],
               [(r, c) for r, c in zip(rhos, cs)])


def _jacobian(ctx, theta, m, n, ys):
    A, rhos, cs = theta[0], theta[1:m + 1], theta[m + 1:]
    J = ctx.matrix(n, 2 * m + 1)
    r = ctx.matrix(n, 1)
    for k in range(n):
        f = A
        J[k, 0] = 1
        for h in range(m):
            den = 1 + k * rhos[h]
            f += cs[h] / den
            J[k, 1 + h] = -cs[h] * k / den ** 2
            J[k, 1 + m + h] = 1 / den
        r[k] = f - ys[k]
    return J, r


def _pinv(ctx, J, m, n):
    """``J^-1`` (square) or the Moore-Penrose inverse ``J^+`` (more samples than unknowns)."""
    p = 2 * m + 1
    if p == n:
        return ctx.inverse(J)
    U, S, Vt = ctx.svd_r(J, full_matrices=False)
    out = ctx.matrix(p, n)
    for i in range(p):
        for k in range(n):
            out[i, k] = ctx.fsum(Vt[t, i] * U[k, t] / S[t] for t in range(p))
    return out


# -- scaling -------------------------------------------------------------------------------
def _scaled_plan(plan, sigma):
    X = [tuple(sigma * mpq(a) for a in x) for x in plan.X]
    E = [tuple(sigma * mpq(a) for a in e) for e in plan.E]
    return paper_plan(X, E, plan.H)


def cayley(A):
    """The exactly orthogonal rational matrix ``(I - S)(I + S)^-1`` of the skew part
    ``S = A - A^T`` of an integer matrix (``I + S`` is invertible: S has imaginary spectrum)."""
    d = len(A)
    S = [[QQ(A[i][j] - A[j][i]) for j in range(d)] for i in range(d)]
    I = linalg.identity(d, QQ)
    minus = [[I[i][j] - S[i][j] for j in range(d)] for i in range(d)]
    plus = [[I[i][j] + S[i][j] for j in range(d)] for i in range(d)]
    return linalg.matmul(minus, linalg.inverse(plus, QQ), QQ)


def orthogonal_plan(plan):
    """The plan with X and E replaced by the exactly orthogonal (Cayley) matrices built from
    the drawn ones: unit token directions, perfectly conditioned solves, exact rationals."""
    d = plan.d
    X = cayley([[plan.X[j][i] for j in range(d)] for i in range(d)])     # rows of the drawn X
    E = cayley([[plan.E[j][i] for j in range(d)] for i in range(d)])
    cols = lambda M: [tuple(mpq(M[i][j]) for i in range(d)) for j in range(d)]
    return paper_plan(cols(X), cols(E), plan.H)


def scale_for(K, s_rms):
    """sigma = sqrt(TARGET / s_rms) rounded to a multiple of 1/16 (at least 1/16)."""
    t = K.ctx.sqrt(K(TARGET) / s_rms)
    return mpq(max(1, int(K.ctx.nint(16 * t))), 16)


def probe_scale(plan, ask, K, H, eta, Yguess):
    """``(sigma, probe_detail)`` by the rule of the module docstring (``plan`` has unit
    columns)."""
    c = plan.configs[0]                   # (x_1, e_1)
    sigma0 = mpq(1)
    tries = []
    ctx = K.ctx
    for _ in range(PROBE_TRIES):
        x = [sigma0 * mpq(a) for a in c.x]
        a = [xi + sigma0 * mpq(b) for xi, b in zip(x, c.e)]
        got = [ask([a] * k + [x]) for k in range(2 * H + 1)]
        ys = [y for y, _ in got]
        etas = {q: _LO.convert(eta) + _round(K, Yguess(ys)) for _, q in got}
        try:
            fit = fit_family(K, H, ys, [Sens.unit(sens_context(K), q) for _, q in got], etas)
        except (FieldError, ArithmeticError, ValueError) as exc:
            tries.append({"scale": str(sigma0), "failed": str(exc)[:120]})
            sigma0 /= 4
            continue
        ss = [ctx.log(r) for r in fit.rhos]
        rms = ctx.sqrt(ctx.fsum(s * s for s in ss) / len(ss)) if ss else None
        tries.append({"scale": str(sigma0), "poles": len(ss),
                      "rms_exponent": None if rms is None else ctx.nstr(rms, 4),
                      "max_exponent": None if rms is None else ctx.nstr(max(abs(s) for s in ss), 4)})
        if not rms:
            return sigma0, tries
        return sigma0 * scale_for(K, rms / sigma0 ** 2), tries
    return sigma0, tries


def _round(K, Y):
    """Rounding allowance of one oracle output whose terms have size Y."""
    return _LO.ldexp(64 * 8, -K.prec) * _LO.convert(Y)


# -- the run -------------------------------------------------------------------------------
@dataclass
class RealOutcome:
    """What :func:`run_real` adds to a learning result."""

    sigma: object
    probe_queries: int
    error_bound: object
    head_bounds: list
    eta: object
    detail: dict
    snap: dict | None = None
    _W_bounds: list = dc_field(default_factory=list, repr=False)
    _v_bounds: list = dc_field(default_factory=list, repr=False)
    _etas: dict = dc_field(default_factory=dict, repr=False)


def run_real(plan, rec, K, *, noise=None, query_scale=None, snap=False, snap_height=None):
    """Probe, scale, ask and analyse the paper plan over the real field ``K``.

    Returns ``(heads, certified_observations, RealOutcome)``; raises the learner's
    failure exceptions (degenerate draw, field errors, :class:`CertificateError`).
    """
    ctx = K.ctx
    d, H = plan.d, plan.H
    start = len(rec.observations)
    eta = K(0) if noise is None else K(noise)
    if eta < 0:
        raise ValueError("noise must be >= 0")
    ask = _Asker(rec)

    def yguess(ys):
        return H * max(abs(y) for y in ys)

    probe = []
    nplan = orthogonal_plan(plan)
    if query_scale is None:
        sigma, probe = probe_scale(nplan, ask, K, H, eta, yguess)
    else:
        sigma = mpq(query_scale) if not isinstance(query_scale, str) else QQ(query_scale)
        if sigma <= 0:
            raise ValueError("query_scale must be > 0")
    n_probe_asked = len(rec.observations) - start
    splan = _scaled_plan(nplan, sigma)
    plan_obs = set()
    y_shared = q_shared = None
    values: dict = {}
    for q in splan.queries:
        y, idx = ask(splan.tokens(q))
        plan_obs.add(idx)
        if q.k == 0:
            y_shared, q_shared = y, idx
        else:
            values.setdefault(q.config, []).append((y, idx))
    probe_queries = n_probe_asked - len(plan_obs & set(range(start, start + n_probe_asked)))
    obs = rec.observations[start:]
    Y = yguess([y for _, y in obs])
    etas = {start + i: _LO.convert(eta) + _round(K, Y) for i in range(len(obs))}
    heads, n_cert, out = _analyse_real(splan, y_shared, q_shared, values, K, etas, eta, obs, start)
    out.sigma = sigma
    out.probe_queries = probe_queries
    out.detail.update({"query_scale": str(sigma), "scale_rule": "orthogonal X, E (Cayley); "
                       "sigma = sqrt(1 / rms log rho of the probe family), to 1/16",
                       "probe": probe, "probe_queries": probe_queries})
    if snap:
        from .snap import snap_heads
        out.snap = snap_heads(heads, out, K, obs, start, height=snap_height)
    return heads, n_cert, out


def _analyse_real(plan, y_shared, q_shared, values, K, etas, eta, obs, start):
    ctx = K.ctx
    d, H = plan.d, plan.H
    configs = plan.configs
    fits: dict = {}
    S = sens_context(K)
    for n, c in enumerate(configs):
        if c.shares_k0:
            ys = [y_shared] + [y for y, _ in values[n]]
            ss = [Sens.unit(S, q_shared)] + [Sens.unit(S, q) for _, q in values[n]]
            fits[n] = fit_family(K, H, ys, ss, etas)
    # V from the group of x_1 (SPEC §3): E^T V = (V.e_j)_j, V.e_j = -sum_h c_h(x_1, e_j)
    Etinv_q = linalg.inverse([[QQ(plan.E[j][r]) for r in range(d)] for j in range(d)], QQ)
    s_val, s_sens = [], []
    for j in range(d):
        f = fits[plan.index("basis", 0, j)]
        s_val.append(-ctx.fsum(f.cs))
        s_sens.append(_combine(S, ((-1, s) for s in f.sc)))
    V = [ctx.fsum(K(Etinv_q[r][j]) * s_val[j] for j in range(d)) for r in range(d)]
    V_sens = [_combine(S, ((Etinv_q[r][j], s_sens[j]) for j in range(d))) for r in range(d)]

    m_shared = len(fits[plan.index("basis", 0, 0)].rhos)

    def dot_V(x):
        return (ctx.fsum(V[r] * K(x[r]) for r in range(d)),
                _combine(S, ((x[r], V_sens[r]) for r in range(d))))

    for n, c in enumerate(configs):
        if n not in fits:
            y0, s0 = dot_V(c.x)
            ys = [y0] + [y for y, _ in values[n]]
            ss = [s0] + [Sens.unit(S, q) for _, q in values[n]]
            fits[n] = fit_family(K, H, ys, ss, etas, computed0=True, m=m_shared)
    # every family's limit is V.a (no additive constant), within its bound
    for n, c in enumerate(configs):
        f = fits[n]
        va, sva = dot_V(c.a)
        diff = f.A - va
        b = f.sA.add(sva, -1).bound(etas)
        allow = LIMIT_FACTOR * b + _round(K, 64 * (abs(f.A) + abs(va)))
        if _LO.convert(abs(diff)) > allow:
            raise _degenerate(f"configuration {c.kind}{(c.i + 1, c.j + 1)}: the limit of f(q_k) "
                              f"is not V.a within its error bound ({ctx.nstr(abs(diff), 3)} > "
                              f"{_LO.nstr(allow, 3)}): an additive constant or a bias is present")
    # first-order validity and the matching tolerance
    worst_rel = _LO.zero
    worst_abs = _LO.zero
    rho_max = 1
    for n, f in fits.items():
        _, brho, bc = f.bounds(etas)
        for r, b in zip(f.rhos, brho):
            worst_rel = max(worst_rel, b / _LO.convert(r))
            worst_abs = max(worst_abs, b / max(1, _LO.convert(r)))
            rho_max = max(rho_max, r)
        for c, b in zip(f.cs, bc):
            worst_rel = max(worst_rel, b / _LO.convert(abs(c)))
            worst_abs = max(worst_abs, b / max(1, _LO.convert(abs(c))))
    if worst_rel > _LO.mpf(LINEAR_LIMIT):
        raise _degenerate(f"the output error is too large for this draw: a pole or coefficient "
                          f"has relative first-order error bound {_LO.nstr(worst_rel, 3)} > "
                          f"{LINEAR_LIMIT} (first-order error bounds would not be reliable)")
    tol = MATCH_FACTOR * worst_abs * _LO.convert(rho_max)
    tol = max(tol, _LO.convert(K.tol))
    if tol >= _LO.mpf("1e-4"):
        raise _degenerate(f"matching tolerance {_LO.nstr(tol, 3)} too large to decide the pairing")
    Km = K.with_tolerance(K(tol), K(min(_LO.sqrt(tol), tol * 10 ** 6)), noise=K.noise)
    labelled = label_basis(plan, {n: f.poles for n, f in fits.items()}, Km)
    m = len(labelled[(0, 0)])

    def pole_of(n, h):
        """Index of head h's pole in configuration n: labelled for the basis, the pole
        nearest to the product of the labelled basis rho for a matching configuration."""
        c = configs[n]
        f = fits[n]
        if c.kind == "basis":
            item = labelled[(c.i, c.j)][h]
            return next(t for t, pole in enumerate(f.poles) if pole is item)
        if c.kind == "within":
            want = labelled[(c.i, 0)][h][0] * labelled[(c.i, c.j)][h][0]
        else:
            want = labelled[(0, c.j)][h][0] * labelled[(c.i, c.j)][h][0]      # (x_1 + x_i, e_j)
        return min(range(len(f.rhos)), key=lambda t: abs(f.rhos[t] - want))

    # every configuration measures its e^T W_h x (log rho) and -v_h.e (c) linearly:
    # weighted least squares over all 2d^2 - 1 of them (exact data: W = E^-T M X^-1)
    A_W = [[mpq(c.e[r]) * mpq(c.x[q]) for r in range(d) for q in range(d)] for c in configs]
    A_v = [[-mpq(c.e[r]) for r in range(d)] for c in configs]
    raw = []
    for h in range(m):
        logs, slogs, cs, scs = [], [], [], []
        for n in range(len(configs)):
            f = fits[n]
            p = pole_of(n, h)
            logs.append(K.log(f.rhos[p]))
            slogs.append(f.srho[p].scaled(1 / f.rhos[p]))
            cs.append(f.cs[p])
            scs.append(f.sc[p])
        w, Sw, Rw = _wls(K, S, A_W, logs, slogs, etas)
        v, Sv, Rv = _wls(K, S, A_v, cs, scs, etas)
        W = [w[r * d:(r + 1) * d] for r in range(d)]
        SW = [Sw[r * d:(r + 1) * d] for r in range(d)]
        RW = [Rw[r * d:(r + 1) * d] for r in range(d)]
        raw.append((Head(tuple(tuple(r) for r in W), tuple(v)), SW, RW, Sv, Rv))
    raw.sort(key=lambda t: t[0])
    heads = tuple(t[0] for t in raw)

    def head_bounds(et):
        BW = [[[SAFETY * s.bound(et) + rr for s, rr in zip(srow, rrow)]
               for srow, rrow in zip(SW, RW)] for _, SW, RW, _, _ in raw]
        Bv = [[SAFETY * s.bound(et) + rr for s, rr in zip(Sv, Rv)] for _, _, _, Sv, Rv in raw]
        return BW, Bv

    BW, Bv = head_bounds(etas)
    # the certificate; recompute the rounding allowance from the recovered heads
    Ymax = _LO.zero
    for tokens, _ in obs:
        Ymax = max(Ymax, _LO.convert(_evaluate(heads, tokens, K, None, None)[2]))
    Y0 = max(_LO.convert(abs(y)) for _, y in obs) * H
    if Ymax > Y0:
        etas = {q: _LO.convert(eta) + _round(K, Ymax) for q in etas}
        BW, Bv = head_bounds(etas)
    worst_ratio = _LO.zero
    for i, (tokens, y) in enumerate(obs):
        f, grad, size = _evaluate(heads, tokens, K, BW, Bv)
        tol_q = etas[start + i] + grad + _round(K, size)
        ratio = _LO.convert(abs(f - y)) / tol_q
        worst_ratio = max(worst_ratio, ratio)
        if ratio > 1:
            raise CertificateError(
                f"recovered heads do not reproduce the oracle within tolerance on a query of "
                f"length {len(tokens)} (residual {ctx.nstr(abs(f - y), 3)} > tolerance "
                f"{_LO.nstr(tol_q, 3)}: noise {_LO.nstr(etas[start + i], 3)} + parameter "
                f"uncertainty {_LO.nstr(grad, 3)})")
    head_b = [max([x for row in bw for x in row] + list(bv)) for bw, bv in zip(BW, Bv)]
    bound = max(head_b, default=_LO.zero)
    detail = {
        "certificate": "within tolerance (noise + propagated parameter uncertainty); not exact",
        "certified_observations": len(obs),
        "max_residual_over_tolerance": _LO.nstr(worst_ratio, 3),
        "eta": _LO.nstr(_LO.convert(eta), 6),
        "rounding_per_output": _LO.nstr(_round(K, max(Ymax, Y0)), 3),
        "head_error_bounds": [_LO.nstr(b, 3) for b in head_b],
        "matching_tolerance": _LO.nstr(tol, 3),
        "max_relative_pole_error_bound": _LO.nstr(worst_rel, 3),
        "max_abs_exponent": ctx.nstr(max((abs(ctx.log(r)) for f in fits.values() for r in f.rhos),
                                         default=0), 4),
    }
    out = RealOutcome(sigma=None, probe_queries=0, error_bound=bound, head_bounds=head_b, eta=eta,
                      detail=detail, _W_bounds=BW, _v_bounds=Bv, _etas=etas)
    return heads, len(obs), out


def _wls(K, S, A, meas, sens, etas) -> tuple:
    """Weighted least squares ``min sum_n (A_n . u - meas_n)^2 / B_n^2`` (``B_n`` the
    first-order bound of measurement n): ``u = G meas`` with ``G = (A^T Om A)^-1 A^T Om``;
    returns ``(u, sensitivities G S, rounding allowances)``."""
    ctx = K.ctx
    N, p = len(A), len(A[0])
    bounds = [s.bound(etas) for s in sens]
    # the normal equations lose log2(max w / min w) bits (plus the conditioning of A)
    spread = int(2 * _LO.log(max(bounds) / min(bounds), 2)) if min(bounds) > 0 else 0
    with ctx.extraprec(80 + spread):
        om = [1 / K(b) ** 2 for b in bounds]
        Am = [[K(a) for a in row] for row in A]
        normal = ctx.matrix([[ctx.fsum(om[n] * Am[n][i] * Am[n][j] for n in range(N))
                              for j in range(p)] for i in range(p)])
        inv = ctx.inverse(normal)
        G = [[ctx.fsum(inv[i, j] * Am[n][j] for j in range(p)) * om[n] for n in range(N)]
             for i in range(p)]
        u = [ctx.fsum(G[i][n] * meas[n] for n in range(N)) for i in range(p)]
    su = [_combine(S, ((G[i][n], sens[n]) for n in range(N))) for i in range(p)]
    ru = [_LO.ldexp(64 * N, -K.prec) * _LO.fsum(abs(_LO.convert(G[i][n] * meas[n]))
                                               for n in range(N)) for i in range(p)]
    return [+x for x in u], su, ru


def _evaluate(heads, tokens, K, BW, Bv):
    """``(f, first-order effect of the parameter bounds, size of the terms)`` for one query.

    ``df/dv_h[r] = sum_i p_i x_i[r]``, ``df/dW_h[r][c] = sum_i p_i (u_i - f_h) x_i[r] x_n[c]``
    with ``u_i = v_h.x_i``, ``f_h = sum_i p_i u_i`` (the score is ``x_i^T W_h x_n``)."""
    ctx = K.ctx
    pairs, final = distinct_tokens(tokens)
    toks = [([K(a) for a in t], m) for t, m in pairs]
    xn = [K(a) for a in final]
    total = K.zero
    grad = _LO.zero
    size = _LO.zero
    for h, head in enumerate(heads):
        W, v = head.W, head.v
        wx = [ctx.fsum(a * b for a, b in zip(row, xn)) for row in W]
        s_n = ctx.fsum(a * b for a, b in zip(xn, wx))
        ws = [ctx.exp(ctx.fsum(a * b for a, b in zip(t, wx)) - s_n) * m for t, m in toks]
        Z = ctx.fsum(ws)
        ps = [w / Z for w in ws]
        us = [ctx.fsum(a * b for a, b in zip(v, t)) for t, _ in toks]
        fh = ctx.fsum(p * u for p, u in zip(ps, us))
        total += fh
        size += _LO.convert(ctx.fsum(p * abs(u) for p, u in zip(ps, us)))
        if BW is None:
            continue
        d = len(v)
        for r in range(d):
            gv = ctx.fsum(p * t[r] for p, (t, _) in zip(ps, toks))
            grad += abs(_LO.convert(gv)) * Bv[h][r]
            gw = _LO.convert(abs(ctx.fsum(p * (u - fh) * t[r] for p, u, (t, _) in zip(ps, us, toks))))
            for c in range(d):
                grad += gw * abs(_LO.convert(xn[c])) * BW[h][r][c]
    return total, grad, size


def verify_real(oracle, outcome, heads, d, H, K, convert, rng, R, n) -> tuple:
    """``n`` fresh random queries (length 1..2H+1, entries in ``sigma [-R, R]``) compared with
    the heads within the certificate's tolerance."""
    sigma = outcome.sigma
    eta = _LO.convert(outcome.eta)
    for _ in range(n):
        length = rng.randint(1, 2 * H + 1)
        tokens = [tuple(sigma * rng.randint(-R, R) for _ in range(d)) for _ in range(length)]
        y = oracle(tokens)
        if convert:
            y = K(y)
        f, grad, size = _evaluate(heads, tokens, K, outcome._W_bounds, outcome._v_bounds)
        tol = eta + grad + 2 * _round(K, max(size, _LO.convert(abs(y))))
        if _LO.convert(abs(f - y)) > tol:
            return False, ("verification failed: a fresh random query disagrees with the "
                           "certified heads beyond the tolerance")
    return True, None


def max_parameter_error(recovered, truth, K) -> tuple:
    """(largest |entry difference| over W and v, pairing) between recovered heads and the
    true heads, pairing each true head with the nearest recovered one.

    Raises ValueError when the numbers of heads differ or the pairing is not one-to-one.
    """
    truth = list(truth)
    recovered = list(recovered)
    if len(truth) != len(recovered):
        raise ValueError(f"{len(recovered)} recovered heads, {len(truth)} true heads")

    def entries(h):
        return [K(x) for row in h.W for x in row] + [K(x) for x in h.v]

    rec = [entries(h) for h in recovered]
    used, worst, pairing = set(), K.zero, []
    for ht in truth:
        et = entries(ht)
        dist = [max(abs(a - b) for a, b in zip(er, et)) for er in rec]
        best = min(range(len(rec)), key=dist.__getitem__)
        if best in used:
            raise ValueError("the recovered heads do not pair one-to-one with the true heads")
        used.add(best)
        pairing.append(best)
        worst = max(worst, dist[best])
    return worst, pairing
