"""The analysis of the paper's plan over the real field: fits, V, the noise checks, labelling
(docs: explanation/real-field.md; the paper's
approximate-oracle conditions, arXiv:2608.03294).

The steps of the exact analysis (:mod:`exactlearn.pipeline.analysis`), each with its
first-order error bounds (:mod:`~exactlearn.strategies.real.sensitivity`):

* **Fits** of every family (:func:`~exactlearn.strategies.real.fit.fit_family_with_sensitivities`);
  the group of x_1 shares the k = 0 query.
* **V** from the group of x_1: ``V = E^-T s``, ``s_j = -sum_h c_h(x_1, e_j)``; a
  configuration outside the group takes ``y_0 = V.x`` with ``S = sum_r x_r S_V_r``.
* **Noise consistency** (docs: explanation/algorithm.md#what-a-failure-means: a box noisier than the
  declared eta is not certified).  The limit ``A = V.a`` of every configuration is an
  overdetermined relation (V comes from the group of x_1); its residual beyond
  ``NOISE_FACTOR`` first-order bounds fails the run
  (:func:`~exactlearn.strategies.real.sensitivity.check_noise`), as does that of a
  least-squares family fit.  An additive constant or any box outside the class can do
  the same; both are failures.
* **First-order validity**: the learner fails (an explicit degenerate-draw error) when
  any relative first-order bound of a ``rho`` or ``c`` exceeds ``PAPER_LINEAR_LIMIT = 1e-3``.
* **Labelling** (:func:`label_real`): the one traversal of
  :func:`exactlearn.pipeline.match.label_heads`, every relation decided against its own
  first-order bound.
* **Solve** (:mod:`~exactlearn.strategies.real.solve`) and **certificate**
  (:mod:`~exactlearn.strategies.real.certificate`).
"""

from __future__ import annotations

from exactlearn.algebra import linalg
from exactlearn.errors import DegenerateDraw
from exactlearn.fields.rational import QQ
from exactlearn.pipeline.match import WithinBounds, check_pole_counts, label_heads
from exactlearn.strategies.real.certificate import RealOutcome, certify_within_tolerance
from exactlearn.strategies.real.fit import fit_family_with_sensitivities
from exactlearn.strategies.real.sensitivity import LO, Sens, check_noise, combine, rounding
from exactlearn.strategies.real.solve import solve_heads

#: the paper plan's first-order validity: a relative bound at most this (a float, compared
#: with low-precision bounds); the stable plan, for float boxes, allows
#: :data:`~exactlearn.strategies.real.stable_plan.STABLE_LINEAR_LIMIT` (1e-2)
PAPER_LINEAR_LIMIT = 1e-3
EQUAL_FACTOR = 10        # matching, both plans: equal within 10 first-order bounds ...
#: ... the paper plan: unequal beyond 1e5 of them, undecided (a failure) between (the stable
#: plan: :data:`~exactlearn.strategies.real.stable_plan.STABLE_UNEQUAL_FACTOR`, 1e2)
PAPER_UNEQUAL_FACTOR = 10 ** 5


def label_real(plan, fits, etas) -> dict:
    """Label every configuration's poles by head: the traversal of
    :func:`exactlearn.pipeline.match.label_heads` (the same ties as over an exact field:
    across, equal c; within, c adds; rho multiply), but each relation is decided against
    *its own* first-order bound, ``|rho_s - rho_h rho_r| <= 10 (B_s + rho_h B_r + rho_r B_h)``
    (c likewise): equal within 10 bounds, unequal beyond 1e5,
    :class:`~exactlearn.errors.Undecided` between.
    Returns ``{configuration index: [pole index of head h for h]}``.
    """
    poles_of = {}
    for n, f in fits.items():
        _, brho, bc = f.bounds(etas)
        poles_of[n] = list(zip(f.rhos, f.cs, brho, bc))
    check_pole_counts(plan, poles_of)
    relation = WithinBounds(EQUAL_FACTOR, PAPER_UNEQUAL_FACTOR, size=LO.convert)
    return label_heads(plan, poles_of.__getitem__, relation).index


def analyse_real(plan, y_shared, q_shared, values, K, S, etas, eta, obs, start,
                 fit_heads=None) -> tuple:
    """Fit, check, label, solve and certify the scaled plan's answers (module doc).
    ``fit_heads``: fit exactly that many heads in every family (the head-count escalation).

    ``values[n]`` are configuration n's ``(y, observation index)`` at k = 1..2H,
    ``S`` the run's sensitivity context.  Returns ``(heads, certified observations,
    RealOutcome)``."""
    ctx = K.ctx
    H = plan.H
    fits, dot_V = _fit_families(plan, y_shared, q_shared, values, K, S, etas, fit_heads)
    _check_limits(plan, fits, dot_V, K, etas)
    worst_rel = _first_order(fits, etas)
    index = label_real(plan, fits, etas)
    # every configuration measures its e^T W_h x (log rho) and -v_h.e (c) linearly:
    # weighted least squares over all 2d^2 - 1 of them (exact data: W = E^-T M X^-1)
    raw = solve_heads(plan, fits, index, K, S, etas)
    cert = certify_within_tolerance(raw, obs, start, K, etas, eta, H)
    detail = {
        "certificate": "within tolerance (noise + propagated parameter uncertainty); not exact",
        "certified_observations": len(obs),
        "max_residual_over_tolerance": LO.nstr(cert.worst_ratio, 3),
        "max_residual_over_noise_allowance": (None if cert.residual_ratio is None
                                              else LO.nstr(cert.residual_ratio, 3)),
        "eta": LO.nstr(LO.convert(eta), 6),
        "rounding_per_output": LO.nstr(rounding(K, cert.rounding_size), 3),
        "head_error_bounds": [LO.nstr(b, 3) for b in cert.head_bounds],
        "matching": f"per relation: equal within {EQUAL_FACTOR}, unequal beyond "
                    f"{PAPER_UNEQUAL_FACTOR} first-order bounds",
        "max_relative_pole_error_bound": LO.nstr(worst_rel, 3),
        "max_abs_exponent": ctx.nstr(max((abs(ctx.log(r)) for f in fits.values() for r in f.rhos),
                                         default=0), 4),
    }
    out = RealOutcome(sigma=None, probe_queries=0, error_bound=cert.error_bound,
                      head_bounds=cert.head_bounds, eta=eta, detail=detail,
                      W_bounds=cert.W_bounds, v_bounds=cert.v_bounds, etas=cert.etas)
    return cert.heads, len(obs), out


def _fit_families(plan, y_shared, q_shared, values, K, S, etas, fit_heads) -> tuple:
    """Every family fitted with its sensitivities (module doc): the group of x_1 first (it
    shares the k = 0 query), V from it, then the rest with ``y_0 = V.x``.  Returns
    ``(fits, dot_V)``, ``dot_V(x)`` the value ``V.x`` and its sensitivity."""
    ctx = K.ctx
    d, H = plan.d, plan.H
    configs = plan.configs
    fits: dict = {}
    for n, c in enumerate(configs):
        if c.shares_k0:
            ys = [y_shared] + [y for y, _ in values[n]]
            ss = [Sens.unit(S, q_shared)] + [Sens.unit(S, q) for _, q in values[n]]
            fits[n] = fit_family_with_sensitivities(K, H, ys, ss, etas, exact_poles=fit_heads)
    # V from the group of x_1: E^T V = (V.e_j)_j, V.e_j = -sum_h c_h(x_1, e_j)
    Etinv_q = linalg.inverse([[QQ(plan.E[j][r]) for r in range(d)] for j in range(d)], QQ)
    s_val, s_sens = [], []
    for j in range(d):
        f = fits[plan.index("basis", 0, j)]
        s_val.append(-ctx.fsum(f.cs))
        s_sens.append(combine(S, ((-1, s) for s in f.sc)))
    V = [ctx.fsum(K(Etinv_q[r][j]) * s_val[j] for j in range(d)) for r in range(d)]
    V_sens = [combine(S, ((Etinv_q[r][j], s_sens[j]) for j in range(d))) for r in range(d)]

    m_shared = len(fits[plan.index("basis", 0, 0)].rhos)

    def dot_V(x):
        return (ctx.fsum(V[r] * K(x[r]) for r in range(d)),
                combine(S, ((x[r], V_sens[r]) for r in range(d))))

    for n, c in enumerate(configs):
        if n not in fits:
            y0, s0 = dot_V(c.x)
            ys = [y0] + [y for y, _ in values[n]]
            ss = [s0] + [Sens.unit(S, q) for _, q in values[n]]
            fits[n] = fit_family_with_sensitivities(K, H, ys, ss, etas, computed0=True, m=m_shared,
                                                    exact_poles=fit_heads)
    return fits, dot_V


def _check_limits(plan, fits, dot_V, K, etas):
    """Every family's limit is V.a (an overdetermined relation: V comes from the group of
    x_1): :func:`~exactlearn.strategies.real.sensitivity.check_noise` on each."""
    for n, c in enumerate(plan.configs):
        f = fits[n]
        va, sva = dot_V(c.a)
        check_noise(f.A - va, f.sA.add(sva, -1).bound(etas), rounding(K, 64 * (abs(f.A) + abs(va))),
                    f"configuration {c.kind}{(c.i + 1, c.j + 1)}: the limit of f(q_k) misses V.a "
                    f"(an additive constant or bias would do the same)")


def _first_order(fits, etas):
    """The largest relative first-order bound of a ``rho`` or ``c``; beyond
    ``PAPER_LINEAR_LIMIT`` the draw fails (first-order bounds would not be reliable)."""
    worst_rel = LO.zero
    for n, f in fits.items():
        _, brho, bc = f.bounds(etas)
        for r, b in zip(f.rhos, brho):
            worst_rel = max(worst_rel, b / LO.convert(r))
        for c, b in zip(f.cs, bc):
            worst_rel = max(worst_rel, b / LO.convert(abs(c)))
    if worst_rel > LO.mpf(PAPER_LINEAR_LIMIT):
        raise DegenerateDraw(f"the output error is too large for this draw: a pole or coefficient "
                             f"has relative first-order error bound {LO.nstr(worst_rel, 3)} > "
                             f"{PAPER_LINEAR_LIMIT} (first-order error bounds would not be "
                             f"reliable)")
    return worst_rel
