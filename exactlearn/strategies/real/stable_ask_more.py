"""The families chosen by the polish: one ``ask_more``, for the directions it cannot determine
(:func:`target_families`) and the entries it determines poorly (:func:`weak_families`,
:func:`ask_families_again`) (docs: howto/float-black-box.md#the-polish-asks-for-its-weak-entries;
docs: howto/float-black-box.md#the-query-budget).

An entry of W whose first-order bound stands ``POLISH_BOUND_FACTOR`` times above the median
entry's names the families whose observations weigh most in it: :func:`weak_families` ranks
the families by their share in the bounds of the ``POLISH_ENTRIES`` weakest entries;
:func:`ask_families_again` asks, for each of the first ``POLISH_FAMILIES``, a family
``(x, e - e_k)`` chosen from the polished heads' predicted exponents, and the family again at
scale 1/2 or 2; the polish then runs again, up to ``POLISH_ROUNDS`` rounds.  No labelling: the
polish and the certificate use the raw observations; every query is counted
(``targeted_families``), within ``QUERY_BUDGET`` times the paper's count on the lean route.
"""
from __future__ import annotations

import math

import numpy as np
from gmpy2 import mpq

from exactlearn.pipeline.plan import Config, bias_count, paper_count
from exactlearn.strategies.real.ratio import MAX_COPIES
from exactlearn.strategies.real.stable_normal import head_arrays
from exactlearn.strategies.real.stable_polish import sensitivity_rows
from exactlearn.strategies.real.stable_probe import ask_family

#: a W entry is weak when its first-order bound under the polish exceeds this many times the
#: median entry's
POLISH_BOUND_FACTOR = 4.0
#: the weak W entries looked at a round, the largest first
POLISH_ENTRIES = 3
#: the families (token pairs) asked again a round, by their share in those entries' bounds
POLISH_FAMILIES = 2
#: rounds of asking and polishing again
POLISH_ROUNDS = 4
#: an undetermined direction's basis family is asked at these times the scale f that brings
#: its exponent to about 1 (:func:`target_families`): at f only since 6 Dec 2026 -- at f/2,
#: f and 2f, and within the budget, two float64 grid runs erred by 7.1e-13 and 1.1e-13 (the
#: rounds below had no room left), by 1.6e-14 and 1.4e-14 at f only (``python
#: benchmarks/bench_stable_mechanisms.py --target-scales 1/2 1 2 -- --grid --seeds 6``)
TARGET_SCALES = (mpq(1),)
#: on the lean plan's route (a box declared at float64 rounding, the heads given) the families
#: of this module stop before one that would bring the attempt's queries past this many times
#: the paper plan's count (:func:`query_budget`; issue 23 section 3).  Not on a coarse box's:
#: its plan alone asks 4 to 30 times that count, and within the budget the float32 grid
#: (``bench_float.py --f32-grid --dtype float32 --noise auto --seeds 1`` at 653ed21) erred by
#: up to 2.1e-4 instead of 5.7e-6
QUERY_BUDGET = 2.5


def query_budget(d, H, bias) -> float:
    """The queries an attempt may reach with the families of this module: ``QUERY_BUDGET``
    times the paper plan's count (:func:`~exactlearn.pipeline.plan.paper_count`, with biases
    :func:`~exactlearn.pipeline.plan.bias_count`)."""
    return QUERY_BUDGET * (bias_count(d, H) if bias else paper_count(d, H))


def budget_limit(route, start, now, bias, H):
    """The observations the families of this module may bring an attempt (begun at
    observation ``start``, at ``now``) to: ``start`` plus :func:`query_budget` on the lean
    plan's route, where the plan and probe alone stayed within it; None (no limit) elsewhere.
    Where the plan alone exceeds the budget (H = 1 at 2.7 to 3.3 times the paper's count,
    H > d, d = 2) a budget would leave the polish nothing to ask, and its error grew up to
    126 times (docs/howto/float-black-box.md, "The query budget")."""
    if not route.lean:
        return None
    budget = query_budget(route.splan.d, H, bias)
    return start + budget if now - start < budget else None


def _room(asker, nodes, limit) -> bool:
    """Whether one more family (``nodes`` queries at most) keeps the observations within
    ``limit`` (None: no limit)."""
    return limit is None or len(asker.rec.observations) + len(nodes) <= limit


def weak_families(polished) -> list:
    """``[(share, h, (a, x))]``: the token pairs whose observations weigh most in the first-order
    bounds of the weak W entries (``POLISH_BOUND_FACTOR`` times the median bound, at most
    ``POLISH_ENTRIES``), the largest share first, each with the head of the entry it weighs
    most in; ``[]`` when no entry is weak."""
    if polished is None or polished.normal is None:
        return []
    fW = np.asarray(polished.W_bounds[0])
    flat = fW.ravel()
    med = float(np.median(flat))
    top = [int(p) for p in np.argsort(-flat)[:POLISH_ENTRIES]
           if flat[p] > POLISH_BOUND_FACTOR * med]
    if not top:
        return []
    fam, parts, inv = polished.normal[3:]
    H, dd = fW.shape[0], fW[0].size
    out = []
    for g, obs, ST in sensitivity_rows(fam, parts, inv[top], H, dd):
        shares = (fam.eta_all[obs][:, None, :] @ np.abs(ST))[:, 0] / flat[top]
        for f, share in zip(g, shares):
            t = int(np.argmax(share))
            out.append((int(f), float(share[t]), top[t] // dd, fam.pairs[f]))
    out.sort()                          # family order, then (stable) the largest share first
    out.sort(key=lambda r: -r[1])
    return [r[1:] for r in out]


def ask_families_again(weak, splan, heads, asker, noise, nodes, H, tried, limit=None) -> int:
    """For the first ``POLISH_FAMILIES`` of ``weak`` (:func:`weak_families`) not in ``tried``:
    the family ``(x, e - e_k)`` that sets head h's predicted exponent farthest from the other
    heads' within the nodes' range, with a visible ``c_h`` (:func:`_best_e`), and the family
    itself at scale 1/2 when head h's exponent lies near the nodes' ends or 2 when it is
    small.  None past ``limit`` observations (:func:`_room`).  How many families were asked."""
    Ws, vs, _ = head_arrays(heads, splan.bias)
    Em = np.array([[float(a) for a in e] for e in splan.E])
    asked, done = 0, 0
    for _, h, (a, x) in weak:
        if done >= POLISH_FAMILIES:
            break
        if (a, x) in tried:
            continue
        tried.add((a, x))
        done += 1
        e = tuple(p - q for p, q in zip(a, x))
        xa = np.array([float(t) for t in x] + ([1.0] if splan.bias else []))
        ef = np.array([float(t) for t in e])
        k = _best_e(Ws, vs, h, xa, ef, Em)
        if k is not None and _room(asker, nodes, limit):
            e2 = tuple(p - q for p, q in zip(e, splan.E[k]))
            ask_family(Config("extra", 0, 0, x, e2), 1, asker, noise, nodes, H)
            asked += 1
        z = abs(float(ef @ Ws[h] @ xa))
        f = mpq(1, 2) if z > 2 else mpq(2) if z < 0.5 else None
        if f is not None and _room(asker, nodes, limit):
            ask_family(Config("extra", 0, 0, x, e), f, asker, noise, nodes, H)
            asked += 1
    return asked


def _best_e(Ws, vs, h, xa, e, Em):
    """The k whose ``(x, e - e_k)`` sets head h's exponent farthest (at most 2) from the other
    heads' within the nodes' range, its ``|c_h|`` weighed against the family's median; None
    when no k keeps it in range and visible."""
    top = math.log(MAX_COPIES) - 0.5
    best, arg = 0.0, None
    for k in range(len(Em)):
        e2 = e - Em[k]
        z = np.array([e2 @ W @ xa for W in Ws])
        cs = np.abs(vs @ e2)
        if abs(z[h]) > top or not cs[h] >= 0.1 * cs.max():
            continue
        others = np.delete(z, h)
        sep = min(float(np.min(np.abs(others - z[h]))) if others.size else 2.0, 2.0)
        score = sep * min(1.0, cs[h] / max(float(np.median(cs)), 1e-300))
        if score > best:
            best, arg = score, k
    return arg


def target_families(weak, splan, heads, asker, noise, nodes, H, limit=None):
    """Families for the directions the polish found undetermined
    (:class:`~exactlearn.strategies.real.stable_polish.Weak`): per
    direction (at most d), the basis family ``(x_i, e_j)`` of the entry of ``M = E^T U X``
    it weighs most, asked with its tokens scaled by the power of two ``f`` that brings that
    head's ``f^2 e_j^T W x_i`` to about 1 (a step beyond the nodes comes back between them;
    ``TARGET_SCALES``: at f only), none past ``limit`` observations
    (:func:`_room`).  Returns how many families were asked; every query is counted
    and certified with the rest."""
    d = splan.d
    Xm = np.array([[float(a) for a in x] for x in splan.X]).T       # columns x_i
    Em = np.array([[float(a) for a in e] for e in splan.E]).T
    if splan.bias:                      # columns (x_i; 1) and U = [W | u] directions
        Xm = np.concatenate([Xm, np.ones((1, Xm.shape[1]))])
    Ws = head_arrays(heads, splan.bias)[0]
    asked, seen = 0, set()
    for h, U in weak.directions[:d]:
        if not np.abs(U).max() > 0:
            continue                    # a direction of v: the solve's families see it
        Md = Em.T @ U @ Xm
        j, i = np.unravel_index(int(np.argmax(np.abs(Md))), Md.shape)
        z = abs(float(Em[:, j] @ Ws[h] @ Xm[:, i]))
        if not z > 1e-12 or (i, j) in seen:
            continue
        seen.add((i, j))
        f = mpq(2) ** int(round(-np.log2(z) / 2))
        c = splan.configs[splan.index("basis", i, j)]
        for g in (f * t for t in TARGET_SCALES):
            if g != 1 and _room(asker, nodes, limit):
                ask_family(c, g, asker, noise, nodes, H)
                asked += 1
    return asked
