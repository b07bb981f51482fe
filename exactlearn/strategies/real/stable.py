"""The real field's one pipeline (the approximate-oracle conditions of arXiv:2608.03294;
docs: explanation/real-field.md#the-stable-plan-for-float-black-boxes,
docs: explanation/real-field.md#the-paper-plans-nodes,
docs: explanation/biases.md#over-the-real-field).

The plans are choices of nodes, decided once in :func:`run_stable`: the stable plan's
:func:`~exactlearn.strategies.real.ratio.ratio_nodes`, or ``plan="paper"``'s ``k = 0 .. 2H``
(:func:`~exactlearn.strategies.real.stable_plan.paper_nodes`, fitted in the field's precision
by :mod:`~exactlearn.strategies.real.fit`).  Every other step is the same, each in its module:
tokens and count (:mod:`~exactlearn.strategies.real.stable_plan`), scale
(:mod:`~exactlearn.strategies.real.stable_probe`), families and their rescues
(:mod:`~exactlearn.strategies.real.stable_families`, :mod:`~exactlearn.strategies.real.ratio`),
labels (:mod:`~exactlearn.strategies.real.labels`), supplementary and targeted families
(:mod:`~exactlearn.strategies.real.stable_supplement`,
:mod:`~exactlearn.strategies.real.stable_ask_more`), the families' route and the pencil start
(:mod:`~exactlearn.strategies.real.stable_routes`, :mod:`~exactlearn.strategies.real.stable_pencil`),
solve (:mod:`~exactlearn.strategies.real.stable_solve`), polish
(:mod:`~exactlearn.strategies.real.stable_polish`), noise tests and certificate
(:mod:`~exactlearn.strategies.real.stable_checks`,
:mod:`~exactlearn.strategies.real.stable_certificate`), failures' wording
(:mod:`~exactlearn.strategies.real.stable_messages`) and the run's account
(:mod:`~exactlearn.strategies.real.stable_report`).  Every query is asked once, through
:class:`~exactlearn.pipeline.ask.AskOnce`.  :func:`run_stable` runs the steps in order:
:func:`_probe_and_route`, :func:`_solve_bounds`, :func:`_polish_step` (with the targeted
families), then :func:`~exactlearn.strategies.real.stable_checks.noise_tests` and
:func:`~exactlearn.strategies.real.stable_checks.certify_estimate`.
"""
from __future__ import annotations

import numpy as np
from gmpy2 import mpq

from exactlearn.errors import (DegenerateDraw, InterpolationError, LearningFailure, MatchError,
                               NonFiniteAnswer, SingularMatrix, clip)
from exactlearn.fields.rational import QQ
from exactlearn.model import HeadSet
from exactlearn.noise import noise_bound
from exactlearn.pipeline.ask import AskOnce
from exactlearn.pipeline.plan import paper_plan
from exactlearn.progress import current
from exactlearn.strategies.real.certificate import SAFETY
from exactlearn.strategies.real import stable_ask_more as more
from exactlearn.strategies.real.lsq import box_blas_threads
from exactlearn.strategies.real.ratio import ratio_nodes
from exactlearn.strategies.real.sensitivity import LO, rounding
from exactlearn.strategies.real.stable_checks import (Estimate, certify_estimate, noise_tests,
                                                     resolution_test)
from exactlearn.strategies.real.stable_families import plan_pairs, rel_bound
from exactlearn.strategies.real.stable_messages import coarseness, declared_level
from exactlearn.strategies.real.stable_plan import (COARSE, PENCIL_MIN_HEADS,
                                                    STABLE_LINEAR_LIMIT, Noise, bias_tokens,
                                                    dyadic_basis, paper_nodes, stable_bias_plan,
                                                    stable_count)
from exactlearn.strategies.real.stable_polish import polish
from exactlearn.strategies.real.stable_probe import probe_scale
from exactlearn.strategies.real.stable_report import outcome, run_account
from exactlearn.strategies.real.stable_routes import pencil_route, probe_nodes
from exactlearn.strategies.real.stable_routes import per_family as _per_family  # tests force it


def run_stable(plan, rec, K, *, noise=None, noise_rel=None, query_scale=None, heads_exact=True,
               probe_log=None, fit_heads=None, bias=False, remeasure=None, plan_log=None,
               paper=False):
    """Probe, scale, ask, fit, label, solve and certify (module doc).  Returns
    ``(heads, certified observations, RealOutcome)``.  ``fit_heads``: fit exactly that many heads
    (at most ``plan.H``; the escalation of :func:`exactlearn.strategies.real.run`), where
    ``heads_exact`` is False.  ``bias``: the plan for biases (module doc); the heads are then a
    :class:`~exactlearn.model.HeadSet` with their u and the constant c.  ``remeasure``
    (``noise="auto"``), once sigma is chosen: ``remeasure(plan_pairs(...), sigma)`` gives eta per
    scale of the plan (``[(scale, largest token norm, eta, eta_rel)]``), which replaces the eta
    measured before the probe for every query since (``Noise.by_scale``).  ``paper``: the paper
    plan (module doc, "Plans"), decided here once and handed to every step that differs."""
    H, d = plan.H, plan.d
    eta = K(0) if noise is None else noise_bound(K, noise)
    eta_rel = K(0) if noise_rel is None else noise_bound(K, noise_rel, "noise_rel")
    nz = Noise(K, eta, eta_rel)
    if float(eta) == 0 and float(eta_rel) == 0:
        nz.eta = float(rounding(K, 1))      # an exact box: its field's rounding only
    start = len(rec.observations)
    asker = AskOnce(rec, around=box_blas_threads)     # the box keeps its BLAS threads
    nodes = paper_nodes(H) if paper else ratio_nodes(H)
    X0, E0 = dyadic_basis(plan.X), dyadic_basis(plan.E)
    plan0 = stable_bias_plan(bias_tokens(X0), E0, H) if bias else paper_plan(X0, E0, H)
    probe_log = [] if probe_log is None else probe_log
    probe_log.append(0)
    m = fit_heads if fit_heads is not None else H if heads_exact else None
    route, sigma, m, tries, n_probe, scaled = _probe_and_route(
        plan0, K, asker, nz, nodes, H, m, rec, start, probe_log, query_scale, heads_exact, bias,
        remeasure, plan_log, paper)
    if scaled is not None:              # eta on the plan's own scales: the eta at sigma reported
        eta, eta_rel = scaled[0]
    fits, index, nodes = route.fits, route.index, route.nodes or nodes  # its own
    obs = rec.observations[start:]
    n_obs = len(rec.observations)
    size = H * max(abs(float(y)) for _, y in obs)
    etas_all = nz.extend(rec, size, np.zeros(start))
    # a family whose bounds follow its scatter (_scatter_fit) may exceed STABLE_LINEAR_LIMIT at
    # the declared eta: the solve's first-order bounds then do not hold, and only the polish's can
    loose = max((rel_bound(fits[n], m) / fits[n].kappa for n in index if n in fits),
                default=0.0) > STABLE_LINEAR_LIMIT
    est = _solve_bounds(route, m, d, bias, etas_all, n_obs, loose)
    # the polish computes in float64: worth it (and its noise test meaningful) only when the
    # declared noise is above float64 rounding (an exact high-precision box keeps the solve)
    ys = np.array([abs(float(y)) for _, y in obs])
    float_noise = float(np.median(etas_all[start:] / np.maximum(8 * 2.0 ** -52 * ys, 1e-300))) >= 1
    if route.far and not float_noise:
        raise DegenerateDraw("the pencil start needs the polish, which runs in float64 only for "
                             "a declared noise above float64 rounding")
    current().stage("polish" if float_noise else "certify")
    est, polished, pol, n_target, etas_all, obs = (
        _polished_estimate(est, route, K, rec, start, etas_all, bias, (asker, nz, nodes, H), size,
                           m) if float_noise else (est, None, None, 0, etas_all, obs))
    if not est.finite():
        raise DegenerateDraw("a parameter's error bound is not finite: nothing to certify")
    est, worst_ratio, resid_ratio = certify_estimate(est.sorted(), polished, pol, route, K, rec,
                                                     start, etas_all, d, bias)
    heads, const = est.heads, est.constant
    head_b = [max([x for row in bw for x in row] + list(bv) + (list(est.Bu[h]) if bias else []))
              for h, (bw, bv) in enumerate(zip(est.BW, est.Bv))]
    resolution = None
    if not heads_exact and len(heads) < H and float_noise:
        resolution = resolution_test(HeadSet(heads, constant=const, bias=True) if bias else heads,
                                     rec, start, etas_all, H, bias)
    detail = run_account(route, est, head_b, len(obs), (worst_ratio, resid_ratio), resolution,
                         sigma=sigma, tries=tries, n_probe=n_probe, nodes=nodes, paper=paper,
                         eta=eta, eta_rel=eta_rel, d=d, H=H, bias=bias, n_target=n_target,
                         scale_etas=None if scaled is None else scaled[1])
    etas = {q: LO.convert(float(etas_all[q])) for q in range(start, len(rec.observations))}
    heads, out = outcome(est, head_b, detail, sigma, n_probe, eta, etas, bias)
    return heads, len(obs), out


def _probe_and_route(plan0, K, asker, nz, nodes, H, m, rec, start, probe_log, query_scale,
                     heads_exact, bias, remeasure=None, plan_log=None, paper=False) -> tuple:
    """Steps 2 to 4, or the pencil start (step 3b) when the families fail:
    ``(route, sigma, m, probe detail, probe queries, scaled)``; ``probe_log[-1]`` kept up to
    date; ``scaled``: None, or with ``remeasure`` (run_stable's doc) the eta and eta_rel at
    sigma and the account of eta per scale.  ``paper``: the paper plan (its probe, no lean
    nodes, no pencil start)."""
    tries, n_probe, scaled = [], None, None
    lean_ok = heads_exact and not paper
    try:
        if query_scale is None:
            current().stage("probe")
            try:
                sigma, m, tries = probe_scale(plan0, K, asker, nz, probe_nodes(
                    plan0, asker, nz, nodes, H, rec, start, lean_ok), H, m, paper=paper)
            finally:
                probe_log[-1] = len(rec.observations) - start
        else:
            sigma = mpq(query_scale) if not isinstance(query_scale, str) else QQ(query_scale)
            if m is None:
                m = H
        n_probe = len(rec.observations) - start
        if remeasure is not None:       # eta on the plan's own scales (noise="auto")
            table = remeasure(plan_pairs(plan0, sigma, tries, H), sigma)
            nz.by_scale([(n, e, r) for _, n, e, r in table])
            scaled = (next((noise_bound(K, e), noise_bound(K, r)) for s, _, e, r in table
                           if s == sigma),
                      [{"scale": str(s), "max_token_norm": f"{n:.6g}", "eta": f"{e:.6g}",
                        "eta_rel": f"{r:.6g}"} for s, n, e, r in table])
        route = _per_family(plan0, sigma, K, asker, nz, nodes, m, H, rec, start, lean_ok,
                            plan_log, paper=paper)
        if paper:                       # the paper plan's: queries = plan count + probe
            n_probe -= route.reused
    except (DegenerateDraw, InterpolationError, MatchError, SingularMatrix) as exc:
        # crowded exponents in every family (many heads for d): the pencil start (step 3b)
        if not heads_exact or H < PENCIL_MIN_HEADS or query_scale is not None or paper:
            raise
        if declared_level(nz, rec, start) > COARSE:   # its extrapolation in 1/m needs float64
            where = "" if "the declared eta " in str(exc) else coarseness(nz, rec, start)
            raise type(exc)(f"{exc}{where} (the pencil start is not tried at a declared eta "
                            f"coarser than float64: its extrapolation in 1/m from queries of "
                            f"257 to 1025 tokens cannot separate the heads at that "
                            f"precision)") from None
        n_probe = len(rec.observations) - start if n_probe is None else n_probe   # all probing
        probe_log[-1] = n_probe
        if plan_log is not None:        # the pencil asks the plan at the dense nodes
            plan_log.append(stable_count(plan0.d, H, bias))
        try:
            route = pencil_route(plan0, K, asker, nz, nodes, H, exc, bias)
        except LearningFailure as exc2:     # the box's nan twice: said once, in one line
            raise (exc if {type(exc), type(exc2)} == {NonFiniteAnswer} else type(exc)(
                f"{exc}; the pencil start failed too: {clip(exc2, 400)}")) from None
        sigma, m = route.sigma, H
    probe_log[-1] = n_probe
    return route, sigma, m, tries, n_probe, scaled


def _solve_bounds(route, m, d, bias, etas_all, n_obs, loose) -> Estimate:
    """The route's heads and their bounds, ``SAFETY`` times first order plus rounding
    (infinite where only the polish can bound: the pencil route, or ``loose`` families)."""
    heads, Bu, Bc, const = route.heads, None, 0.0, None
    if route.SW is None or loose:    # the pencil route: only the polish gives bounds
        BW = [[[float("inf")] * d for _ in range(d)] for _ in range(m)]
        Bv = [[float("inf")] * d for _ in range(m)]
        if bias:
            Bu, Bc, const = [[float("inf")] * d for _ in range(m)], float("inf"), route.constant
            heads = HeadSet(heads, constant=const, bias=True)
        return Estimate(heads, BW, Bv, Bu, Bc, const)
    SW, Sv, rounds = route.SW, route.Sv, route.rounds
    dc = d + 1 if bias else d           # with biases, [W | u]'s rows: d entries of W, then u[r]
    bw, bv = [S.bounds(etas_all) for S in SW], [S.bounds(etas_all) for S in Sv]  # |S| eta
    BW = [[[SAFETY * float(bw[h][r * dc + q]) + rounds[h][0] for q in range(dc)]
           for r in range(d)] for h in range(m)]
    Bv = [[SAFETY * float(bv[h][r]) + rounds[h][1] for r in range(d)] for h in range(m)]
    if bias:
        Bu = [[row[d] for row in bw] for bw in BW]
        BW = [[row[:d] for row in bw] for bw in BW]
        const = route.constant
        Bc = SAFETY * float(np.abs(route.Sc[:n_obs]) @ etas_all) + route.c_round
        heads = HeadSet(heads, constant=const, bias=True)
    return Estimate(heads, BW, Bv, Bu, Bc, const)


def _polished_estimate(est, route, K, rec, start, etas_all, bias, ask, size, m) -> tuple:
    """The polish (:func:`_polish_step`) of the solve's estimate ``est``, its noise tests, and
    the estimate to certify: the polish's when its bounds are smaller (always from the pencil
    start).  Returns ``(estimate, polished or None, the polish's estimate or None, targeted
    families, etas, observations)``."""
    polished, n_target, etas_all, obs = _polish_step(est.heads, K, rec, start, etas_all, route,
                                                     bias, ask, size)
    if route.far and polished is None:
        raise DegenerateDraw(f"the pencil start ({clip(route.pencil['why'], 80)}) did not "
                             f"converge to a well-determined fit of all {len(obs)} observations")
    pol = None
    if polished is not None:
        noise_tests(polished, route.far, m, len(obs), rec, start, etas_all)
        pol = _polished_bounds(polished, route.splan.d, bias)
        if route.far or pol.largest() < est.largest():
            est = pol
    return est, polished, pol, n_target, etas_all, obs


def _polish_step(heads, K, rec, start, etas_all, route, bias, ask, size) -> tuple:
    """The polish of every observation, and when it finds directions few observations see,
    targeted families (``ask = (asker, nz, nodes, H)``) and the polish again:
    ``(polished or None, targeted families, etas, observations)``."""
    lm_from = route.plan_start
    # defer: named weak directions are asked for before the first fit, which runs only if the
    # next fails (unlike before, also where that fit would fail: float-black-box.md, Five more)
    polished = polish(heads, K, rec, start, etas_all, far=lm_from, bias=bias, defer=not route.far)
    n_target = 0
    # the lean plan's families below stop at the query budget (a coarse box's, a head bound's
    # and the pencil start's need theirs: the float32 grid erred up to 2.1e-4 within it), and
    # so do they where the plan alone exceeds it (H = 1, H > d: up to 126x the error without)
    limit = more.budget_limit(route, start, len(rec.observations), bias, ask[3])
    weak = polished.weak
    if weak is not None and weak.directions:   # directions few observations see: ask for them
        n_target = more.target_families(weak, route.splan, heads, *ask, limit=limit)
        if n_target:
            etas_all = ask[1].extend(rec, size, etas_all)
            # from the solve's heads again, not the polished (at float64's floor: polish's doc)
            again = polish(polished.heads if route.far and polished.solved else heads, K, rec,
                           start, etas_all, far=lm_from, bias=bias, named=False)
            if again.solved:
                polished = again
    if polished.resume is not None:     # deferred, and still wanted: fitted now
        polished = polished.resume()
    if not route.far and polished.solved:   # every route but the pencil start's
        polished, n_more, etas_all = _ask_more(polished, heads, K, rec, start, etas_all, route,
                                               bias, ask, size, limit)
        n_target += n_more
    return (polished if polished.solved else None), n_target, etas_all, rec.observations[start:]


def _ask_more(polished, heads, K, rec, start, etas_all, route, bias, ask, size, limit) -> tuple:
    """Up to ``POLISH_ROUNDS`` rounds: the families the polish's covariance asks for
    (:mod:`~exactlearn.strategies.real.stable_ask_more`), each round judged by the bounds at the
    polished heads with the new observations (``iterate=False``: no step), then the polish again
    from the polished heads (``warm``: at their cost floor no step may lower the cost):
    ``(polished, families asked, etas)``."""
    tried: set = set()
    asked = 0
    now = polished
    for r in range(more.POLISH_ROUNDS):
        weak, now = more.weak_families(now), None   # its A^-1 (143 MB at 32 x 4) goes now
        n = (more.ask_families_again(weak, route.splan, polished.heads, *ask, tried, limit)
             if weak else 0)
        if not n:
            break
        asked += n
        etas_all = ask[1].extend(rec, size, etas_all)
        if r + 1 == more.POLISH_ROUNDS:
            break                       # no round left to read its bounds: the warm polish next
        now = polish(polished.heads, K, rec, start, etas_all, bias=bias, iterate=False)
        if not now.solved:
            break
    if asked:
        again = polish(polished.heads, K, rec, start, etas_all, bias=bias, warm=True, named=False)
        if again.solved:
            polished = again
    return polished, asked, etas_all


def _polished_bounds(polished, d, bias) -> Estimate:
    """The polish's heads and bounds, ``SAFETY`` times first order plus rounding."""
    pheads, (fW, rW), (fV, rV) = polished.heads, polished.W_bounds, polished.v_bounds
    pBW = (SAFETY * fW + rW).tolist()
    pBv = (SAFETY * fV + rV).tolist()
    pBu, pBc = None, 0.0
    if bias:                        # [W | u] bounds: split; the constant's
        pBu = [[row[d] for row in bw] for bw in pBW]
        pBW = [[row[:d] for row in bw] for bw in pBW]
        pBc = SAFETY * polished.constant_bound[0] + polished.constant_bound[1]
    return Estimate(pheads, pBW, pBv, pBu, pBc,
                    getattr(pheads, "constant", None) if bias else None, "polish")
