"""The stable plan's two routes to a start (:mod:`~exactlearn.strategies.real.stable`;
docs/explanation/real-field.md): the families fitted, labelled, supplemented and solved
(:func:`per_family`, steps 3--5: at the lean nodes of
:func:`~exactlearn.strategies.real.ratio.ratio_nodes` when the probe's outputs show a box
declared at float64 rounding), or, when they fail with several heads, the pencil start
(:func:`pencil_route`, step 3b).  Each returns a :class:`Route` that
:func:`~exactlearn.strategies.real.stable.run_stable` bounds, polishes and certifies.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from gmpy2 import mpq

from exactlearn.errors import DegenerateDraw, LearningFailure, ResidualsBeyondNoise, clip
from exactlearn.model import Head
from exactlearn.pipeline.match import WithinBounds
from exactlearn.progress import current
from exactlearn.strategies.real.labels import label_families
from exactlearn.strategies.real.ratio import family_tokens, ratio_nodes
from exactlearn.strategies.real.stable_families import (family_poles, fit_all, rel_bound,
                                                        resolve_family)
from exactlearn.strategies.real.stable_messages import declared_level, precision_failure
from exactlearn.strategies.real.stable_pencil import pencil_heads
from exactlearn.strategies.real.stable_plan import (COARSE, EQUAL_FACTOR, PENCIL_SCALES,
                                                    ROOTS_TRIED, STABLE_UNEQUAL_FACTOR,
                                                    scaled_plan, stable_count)
from exactlearn.strategies.real.stable_probe import ask_family, sigma_for
from exactlearn.strategies.real.sensitivity import LO, check_noise, rounding
from exactlearn.strategies.real.stable_solve import (bias_frame, rows_bias, rows_of,
                                                     solve_bias_heads, solve_stable_heads,
                                                     wls_sparse)
from exactlearn.strategies.real.stable_supplement import supplement



@dataclass
class Route:
    """What steps 3--5 hand to the polish and the certificate: the scaled plan ``splan``, the
    solve's ``heads`` and their sensitivities ``SW``, ``Sv`` (None from the pencil start) with
    the refinement ``rounds``; the families' ``fits``, the unresolved configurations (``bad``:
    their failures), the ``rescued`` ones (their scales), the labels ``index``, how many
    ``supplementary`` families were asked and the largest relative pole bound ``worst_rel``;
    the ratio ``nodes`` asked (None: the dense ones); with biases the ``constant``, its
    sensitivities ``Sc`` and rounding ``c_round``; from the pencil start (:func:`pencil_route`)
    its ``sigma``, its account ``pencil`` and the first observation of the plan's families
    (``plan_start``); ``lean``: the lean nodes were asked (a box declared at float64
    rounding, the heads given), so the polish's families keep to the query budget
    (:func:`~exactlearn.strategies.real.stable_ask_more.query_budget`); ``reused``: the plan's
    queries the probe had asked (at ``sigma`` = its scale, the paper plan's probe families
    are its own basis families)."""

    splan: object
    heads: list
    SW: object
    Sv: object
    rounds: object
    fits: dict
    bad: dict
    rescued: dict
    index: dict
    supplementary: int
    worst_rel: float
    nodes: list | None = None
    constant: object = None
    Sc: object = None
    c_round: float = 0.0
    sigma: object = None
    pencil: dict | None = None
    plan_start: int | None = None
    lean: bool = False
    reused: int = 0

    @property
    def far(self) -> bool:
        """From the pencil start: the heads are only a start, the polish must converge."""
        return self.pencil is not None


def per_family(plan0, sigma, K, asker, nz, nodes, m, H, rec, start, lean_ok=True,
               plan_log=None, paper=False):
    """Steps 3--5 up to the solve (module doc): the plan at scale ``sigma`` asked in one batch
    (``Route.reused``: how many of its queries the probe had asked), its families fitted,
    labelled, supplemented and solved.  Raises when too many families do not resolve.
    ``lean_ok``: the lean nodes may be used (not with a head bound, whose resolution test
    needs the observations of ``nodes``, nor on the paper plan's nodes).  ``plan_log``: a list
    that gets the plan's own count at the nodes chosen, before any family is asked (a failed
    run's ``plan_queries``).  ``paper``: ``nodes`` are the paper plan's (its families
    interpolate): their limits are tested together
    (:func:`limits_test`), and families that fail with fewer heads than the
    bound (``m < H``) fail the route as :class:`~exactlearn.errors.ResidualsBeyondNoise`, so
    that the learner fits more heads (:func:`exactlearn.strategies.real.run`)."""
    d = plan0.d
    bias = plan0.bias
    splan = scaled_plan(plan0, sigma, H)
    lean = lean_ok and len(rec.observations) > start and declared_level(nz, rec, start) <= COARSE
    if lean:                            # the probe's outputs show a box at float64 rounding
        nodes = ratio_nodes(H, lean=True)
    planned = stable_count(d, H, bias, nodes=nodes)
    if plan_log is not None:
        plan_log.append(planned)
    current().phase("ask", planned)     # progress=: the families
    probed = len(rec.observations)      # the probe's observations end here
    got = asker.ask([family_tokens(c.x, c.a, k, mm) for c in splan.configs for k, mm in nodes])
    reused = len({q for _, q in got if q < probed})
    fits, ids, rescued, bad, stopped, share = fit_all(splan, K, asker, nz, nodes, m, H, paper,
                                                      got)
    if len(bad) > share * len(splan.configs) or not fits:
        raise _unresolved(bad, stopped, share, len(splan.configs), nz, rec, start, H,
                          m if paper and m < H else None)
    checks = 0                          # families asked by the scale test
    if paper:                           # no family has a residual of its own: their limits
        size = H * max(abs(float(y)) for _, y in rec.observations[start:])
        limits_test(splan.configs, fits, ids, K, nz.extend(rec, size, np.zeros(start)), m)
        if d == 1:                      # and one limit to spare: the family at another scale
            checks = scale_test(splan.configs[0], fits[0], K, asker, nz, nodes, m, H)
    # first-order validity, then labelling with per-relation bounds
    worst_rel = max((rel_bound(f, m) / f.kappa for f in fits.values()), default=0.0)   # at eta
    poles_of = {n: family_poles(K, f, m) for n, f in fits.items()}
    relation = WithinBounds(EQUAL_FACTOR, STABLE_UNEQUAL_FACTOR, size=float)
    loose = declared_level(nz, rec, start) > COARSE   # a coarse box: c-values by equality alone
    index = _labelled(splan, fits, poles_of, bad, rescued, relation, loose, m)
    configs = list(splan.configs)
    if not bias:
        rows = [rows_of(c) for c in configs]
        n_supp = checks + supplement(splan, configs, rows, fits, ids, index, poles_of, K, asker,
                                     nz, nodes, m, H, relation, equal_only=loose, paper=paper)
        heads, SW, Sv, rounds = solve_stable_heads(splan, rows, fits, ids, index, K, m,
                                                   len(rec.observations))
        return Route(splan, heads, SW, Sv, rounds, fits, bad, rescued, index, n_supp, worst_rel,
                     nodes=nodes, lean=lean, reused=reused)
    frame = bias_frame(splan.X, splan.E)
    scales = {n: mpq(rescued[n]) if n in rescued else mpq(1) for n in range(len(configs))}
    rows = [rows_bias(frame, tuple(scales[n] * a for a in c.x), tuple(scales[n] * b for b in c.e),
                      scales[n], K) for n, c in enumerate(configs)]
    n_supp = supplement(splan, configs, rows, fits, ids, index, poles_of, K, asker, nz, nodes,
                         m, H, relation, frame=frame, scales=scales, equal_only=loose,
                         paper=paper)
    tokens_a = {n: tuple(scales[n] * a for a in configs[n].a) for n in index}
    heads, c, SW, Sv, Sc, rounds, c_round = solve_bias_heads(
        splan, frame, rows, fits, ids, index, K, m, len(rec.observations), scales, tokens_a)
    return Route(splan, heads, SW, Sv, rounds, fits, bad, rescued, index, n_supp, worst_rel,
                 nodes=nodes, constant=c, Sc=Sc, c_round=c_round, lean=lean, reused=reused)


def limits_test(configs, fits, ids, K, etas, m) -> None:
    """The paper plan's families interpolate their 2m + 1 samples (``m`` heads fitted): what
    the observations fix more than once is V, through every family's limit ``A = V.a`` and its
    single-token value ``A + sum_h c_h = f((x)) = V.x`` (``fits[n]`` of ``configs[n]``, its
    observations ``ids[n]``).  V is fitted to both by weighted least squares, and each residual
    checked against its first-order bound from ``etas`` (every observation's), as the paper's
    analysis did: a miss beyond ``NOISE_FACTOR`` bounds is
    :class:`~exactlearn.errors.ResidualsBeyondNoise` with ``m`` (a box noisier than declared,
    or more heads than fitted: under a head bound the learner then fits more).  At d = 1 the
    one family's two rows are all that fixes V twice."""
    used = sorted(fits)
    d = len(configs[used[0]].a) if used else 0
    rows = []                           # (configuration, which, tokens, value, sensitivity)
    for n in used:
        f, c = fits[n], configs[n]
        rows.append((n, "the limit A = V.a", c.a, f.A, f.G[0]))
        rows.append((n, "the single-token value A + sum c = V.x", c.x,
                     f.A + K.ctx.fsum(f.cs), f.G[0] + f.G[m + 1:].sum(axis=0)))
    if len(rows) <= d:
        return                          # nothing fixed twice
    A = np.array([[float(a) for a in tok] for _, _, tok, _, _ in rows])
    weights = [float(np.abs(g) @ etas[ids[n]]) for n, _, _, _, g in rows]    # each row's bound
    V, S, size = wls_sparse(K, [[(i, tok[i]) for i in range(d)] for _, _, tok, _, _ in rows], d,
                            [val for _, _, _, val, _ in rows], weights,
                            [(ids[n], g) for n, _, _, _, g in rows], len(etas),
                            map_rows=lambda G: np.eye(len(rows)) - A @ G)   # residual rows
    bound = S.bounds(etas)
    for r, (n, which, tok, val, _) in enumerate(rows):
        c, terms = configs[n], [K(a) * v for a, v in zip(tok, V)]
        top = max([abs(val)] + [abs(t) for t in terms])
        check_noise(val - K.ctx.fsum(terms), LO.convert(float(bound[r])),
                    rounding(K, 64 * len(terms) * top) + LO.convert(size),
                    f"{which} of configuration {c.kind}{(c.i + 1, c.j + 1)} misses the V that "
                    f"every family fixes", heads=m)


SECOND_SCALES = (mpq(2), mpq(1, 2))


def scale_test(c, fit, K, asker, nz, nodes, m, H) -> int:
    """The paper plan at d = 1: its one configuration ``c`` interpolates, and the limits test
    has one row to spare, so ``c`` is asked again at the first of SECOND_SCALES that resolves
    (a supplementary family), and its fit taken back to scale 1 must match ``fit`` entry by
    entry (poles by size) within NOISE_FACTOR times their two first-order bounds, else
    :class:`~exactlearn.errors.ResidualsBeyondNoise` with ``m``.  Returns the families asked
    (docs/explanation/real-field.md, "A box noisier than its declared eta")."""
    try:
        other, _, f = resolve_family(c, K, asker, nz, nodes, m, H, scales=SECOND_SCALES,
                                     paper=True)
    except LearningFailure:
        return len(SECOND_SCALES)       # no second scale resolves: the certificate decides

    def entries(g):
        order = sorted(range(m), key=lambda h: g.logs[h])
        return ([(g.A, g.bounds[0])] + [(g.logs[h], g.bounds[1 + h]) for h in order]
                + [(g.cs[h], g.bounds[1 + m + h]) for h in order])
    names = ["A"] + [f"log rho_{h + 1}" for h in range(m)] + [f"c_{h + 1}" for h in range(m)]
    for name, (a, ba), (b, bb) in zip(names, entries(fit), entries(other)):
        check_noise(a - b, LO.convert(float(ba) + float(bb)), rounding(K, 64 * (abs(a) + abs(b))),
                    f"{name} of the configuration asked at scale {f} misses its fit at scale 1",
                    heads=m)
    return SECOND_SCALES.index(f) + 1


def _unresolved(bad, stopped, share, n, nz, rec, start, H, fewer):
    """The route's failure when too many of its ``n`` configurations are unresolved (``bad``):
    the first failure's type, or with ``fewer`` (the paper plan's nodes, fewer heads fitted
    than the bound) :class:`~exactlearn.errors.ResidualsBeyondNoise` with that count, so that
    the learner fits more heads (:func:`exactlearn.strategies.real.run`)."""
    first = bad[min(bad)]
    some = (f"of the first {stopped} (fitting stopped there: more than "
            f"{share:.0%} of all had failed) " if stopped else "")
    lead, why = precision_failure(bad, nz, rec, start, H)    # the verdict leads, if any
    guess = "" if lead else (f" (a box noisier than declared, or more heads than "
                             f"{H if fewer is None else fewer})")
    text = (f"{lead}{len(bad)} {some}of {n} configurations could not be resolved at any "
            f"scale{guess}{why}; the first: {first}")
    return type(first)(text) if fewer is None else ResidualsBeyondNoise(text, heads=fewer)


def _labelled(splan, fits, poles_of, bad, rescued, relation, loose, m) -> dict:
    """The families' head labels (``{family: permutation}``): the labelling of
    :func:`~exactlearn.strategies.real.labels.label_families` from each of the first
    ``ROOTS_TRIED`` basis families at x_1 (best determined first), the one that labels most;
    raises when no basis family at x_1 was resolved."""
    basis0 = [splan.index("basis", 0, j) for j in range(splan.d)]
    roots = sorted((n for n in basis0 if n in fits), key=lambda n: rel_bound(fits[n], m))
    if not roots:
        raise DegenerateDraw(f"no basis configuration with final token x_1 could be resolved; "
                             f"(x_1, e_1): {bad[basis0[0]]}")
    index = {}
    for root in roots[:ROOTS_TRIED]:       # the head numbering: the root that labels most
        got = (label_families(splan, poles_of, relation, root, square_joint=True,
                              scales={n: mpq(f) for n, f in rescued.items()}, equal_only=loose)
               if splan.bias else label_families(splan, poles_of, relation, root,
                                                 equal_only=loose))
        if len(got) > len(index):
            index = got
        if len(index) >= 0.9 * len(fits):
            break
    return index


def probe_nodes(plan0, asker, nz, nodes, H, rec, start, lean_ok) -> list:
    """The scale probe's nodes (:func:`~exactlearn.strategies.real.stable_probe.probe_scale`):
    the lean plan's when it may follow (``lean_ok``: the heads given) and the first probe
    family's single tokens ``(x)`` and ``(a)`` at scale 1 -- asked here, answers the probe
    then reuses -- show a box declared at float64 rounding; else ``nodes`` (also when both
    answers are 0, as when the heads' v sum to zero: nothing shows the box's precision)."""
    if not lean_ok:
        return nodes
    ask_family(plan0.configs[plan0.index("basis", 0, 0)], mpq(1), asker, nz, [(0, 1), (1, 0)], H)
    if not any(float(y) != 0 for _, y in rec.observations[start:]):
        return nodes                    # no output to judge the declared eta by (sum_h v_h = 0)
    return ratio_nodes(H, lean=True) if declared_level(nz, rec, start) <= COARSE else nodes


def drawn_seed(plan) -> int:
    """The pencil's seed, from the plan's tokens: they are drawn with learn()'s ``seed`` and
    anew on each retry, so a retry after a failed pencil start asks other tokens (a fixed
    seed repeated the same queries, and the same failure, on every attempt)."""
    text = repr([[str(a) for a in x] for x in plan.X] + [[str(a) for a in e] for e in plan.E])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def pencil_route(plan0, K, asker, nz, nodes, H, why, bias=False):
    """Step 3b (module doc): the heads started by
    :mod:`~exactlearn.strategies.real.stable_pencil`, then the plan's configurations asked as
    ratio families at ``PENCIL_SCALES`` times the ``sigma`` at which the start's exponents have
    an rms of about STABLE_TARGET; the polish that follows fits all of them.  With ``bias`` the start
    has u (from ``d + 1`` final tokens) and c from the single-token query ``(x_0)``:
    ``f((x_0)) = c + V.x_0``."""
    d = plan0.d

    def ask(queries):
        return [float(y) for y, _ in asker.ask(queries)]

    start, info = pencil_heads(ask, d, H, x_norm=1.0, e_norm=0.5, seed=drawn_seed(plan0),
                               bias=bias)
    Xm = np.array([[float(a) for a in x] for x in plan0.X]).T
    Em = np.array([[float(a) for a in e] for e in plan0.E]).T
    if bias:
        logs = np.array([Em.T @ (W @ Xm + u[:, None]) for W, _, u in start])
    else:
        logs = np.array([Em.T @ W @ Xm for W, _ in start])
    rms = float(np.sqrt(np.mean(logs ** 2)))
    sigma = sigma_for(rms)
    splan = scaled_plan(plan0, sigma, H)
    plan_start = len(asker.rec.observations)
    asker.ask([family_tokens(tuple(f * a for a in c.x), tuple(f * b for b in c.a), k, mm)
               for f in PENCIL_SCALES for c in splan.configs for k, mm in nodes])
    mpf = K.ctx.mpf                 # a float64 is exact in any precision
    constant = None
    if bias:
        heads = [Head(tuple(tuple(mpf(float(a)) for a in row) for row in W),
                      tuple(mpf(float(a)) for a in v), tuple(mpf(float(a)) for a in u))
                 for W, v, u in start]
        x0 = splan.X[0]
        y0 = float(asker.ask([[x0]])[0][0])
        V = np.sum([v for _, v, _ in start], axis=0)
        constant = mpf(y0 - float(V @ np.array([float(a) for a in x0])))
    else:
        heads = [Head(tuple(tuple(mpf(float(a)) for a in row) for row in W),
                      tuple(mpf(float(a)) for a in v)) for W, v in start]
    info["why"] = clip(why, 200)
    return Route(splan, heads, None, None, None, {}, {}, {}, {}, 0, 0.0, constant=constant,
                 sigma=sigma, pencil=info, plan_start=plan_start)
