"""The stable plan's families and their rescues (:mod:`~exactlearn.strategies.real.stable`,
step 3; docs/explanation/real-field.md): every configuration asked and fitted
(:func:`fit_all`), one configuration at the first scale whose fit resolves
(:func:`resolve_family`: rescued at 1/2 or 2, taken back to scale 1), a coarse family's
bounds at the scatter its residuals show (:func:`_scatter_fit`, "Coarse boxes"), and a fit's
poles for the labelling (:func:`family_poles`).
"""
from __future__ import annotations

import math

import numpy as np
from gmpy2 import mpq

from exactlearn.errors import (DegenerateDraw, InterpolationError, LearningFailure,
                               NoisierThanDeclared)
from exactlearn.strategies.real.ratio import (COARSE_EVALUATIONS, LSQ_EVALUATIONS, PATIENCE,
                                              family_tokens, fit_ratio_family, node_t)
from exactlearn.strategies.real.stable_plan import (COARSE, COARSE_LINEAR_LIMIT,
                                                    COARSE_MAX_UNRESOLVED, STABLE_LINEAR_LIMIT,
                                                    MAX_UNRESOLVED, SCATTER_MARGIN, SCATTER_MIN,
                                                    scaled_plan)
from exactlearn.strategies.real.stable_probe import ask_family


#: a family that fails is re-asked scaled by these (exact dyadic tokens), on every route.
#: ``python benchmarks/bench_stable_mechanisms.py --trace-rescues --rescue-scales 1/2 2 1/4 4
#: -- --grid --seeds 6`` at cc5852c: no family resolved at 1/4 or 4 (1,085 at 1/2 or 2; 438
#: failed at every scale, asked five times each); helper-106's count on the grid, 2,065
#: re-asks: 313 resolved at 1/2, 290 at 2, none at 1/4 or 4.  Without them: the measurement
#: in docs/howto/float-black-box.md, "Fewer queries" (the grid, float32, H > d)
RESCUE = (mpq(1, 2), mpq(2))
#: the scales around sigma where ``noise="auto"`` measures eta (:func:`plan_pairs`): the rescues'
#: and 1/4, 4, where the polish's targeted families often ask
#: (:func:`~exactlearn.strategies.real.stable_ask_more.target_families`)
MEASURED = (mpq(1), mpq(1, 2), mpq(2), mpq(1, 4), mpq(4))
#: a box declared within this factor below COARSE fits every family even once its route has
#: failed (:func:`fit_all`): helper-98 found a float32 box declared at eta 8e-10 whose stop
#: left out enough observations to move the declared level (declared_level) from 2.5e-10 to
#: 1.9e-10, below COARSE, and the failure lost its verdict ("the box's rounding likely exceeds
#: the declared eta")
NEAR_COARSE = 64


def rel_bound(fit, m):
    bl, bc = fit.bounds[1:m + 1], fit.bounds[m + 1:]
    return max([float(b) for b in bl] + [float(b) / max(abs(float(c)), 1e-300)
                                         for b, c in zip(bc, fit.cs)])


def _normalised(fit, f, m, bias=False):
    """A fit of the family (f x, f e) expressed at scale 1: c / f, and without biases
    log rho / f^2 and A / f (with biases those are not homogeneous in f and stay as asked:
    module doc)."""
    F = float(f)
    scale = np.concatenate([[1.0 if bias else 1 / F], np.full(m, 1.0 if bias else 1 / F ** 2),
                            np.full(m, 1 / F)])
    if not bias:
        fit.A = fit.A / f
        fit.logs = [x / f ** 2 for x in fit.logs]
    fit.cs = [c / f for c in fit.cs]
    fit.G = fit.G * scale[:, None]
    fit.bounds = fit.bounds * scale
    return fit


def fit_all(plan, K, asker, noise, nodes, m, H, paper=False, got=None):
    """Ask and fit every configuration: ``(fits, ids, rescued, bad, stopped)``; ``ids[n]`` are the
    observation indices of the fit.  A configuration whose fit fails, or whose first-order
    relative bound exceeds STABLE_LINEAR_LIMIT (poles crowded or beyond the nodes), is asked again
    with x and e scaled by RESCUE, 1/2 then 2 (exact dyadic tokens) and its fit taken back to
    scale 1 (``log rho`` scales by f^2, ``c`` by f); every query asked stays an observation
    that the certificate must reproduce.  The fitting stops once more than ``share`` of the
    configurations have failed, the route's failure then certain (``stopped``: how many were
    tried; None when all were); ``share``: the share of unresolved configurations that fails
    the route (MAX_UNRESOLVED, or COARSE_MAX_UNRESOLVED for a coarse box; a float64 box too,
    unless its declared eta lies within NEAR_COARSE below COARSE; "Failing fast" of
    docs: explanation/real-field.md#the-stable-plan-for-float-black-boxes).
    ``paper``: the paper plan's nodes (:func:`resolve_family`); ``got``: the answers of the
    plan's queries at ``nodes``, in order, when the caller asked them (None: asked here)."""
    if got is None:
        got = asker.ask([q for c in plan.configs for q in
                         (family_tokens(c.x, c.a, k, mm) for k, mm in nodes)])  # one batch
    ys = [abs(float(y)) for y, _ in got if float(y) != 0]
    level = float(np.median([noise.of(y, 0) / y for y in ys])) if ys else 0.0
    coarse = level > COARSE
    share = COARSE_MAX_UNRESOLVED if coarse else MAX_UNRESOLVED
    # near COARSE the failure's verdict and the pencil's go-ahead (declared_level, over every
    # observation) could flip with the observations a stop leaves out: fit on there
    stops = coarse or level <= COARSE / NEAR_COARSE
    fits, ids, rescued, bad = {}, {}, {}, {}
    per = len(nodes)
    for n, c in enumerate(plan.configs):
        try:
            fits[n], ids[n], f = resolve_family(c, K, asker, noise, nodes, m, H,
                                                scales=(mpq(1),) + RESCUE,
                                                bias=plan.bias, asked=got[n * per:(n + 1) * per],
                                                paper=paper)
        except LearningFailure as exc:
            bad[n] = exc
            last = n + 1 == len(plan.configs)
            if stops and len(bad) > share * len(plan.configs) and not last:
                return fits, ids, rescued, bad, n + 1, share
            continue
        if f != 1:
            rescued[n] = str(f)
    return fits, ids, rescued, bad, None, share


def resolve_family(c, K, asker, noise, nodes, m, H, scales=(mpq(1),) + RESCUE, bias=False,
                   asked=None, paper=False):
    """``(fit at scale 1, observation indices, scale asked)`` of one configuration, at the
    first of ``scales`` (1 and RESCUE: 1, 1/2, 2) whose fit succeeds within STABLE_LINEAR_LIMIT
    (COARSE_LINEAR_LIMIT for a coarse box, its bounds following its scatter:
    :func:`_scatter_fit`); raises the first failure when none does.  With ``bias`` only the
    c-values go back to scale 1 (:func:`_normalised`).  ``asked``: the answers at scale 1,
    already asked (:func:`fit_all`'s first batch), taken as they are
    (:func:`~exactlearn.strategies.real.stable_probe.ask_family`).  ``paper``: the paper plan's
    nodes, fitted in the field's precision (``fit_ratio_family``'s ``paper``)."""
    ts = [node_t(k, mm) for k, mm in nodes]
    what = f"configuration {c.kind}{(c.i + 1, c.j + 1)}"
    first = None
    for f in scales:
        ys, etas, ids = ask_family(c, f, asker, noise, nodes, H, asked if f == 1 else None)
        label = what if f == 1 else f"{what} at scale {f}"
        coarse = _coarse(ys, etas)
        try:
            fit = fit_ratio_family(K, ts, ys, etas, m, what=label,
                                   evaluations=COARSE_EVALUATIONS if coarse else LSQ_EVALUATIONS,
                                   patience=None if coarse else PATIENCE, paper=paper)
        except (InterpolationError, NoisierThanDeclared, DegenerateDraw) as exc:
            first = first or exc
            continue
        except (np.linalg.LinAlgError, ValueError) as exc:
            first = first or InterpolationError(f"{what}: {exc}")
            continue
        kappa = _scatter(ts, ys, etas, m, fit) if coarse else 1.0
        fit = fit if f == 1 else _normalised(fit, f, m, bias)
        if kappa < 1 and rel_bound(fit, m) > STABLE_LINEAR_LIMIT:
            tight = _scatter_fit(K, ts, ys, etas, m, kappa, label, paper)
            if tight is not None:
                fit = tight if f == 1 else _normalised(tight, f, m, bias)
        limit = COARSE_LINEAR_LIMIT if coarse else STABLE_LINEAR_LIMIT
        if rel_bound(fit, m) > limit:
            first = first or DegenerateDraw(
                f"{what}: relative first-order error bound {rel_bound(fit, m):.3g} > "
                f"{limit} (two heads' exponents crowd, or lie beyond the nodes"
                f"{_precision_note(fit, m) if coarse else ''})")
            continue
        return fit, ids, f
    raise first



def _coarse(ys, etas) -> bool:
    """A family of a box declared coarser than float64 (COARSE): its median eta_q above
    ``COARSE`` times its largest |y| (float32, or noisier; a float64 box declares ~1e-15)."""
    return float(np.median(etas)) > COARSE * max(abs(float(y)) for y in ys)


def _scatter(ts, ys, etas, m, fit) -> float:
    """``kappa``: SCATTER_MARGIN times the rms weighted residual of ``fit`` per degree of
    freedom, at least SCATTER_MIN; 1 when that is not below 1 (or too few samples)."""
    n, p = len(ts), 2 * m + 1
    if n <= p:
        return 1.0
    t = [np.inf if x is None else float(x) for x in ts]
    with np.errstate(all="ignore"):
        rho = np.exp(np.array([float(x) for x in fit.logs]))
        cs = np.array([float(c) for c in fit.cs])
        f = float(fit.A) + np.array([0.0 if x == np.inf else float(np.sum(cs / (1 + x * rho)))
                                     for x in t])
        r = (np.array([float(y) for y in ys]) - f) / np.asarray(etas, dtype=float)
        kappa = SCATTER_MARGIN * math.sqrt(float(r @ r) / (n - p))
    return max(kappa, SCATTER_MIN) if kappa < 1 else 1.0


def _scatter_fit(K, ts, ys, etas, m, kappa, what, paper=False):
    """The family refitted with its bounds scaled to the scatter its residuals show
    (``kappa eta_q``, :func:`_scatter`), or None (docs: explanation/real-field.md, "Coarse
    boxes").  The weights, hence the estimate, are those of the
    declared eta; only its bounds shrink by ``kappa``.  The fit keeps ``kappa``
    (``RatioFit.kappa``): its bounds at the declared eta are ``1 / kappa`` times larger, and
    the solve's bounds are certified only when those are within STABLE_LINEAR_LIMIT too (else only
    the polish of every observation, at the declared eta, can certify).  ``paper``: the paper
    plan's nodes, refitted in the field's precision as first fitted (:func:`resolve_family`)."""
    try:
        out = fit_ratio_family(K, ts, ys, [kappa * e for e in etas], m, what=what,
                               evaluations=COARSE_EVALUATIONS, patience=None, paper=paper)
    except (InterpolationError, NoisierThanDeclared, DegenerateDraw, np.linalg.LinAlgError,
            ValueError):
        return None
    out.kappa = kappa
    return out



def _precision_note(fit, m) -> str:
    """A coarse family's bound at the scatter its residuals show (``kappa``)."""
    if fit.kappa == 1:
        return ""
    return (f"; the bound is at {fit.kappa:.2g} times the declared eta, the scatter its "
            f"residuals show")



def family_poles(K, fit, m):
    """``(rho, c, bound of rho, bound of c)`` per pole (the matching's poles)."""
    bl, bc = fit.bounds[1:m + 1], fit.bounds[m + 1:]
    return [(K.ctx.exp(x), c, float(b) * float(K.ctx.exp(x)), float(b2))
            for x, c, b, b2 in zip(fit.logs, fit.cs, bl, bc)]


def plan_pairs(plan0, sigma, tries, H) -> dict:
    """The stable plan's own tokens at every scale it asks, for measuring eta there
    (``noise="auto"``; docs/explanation/real-field.md#eta-measured-from-the-box):
    ``{scale: [(x, e) of every configuration]}``, the probe's unit plan at each probe scale
    tried, and the plan at ``sigma`` times MEASURED, 1, 1/2, 2, 1/4, 4 (exact scales:
    every token stays dyadic)."""
    pairs: dict = {}

    def add(p, f, base):                # p's configurations (at scale base) times f
        pairs.setdefault(base * f, []).extend(
            (tuple(f * a for a in c.x), tuple(f * b for b in c.e)) for c in p.configs)

    for t in tries:
        add(plan0, mpq(t["scale"]), mpq(1))
    splan = scaled_plan(plan0, sigma, H)
    for f in MEASURED:
        add(splan, f, sigma)
    return pairs
