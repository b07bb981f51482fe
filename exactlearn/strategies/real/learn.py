"""Learning over the real field: query scaling, error propagation, tolerance certificate.

Over :class:`~exactlearn.fields.real.Real` nothing is exact, so the paper plan of
SPEC §3 is run with three additions (SPEC §4 "Real", §6).  :func:`run_real` is what
:func:`exactlearn.api.learn` calls for an inexact field and the paper plan.

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
  basis families of the plan, ``(x_1, e_1), (x_2, e_2), ...``, sampled at unit scale for
  ``k = 0 .. 2H`` (``2H + 1`` queries each), as many as it takes to see 6 exponents: one
  family (``2H + 1`` queries) for ``H >= 6``, ``ceil(6/H)`` families below.  If the probe
  cannot be analysed it is repeated at a quarter of the scale, at most 4 times; if it fails
  at every one of them the run fails (no scale is guessed: at a tiny scale the heads'
  exponents crowd below the noise and distinct heads merge).  Exponents scale by
  ``sigma^2``, so the probe's exponents then have rms about 1 and every configuration's
  are of order one (on all-MiniLM-L6-v2 heads:
  rms targets 1-2 give errors around 1e-55 at 100 digits, 4 already fails some draws).
  ``query_scale=`` fixes ``sigma`` (no probe).  Probe queries are counted in ``queries``
  and reported separately as ``probe_queries``: ``queries = plan count + probe_queries``
  (probe queries the plan repeats, when ``sigma = 1``, are reused, not asked twice).
  A run that fails still reports the probe queries it asked.

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
* Matching (products of ``rho`` and sums of ``c``, :mod:`exactlearn.pipeline.match`) runs in
  ``K.with_tolerance(tol, sep)`` with ``tol = 30 * max_z B_z / max(1, |z|) * max(1, max rho)``
  over all fitted ``rho`` and ``c``: equal within that, unequal above
  ``sep = min(sqrt(tol), 10^6 tol)``, undecided (a failure) between.
* Noise consistency (SPEC §5: a box noisier than the declared eta is not certified).
  Where the observations fix a quantity more than once, its residual is compared with its
  first-order bound ``B`` from the ``eta_q`` (:func:`check_noise`): the limit ``A = V.a`` of
  every configuration (V comes from the group of ``x_1``) and every least-squares family
  fit (fewer poles than samples allow, residual ``(J J^+ - I) eps``).  A residual above
  ``NOISE_FACTOR B + r`` (``NOISE_FACTOR = 10``) fails the run with
  :class:`NoisierThanDeclared`, reason "outputs noisier than the declared eta" (an
  additive constant or any box outside the class can do the same; both are failures).
* Certificate: every observation is recomputed from the recovered heads and must agree
  within ``eta_q + sum |df/dW| B_W + sum |df/dv| B_v + rounding`` -- the noise plus the
  effect of the parameter uncertainty; a miss is :class:`NoisierThanDeclared` too.  It
  never claims exactness: the result says ``"certificate": "within tolerance"`` (the
  learner's JSON ``"exact": false``) and reports the largest residual/tolerance ratio.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field

import mpmath
from gmpy2 import mpq

from exactlearn.algebra import linalg
from exactlearn.pipeline.certify import CertificateError
from exactlearn.fields.base import FieldError
from exactlearn.fields.rational import QQ
from exactlearn.pipeline.interpolate import InterpolationError, cauchy_interpolate, poles
from exactlearn.model import Head, distinct_tokens
from exactlearn.pipeline.plan import paper_plan
from exactlearn.errors import DegenerateDraw, NoisierThanDeclared

TARGET = mpq(1)          # the probe family's exponents are scaled to rms about TARGET
PROBE_TRIES = 4
SAFETY = 2               # reported bound = SAFETY * first-order bound + rounding
LINEAR_LIMIT = 1e-3           # a float: compared with low-precision bounds

_LO = mpmath.MPContext()  # sensitivities and bounds need only a few digits
_LO.dps = 20


def _degenerate(msg):
    return DegenerateDraw(msg)


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
    ``k = 1 .. 2m + 1`` when ``m < H``.  The refinement then uses every sample.  With fewer
    unknowns than samples (``m < H``) the fit is least squares and its residual is checked
    against the samples' bounds (:func:`check_noise`).
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
        J, res = _jacobian(ctx, theta, m, n, yv)
        Jp = _pinv(ctx, J, m, n)
        S = sens_context(K)
        rows = [[S.convert(Jp[i, k]) for k in range(n)] for i in range(2 * m + 1)]
        if n > 2 * m + 1:      # least squares: the residual (J J^+ - I) eps is seen
            proj = J * Jp
            rrows = [[S.convert(proj[k, l] - (k == l)) for l in range(n)] for k in range(n)]
            resid = [res[k] for k in range(n)]
    theta = [+t for t in theta]
    sens = [_combine(S, zip(rows[i], ssens)) for i in range(2 * m + 1)]
    if n > 2 * m + 1:
        slack = _round(K, 64 * ymax)
        for k in range(n):
            check_noise(resid[k], _combine(S, zip(rrows[k], ssens)).bound(etas), slack,
                        f"a family fitted with {m} of at most {H} poles misses its sample k = {k}")
    rhos, cs = theta[1:m + 1], theta[m + 1:]
    return Fit(theta[0], rhos, cs, sens[0], sens[1:m + 1], sens[m + 1:],
               [(r, c) for r, c in zip(rhos, cs)])


NOISE_FACTOR = 10        # a residual beyond 10 first-order bounds from eta: noisier than declared


def check_noise(residual, bound, slack, what):
    """Raise :class:`NoisierThanDeclared` when ``|residual| > NOISE_FACTOR * bound + slack``.

    ``residual`` is a quantity the observations determine more than once (zero for exact
    outputs of a multi-head attention), ``bound`` its first-order worst case when every
    output is within its ``eta_q`` of the truth, ``slack`` the rounding of computing it."""
    r = _LO.convert(abs(residual))
    allow = NOISE_FACTOR * bound + slack
    if r > allow:
        times = f"{_LO.nstr(r / bound, 3)} times" if bound else "above"
        raise NoisierThanDeclared(
            f"outputs noisier than the declared eta (or not those of a multi-head attention): "
            f"{what} by {_LO.nstr(r, 3)}, {times} its first-order bound {_LO.nstr(bound, 3)} "
            f"from eta (outputs within eta of the model class stay within {NOISE_FACTOR})")


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
    """The exactly orthogonal rational matrix ``(I - S)(I + S)^-1`` of the normalised skew
    part ``S = (A - A^T) / max|A|`` of an integer matrix (``I + S`` is invertible: S has
    imaginary spectrum).  The normalisation keeps the rotation angles spread: a large skew
    part would give a rotation close to ``-I``, whatever the draw."""
    d = len(A)
    top = max(1, max(abs(int(a)) for row in A for a in row))
    S = [[QQ(A[i][j] - A[j][i]) / top for j in range(d)] for i in range(d)]
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


PROBE_SAMPLES = 6        # probe families until at least this many exponents are seen


def probe_families(plan, H):
    """The basis configurations probed: ``(x_i, e_i)``, then ``(x_i, e_i+1)``, ... -- as
    many as it takes to see ``PROBE_SAMPLES`` exponents with H heads (one family for
    H >= 6), at most ``d^2``."""
    d = plan.d
    want = min(d * d, -(-PROBE_SAMPLES // H))
    order = [(i, (i + t) % d) for t in range(d) for i in range(d)]
    return [plan.configs[plan.index("basis", i, j)] for i, j in order[:want]]


def probe_scale(plan, ask, K, H, eta, Yguess):
    """``(sigma, probe_detail)`` by the rule of the module docstring (``plan`` has unit
    columns): the rms of ``log rho`` over the poles of the probe families."""
    sigma0 = mpq(1)
    tries = []
    ctx = K.ctx
    families = probe_families(plan, H)
    for _ in range(PROBE_TRIES):
        ss = []
        try:
            for c in families:
                x = [sigma0 * mpq(a) for a in c.x]
                a = [xi + sigma0 * mpq(b) for xi, b in zip(x, c.e)]
                got = [ask([a] * k + [x]) for k in range(2 * H + 1)]
                ys = [y for y, _ in got]
                etas = {q: _LO.convert(eta) + _round(K, Yguess(ys)) for _, q in got}
                fit = fit_family(K, H, ys, [Sens.unit(sens_context(K), q) for _, q in got], etas)
                ss += [ctx.log(r) for r in fit.rhos]
        except NoisierThanDeclared:
            raise                  # a smaller scale would only hide the noise, not remove it
        except (FieldError, ArithmeticError, ValueError) as exc:
            tries.append({"scale": str(sigma0), "failed": str(exc)[:120]})
            sigma0 /= 4
            continue
        rms = ctx.sqrt(ctx.fsum(s * s for s in ss) / len(ss)) if ss else None
        tries.append({"scale": str(sigma0), "families": len(families), "poles": len(ss),
                      "rms_exponent": None if rms is None else ctx.nstr(rms, 4),
                      "max_exponent": None if rms is None else ctx.nstr(max(abs(s) for s in ss), 4)})
        if not rms:
            return sigma0, tries
        return sigma0 * scale_for(K, rms / sigma0 ** 2), tries
    raise _degenerate(f"the scale probe failed at every scale tried "
                      f"({', '.join(t['scale'] for t in tries)}), so no query scale is known "
                      f"(its samples never fit at most {H} poles within the declared eta: a box "
                      f"noisier than declared or outside the model class, or a degenerate draw); "
                      f"first failure: {tries[0]['failed']}")


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


def run_real(plan, rec, K, *, noise=None, query_scale=None, snap=False, snap_height=None,
             probe_log=None):
    """Probe, scale, ask and analyse the paper plan over the real field ``K``.

    Returns ``(heads, certified_observations, RealOutcome)``; raises the learner's
    failure exceptions (degenerate draw, field errors, :class:`CertificateError` --
    :class:`NoisierThanDeclared` among them).  ``noise`` is eta (see
    :func:`exactlearn.noise.noise_bound`: a float is read as its exact binary value).
    ``probe_log``, a list, gets one entry per call: the probe queries asked, kept up to
    date as they are asked, so a run that fails still reports them.
    """
    from exactlearn.noise import noise_bound
    H = plan.H
    start = len(rec.observations)
    eta = K(0) if noise is None else noise_bound(K, noise)
    if query_scale is not None:
        sigma = mpq(query_scale) if not isinstance(query_scale, str) else QQ(query_scale)
        if sigma <= 0:
            raise ValueError("query_scale must be > 0")
    ask = _Asker(rec)
    probe_log = [] if probe_log is None else probe_log
    probe_log.append(0)

    def yguess(ys):
        return H * max(abs(y) for y in ys)

    probe = []
    nplan = orthogonal_plan(plan)
    if query_scale is None:
        try:
            sigma, probe = probe_scale(nplan, ask, K, H, eta, yguess)
        finally:
            probe_log[-1] = len(rec.observations) - start
    n_probe = len(rec.observations) - start
    splan = _scaled_plan(nplan, sigma)
    reused = set()           # probe queries the plan repeats (sigma = 1): plan queries, not probe
    y_shared = q_shared = None
    values: dict = {}
    for q in splan.queries:
        y, idx = ask(splan.tokens(q))
        if idx < start + n_probe and idx not in reused:
            reused.add(idx)
            probe_log[-1] = n_probe - len(reused)
        if q.k == 0:
            y_shared, q_shared = y, idx
        else:
            values.setdefault(q.config, []).append((y, idx))
    probe_queries = probe_log[-1]
    obs = rec.observations[start:]
    Y = yguess([y for _, y in obs])
    etas = {start + i: _LO.convert(eta) + _round(K, Y) for i in range(len(obs))}
    heads, n_cert, out = _analyse_real(splan, y_shared, q_shared, values, K, etas, eta, obs, start)
    out.sigma = sigma
    out.probe_queries = probe_queries
    out.detail.update({"query_scale": str(sigma), "scale_rule": "orthogonal X, E (Cayley); "
                       "sigma = sqrt(1 / rms log rho of the probe families), to 1/16",
                       "probe": probe, "probe_queries": probe_queries})
    if snap:
        from exactlearn.strategies.real.snap import snap_heads
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
    # every family's limit is V.a (an overdetermined relation: V comes from the group of x_1)
    for n, c in enumerate(configs):
        f = fits[n]
        va, sva = dot_V(c.a)
        check_noise(f.A - va, f.sA.add(sva, -1).bound(etas), _round(K, 64 * (abs(f.A) + abs(va))),
                    f"configuration {c.kind}{(c.i + 1, c.j + 1)}: the limit of f(q_k) misses V.a "
                    f"(an additive constant or bias would do the same)")
    # first-order validity
    worst_rel = _LO.zero
    for n, f in fits.items():
        _, brho, bc = f.bounds(etas)
        for r, b in zip(f.rhos, brho):
            worst_rel = max(worst_rel, b / _LO.convert(r))
        for c, b in zip(f.cs, bc):
            worst_rel = max(worst_rel, b / _LO.convert(abs(c)))
    if worst_rel > _LO.mpf(LINEAR_LIMIT):
        raise _degenerate(f"the output error is too large for this draw: a pole or coefficient "
                          f"has relative first-order error bound {_LO.nstr(worst_rel, 3)} > "
                          f"{LINEAR_LIMIT} (first-order error bounds would not be reliable)")
    index = label_real(plan, fits, etas)
    m = len(fits[plan.index("basis", 0, 0)].rhos)

    def pole_of(n, h):
        return index[n][h]

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
            raise NoisierThanDeclared(
                f"outputs noisier than the declared eta (or a black box outside the model "
                f"class): the recovered heads miss an observation of length {len(tokens)} by "
                f"{ctx.nstr(abs(f - y), 3)} > tolerance {_LO.nstr(tol_q, 3)} (noise "
                f"{_LO.nstr(etas[start + i], 3)} + parameter uncertainty {_LO.nstr(grad, 3)})")
    head_b = [max([x for row in bw for x in row] + list(bv)) for bw, bv in zip(BW, Bv)]
    bound = max(head_b, default=_LO.zero)
    detail = {
        "certificate": "within tolerance (noise + propagated parameter uncertainty); not exact",
        "certified_observations": len(obs),
        "max_residual_over_tolerance": _LO.nstr(worst_ratio, 3),
        "eta": _LO.nstr(_LO.convert(eta), 6),
        "rounding_per_output": _LO.nstr(_round(K, max(Ymax, Y0)), 3),
        "head_error_bounds": [_LO.nstr(b, 3) for b in head_b],
        "matching": f"per relation: equal within {EQUAL_FACTOR}, unequal beyond "
                    f"{UNEQUAL_FACTOR} first-order bounds",
        "max_relative_pole_error_bound": _LO.nstr(worst_rel, 3),
        "max_abs_exponent": ctx.nstr(max((abs(ctx.log(r)) for f in fits.values() for r in f.rhos),
                                         default=0), 4),
    }
    out = RealOutcome(sigma=None, probe_queries=0, error_bound=bound, head_bounds=head_b, eta=eta,
                      detail=detail, _W_bounds=BW, _v_bounds=Bv, _etas=etas)
    return heads, len(obs), out


EQUAL_FACTOR = 10        # matching: equal within 10 first-order bounds ...
UNEQUAL_FACTOR = 10 ** 5  # ... unequal beyond 1e5 of them, undecided (a failure) between


def _relation(x, bound):
    """True (equal), False (unequal) or None (undecided) for a difference x and its bound."""
    x = _LO.convert(abs(x))
    if x <= EQUAL_FACTOR * bound:
        return True
    if x > UNEQUAL_FACTOR * bound:
        return False
    return None


def label_real(plan, fits, etas) -> dict:
    """Label every configuration's poles by head (SPEC §3), the real-field counterpart of
    :func:`exactlearn.pipeline.match.label_basis`: the same ties (across: equal c; within: c adds;
    rho multiply), but each relation is decided against *its own* first-order bound,
    ``|rho_s - rho_h rho_r| <= 10 (B_s + rho_h B_r + rho_r B_h)`` (c likewise): equal within
    10 bounds, unequal beyond 1e5, :class:`~exactlearn.errors.Undecided` between.
    Returns ``{configuration index: [pole index of head h for h]}``.
    """
    from exactlearn.fields.real import Undecided
    from exactlearn.pipeline.match import MatchError, PoleCountMismatch
    from exactlearn.pipeline.plan import across_direction
    d = plan.d
    bnd = {n: f.bounds(etas) for n, f in fits.items()}
    n00 = plan.index("basis", 0, 0)
    m = len(fits[n00].rhos)
    for n, c in enumerate(plan.configs):
        if len(fits[n].rhos) != m:
            raise PoleCountMismatch(f"pole counts differ between configurations ({m} at (x_1, e_1), "
                                    f"{len(fits[n].rhos)} at {c.kind}{(c.i + 1, c.j + 1)})")
    index: dict = {n00: list(range(m))}

    def tie(nb, no, nj, mode):
        """Pole indices in ``no`` and ``nj`` of each head labelled in ``nb``."""
        fb, fo, fj = fits[nb], fits[no], fits[nj]
        (_, Brb, Bcb), (_, Bro, Bco), (_, Brj, Bcj) = bnd[nb], bnd[no], bnd[nj]
        other_idx, joint_idx = [], []
        for h in range(m):
            p = index[nb][h]
            rh, ch, Brh, Bch = fb.rhos[p], fb.cs[p], Brb[p], Bcb[p]
            cands = []
            for r in range(m):
                for t in range(m):
                    rel = [_relation(fj.rhos[t] - rh * fo.rhos[r],
                                     Brj[t] + _LO.convert(rh) * Bro[r] + _LO.convert(fo.rhos[r]) * Brh)]
                    if mode == "add":
                        rel.append(_relation(fj.cs[t] - ch - fo.cs[r], Bcj[t] + Bch + Bco[r]))
                    else:
                        rel.append(_relation(fo.cs[r] - ch, Bco[r] + Bch))
                        rel.append(_relation(fj.cs[t] - ch, Bcj[t] + Bch))
                    if False in rel:
                        continue
                    if None in rel:
                        raise Undecided(f"matching undecided: a relation between the poles of "
                                        f"{plan.configs[nj].kind}{(plan.configs[nj].i + 1, plan.configs[nj].j + 1)} "
                                        f"and its basis configurations is neither within "
                                        f"{EQUAL_FACTOR} nor beyond {UNEQUAL_FACTOR} error bounds")
                    cands.append((r, t))
            if len(cands) != 1:
                what = "no" if not cands else "more than one"
                raise MatchError(f"head {h}: {what} consistent partner in the matching "
                                 f"configuration (products of rho"
                                 f"{' and sums' if mode == 'add' else ''} of c)")
            other_idx.append(cands[0][0])
            joint_idx.append(cands[0][1])
        if len(set(other_idx)) != m or len(set(joint_idx)) != m:
            raise MatchError("the pairing of heads across configurations is not one-to-one")
        index[no] = other_idx
        index[nj] = joint_idx

    def basis(i, j):
        return plan.index("basis", i, j)

    for i in range(d):
        if i > 0:
            j0 = across_direction(i, d)
            tie(basis(0, j0), basis(i, j0), plan.index("across", i, j0), "equal")
            if j0 != 0:
                tie(basis(i, j0), basis(i, 0), plan.index("within", i, j0), "add")
        for j in range(1, d):
            if basis(i, j) not in index:
                tie(basis(i, 0), basis(i, j), plan.index("within", i, j), "add")
            elif plan.index("within", i, j) not in index:
                raise AssertionError("unreachable: every within configuration ties one pair")
    # c_h(x, e_j) = -v_h.e_j does not depend on x: a free consistency check
    for i in range(1, d):
        for j in range(d):
            a, b = basis(i, j), basis(0, j)
            for h in range(m):
                pa, pb = index[a][h], index[b][h]
                rel = _relation(fits[a].cs[pa] - fits[b].cs[pb], bnd[a][2][pa] + bnd[b][2][pb])
                if rel is not True:
                    raise MatchError(f"head {h}: its c-value at e_{j + 1} depends on the final "
                                     f"token (beyond its error bound)")
    return index


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
