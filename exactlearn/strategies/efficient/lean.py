"""The efficient plan's lean analysis (docs: explanation/efficient-plan.md, "Fewer samples once
v is known"): a family's poles through its 2H − 1 samples and its limit
(:func:`poles_through_limit`), and, once the group of x_1 has given every c-value, the other
families from fewer samples (:func:`analyse_lean`, with
:func:`~exactlearn.strategies.efficient.known_c.poles_known_c` and
:func:`~exactlearn.strategies.efficient.known_c.pairings`); where that cannot go on,
:class:`LeanIncomplete` tells :mod:`~exactlearn.strategies.efficient.learn` to complete the
families, and :func:`completed_fallbacks` counts what was completed.
"""

from __future__ import annotations

import itertools

from exactlearn.algebra import linalg, polys
from exactlearn.fields.base import ExactnessError
from exactlearn.model import Head, canonicalize
from exactlearn.pipeline.interpolate import InterpolationError, cauchy_interpolate, poles
from exactlearn.pipeline.solve import solve_W, solve_v
from exactlearn.strategies.efficient.known_c import pairings, poles_known_c
from exactlearn.strategies.efficient.plan import skeleton


def poles_through_limit(y0, samples, limit, H, K) -> list:
    """[(rho_h, c_h)] of f(q_k) = V·a + Σ_h c_h / (1 + k rho_h) (the query family of
    arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works), exactly, from its
    value y0 at k = 0, ``samples`` at k = 1..n (n = 2H − 1) and its limit V·a.

    In t = 1/(k* − k), k* = n + 1 (not sampled), k = ∞ becomes t = 0, so the
    n + 2 = 2H + 1 known values are samples of a rational function of t of type
    (H, H): :func:`cauchy_interpolate` finds it and :func:`poles` writes it as
    const + Σ c'/(1 + t rho').  Since c/(1 + k rho) = ct/((1 + k* rho) t − rho),
    rho = −1/(rho' + k*) and c = −c' (1 + k* rho).  A pole at k* itself would
    leave deg P > deg Q and is reported (InterpolationError).

    >>> from exactlearn.fields import QQ
    >>> f = lambda k: QQ(7) + QQ(3) / (1 + 2 * k) + QQ(-1) / (1 + QQ("1/4") * k)
    >>> sorted(poles_through_limit(f(0), [f(k) for k in (1, 2, 3)], QQ(7), 2, QQ))
    [(mpq(1,4), mpq(-1,1)), (mpq(2,1), mpq(3,1))]
    """
    n = len(samples)
    kstar = K(n + 1)
    ts = [K.one / (kstar - K(k)) for k in range(n + 1)] + [K.zero]
    rf = cauchy_interpolate(ts, [y0] + list(samples) + [limit], H, K)
    if polys.degree(rf.P) > polys.degree(rf.Q):
        raise InterpolationError(f"k = {n + 1} is a pole of f(q_k): not a rational function of "
                                 f"the attention form")
    out = []
    for rho_t, c_t in poles(rf, K):
        s = rho_t + kstar
        if K.is_zero(s):
            raise InterpolationError("a pole at k = 0 cannot come from attention")
        rho = -K.one / s
        out.append((rho, -c_t * (K.one + kstar * rho)))
    return out


class PlanReader:
    """The plan's answers read in the analysis field ``A`` (the box's field ``K``, or a prime
    field of the multi-modular method): ``obs(c, k)``, ``dot(u, x)``, ``V`` from the single
    tokens x_i (step 1), and ``fit(n)``, configuration n's poles through its 2H − 1 samples
    and its limit V·a (:func:`poles_through_limit`; k = 0 observed for final tokens x_i, else
    V·x), kept in ``fits`` -- or those given in ``known`` (configuration -> poles already
    determined by the lean analysis)."""

    def __init__(self, plan, values, A, K, known=None):
        self.plan, self.values, self.A = plan, values, A
        self.conv = (lambda y: y) if A is K else A
        self.known = known or {}
        self.fits: dict = {}
        singles = [plan.configs[plan.index("basis", i, 0)] for i in range(plan.d)]
        Xt = [[A(x[r]) for r in range(plan.d)] for x in plan.X]           # rows x_i^T
        self.V = linalg.matvec(linalg.inverse(Xt, A), [self.obs(c, 0) for c in singles], A)

    def obs(self, c, k):
        return self.conv(self.values(c.tokens(k)))

    def dot(self, u, x):
        A = self.A
        acc = A.zero
        for a, b in zip(u, x):
            acc = acc + a * A(b)
        return acc

    def fit(self, n):
        fits, plan = self.fits, self.plan
        if n not in fits:
            if n in self.known:         # determined by the lean analysis (its proofs)
                fits[n] = self.known[n]
                return fits[n]
            c = plan.configs[n]
            y0 = self.obs(c, 0) if c.x in plan.X else self.dot(self.V, c.x)
            fits[n] = poles_through_limit(y0, [self.obs(c, k) for k in range(1, plan.samples + 1)],
                                          self.dot(self.V, c.a), plan.H, self.A)
        return fits[n]

    def heads(self, logs, cs, lab, P, trace) -> list:
        """Step 6: each head's W from its scores ``logs[h]`` and v from its c-values
        ``cs[j][h]``, canonical; ``trace`` (a list, or None) gets every fitted family
        (with its labels ``lab``) and V."""
        plan, A = self.plan, self.A
        out = []
        for h, L in enumerate(logs):
            v = solve_v(plan, [cs[j][h] for j in range(plan.d)], A)
            out.append(Head(solve_W(plan, L, P), tuple(A.to_param(x) for x in v)))
        if trace is not None:
            trace.clear()
            for n, pl in self.fits.items():
                c = plan.configs[n]
                trace.append({"config": c, "poles": pl,
                              "labelled": lab.get((c.i, c.j)) if c.kind == "basis" else None})
            trace.append({"V": self.V})
        return canonicalize(out)


class LeanIncomplete(Exception):
    """The lean analysis cannot use its fewer samples here: complete the families to
    2H − 1 samples and analyse as the plan that is not lean does -- every family, or all
    but those in ``known`` (configuration index -> their poles, already determined)."""

    def __init__(self, reason, known=None):
        super().__init__(reason)
        self.known = known or {}


def completed_fallbacks(plan, values) -> list:
    """The ``samples`` fallback of a lean plan: the configurations of the plan asked beyond
    their planned samples (up to 2H − 1), and those queries (each asked once), with the
    reasons the analyses gave; [] when there are none."""
    if not plan.lean:
        return []
    configs = queries = 0
    for c in plan.asked:
        extra = sum(1 for k in range(plan.samples_of(c) + 1, plan.samples + 1)
                    if c.tokens(k) in values)
        configs += extra > 0
        queries += extra
    if not queries:
        return []
    return [{"kind": "samples", "reason": "; ".join(sorted(plan.lean_reasons)) or
             "families completed to 2H - 1 samples", "configs": configs, "queries": queries}]


def analyse_lean(plan, values, A, K, trace) -> tuple:
    """Steps 1-6 for a lean plan in the field A (docs: explanation/efficient-plan.md, "Fewer
    samples once v is known"): the group of x_1 (full families) labels the heads and gives
    every c_h(e_j); each matching configuration (x_1, e_1 + e_j) is read at k = 1 alone
    (:func:`~exactlearn.strategies.efficient.known_c.pairings`: exactly one pairing must
    reproduce it); each other basis configuration's poles come from its 2H − 2 samples and
    the known c-values (:func:`~exactlearn.strategies.efficient.known_c.poles_known_c`).
    A family whose samples do not pin its answer down is completed (its remaining samples
    asked: counted, reported); :class:`LeanIncomplete` when the lean route cannot go on."""
    d, H, ns = plan.d, plan.H, plan.samples
    P = A.param
    read = PlanReader(plan, values, A, K)
    obs, dot, fit, V, fits = read.obs, read.dot, read.fit, read.V, read.fits

    def full_fit(n, why):
        got = fit(n)
        if len(got) != H:
            raise LeanIncomplete(f"configuration {n} shows {len(got)} poles, not {H}")
        plan.lean_reasons.add(why)
        return got

    idx = plan.index
    try:
        ref = fit(idx("basis", 0, 0))
    except (InterpolationError, ExactnessError) as exc:
        raise LeanIncomplete(f"the family of (x_1, e_1) does not fit: {exc}") from None
    if len(ref) != H:
        raise LeanIncomplete(f"(x_1, e_1) shows {len(ref)} poles, fewer than the bound H = {H}")
    lab = {(0, 0): ref}
    try:
        for j in range(1, d):
            other = fit(idx("basis", 0, j))
            if len(other) != H:
                raise LeanIncomplete(f"(x_1, e_{j + 1}) shows {len(other)} poles, not {H}")
            n = idx("within", 0, j)
            w = plan.configs[n]
            if plan.samples_of(w) < ns:
                perms = pairings(ref, other, obs(w, 1), dot(V, w.a), A)
                if len(perms) != 1:
                    full_fit(n, f"a matching configuration (x_1, e_1 + e_j) whose value at k = 1 "
                                f"{'no' if not perms else 'more than one'} pairing of heads reproduces: "
                                f"its remaining {ns - 1} samples asked")
                    perms = paired_by_products(ref, other, fits[n], A)
            else:
                perms = paired_by_products(ref, other, fit(n), A)
            if len(perms) != 1:
                raise LeanIncomplete(f"the heads of (x_1, e_1) and (x_1, e_{j + 1}) pair in {len(perms)} ways")
            lab[(0, j)] = [other[g] for g in perms[0]]
            if n not in fits:           # its poles, as a full fit would give them (distinct products)
                _within_poles(fits, n, ref, lab[(0, j)], A)
        cs = [[c for _, c in lab[(0, j)]] for j in range(d)]
        tied = [j for j in range(d) if any(A.eq(cs[j][a], cs[j][b]) for a in range(H) for b in range(a))]
        for i in range(1, d):
            for j in range(d):
                if j in tied:
                    continue
                lab[(i, j)] = _basis_cell(plan, read, i, j, cs[j], A, full_fit)
    except (InterpolationError, ExactnessError) as exc:
        raise LeanIncomplete(f"a family does not fit: {exc}") from None
    if tied:                            # the paper's matching for those directions, as before
        raise LeanIncomplete(f"the heads' c-values coincide at e_j for j in {[j + 1 for j in tied]} (e.g. "
                        f"equal v): the families (x_i, e_j) there", known=dict(fits))
    cells = skeleton(d, None)
    logs = [{(i, j): A.log(lab[(i, j)][h][0]) for i, j in cells} for h in range(H)]
    return read.heads(logs, cs, lab, P, trace), []


def _basis_cell(plan, read, i, j, cs, A, full_fit) -> list:
    """The labelled poles of the basis configuration (x_i, e_j), i >= 2, from its lean samples
    and the known c-values ``cs`` (:func:`~exactlearn.strategies.efficient.known_c.poles_known_c`),
    else from its full family (the remaining sample asked, ``full_fit``)."""
    ns = plan.samples
    n = plan.index("basis", i, j)
    c = plan.configs[n]
    nb = plan.samples_of(c)
    if nb < ns:
        limit = read.dot(read.V, c.a)
        gs = [read.obs(c, k) - limit for k in range(1, nb + 1)]
        rho = poles_known_c(gs, cs, A)
        if rho is not None:
            plan.known_c_passed.append((A, gs, list(cs)))
            read.fits[n] = list(zip(rho, cs))
            return read.fits[n]
        got = full_fit(n, f"a basis configuration whose {nb} samples and known c-values "
                          f"leave its poles undetermined (gcd of R_1, R_2 not linear): its "
                          f"sample k = {ns} asked")
    else:
        got = read.fit(n)
    return _by_c_value(got, cs, A, i, j)


def _by_c_value(got, cs, A, i, j) -> list:
    """The poles ``got`` of the basis configuration (x_i, e_j) in head order, each head found
    by its known c-value ``cs[h]``; LeanIncomplete when a pole matches no head or two."""
    H = len(cs)
    by = {}
    for r, cv in got:
        h = [t for t in range(H) if A.eq(cs[t], cv)]
        if len(h) != 1 or h[0] in by:
            raise LeanIncomplete(f"a pole of (x_{i + 1}, e_{j + 1}) is not labelled by its c-value")
        by[h[0]] = (r, cv)
    if len(by) != H:
        raise LeanIncomplete(f"(x_{i + 1}, e_{j + 1}) shows {len(got)} poles, not {H}")
    return [by[h] for h in range(H)]


def _within_poles(fits, n, ref, lab, A) -> None:
    """The poles of the matching configuration ``n`` read at k = 1 alone, as a full fit would
    give them -- ``(rho rho', c + c')`` per head -- kept in ``fits`` when pairwise distinct."""
    w_poles = [(a * b, c + g) for (a, c), (b, g) in zip(ref, lab)]
    H = len(w_poles)
    if all(not A.eq(w_poles[s][0], w_poles[t][0]) for s in range(H) for t in range(s)):
        fits[n] = w_poles


def paired_by_products(ref, other, within, A) -> list:
    """The pairings π of a fully fitted matching configuration: head h of ``ref`` with the
    pole π[h] of ``other``, when its poles are the products α_h β_π(h) with coefficients
    c_h + γ_π(h) (at most two are returned)."""
    H = len(ref)
    found = []
    for perm in itertools.permutations(range(H)) if H <= 6 else ():
        if all(any(A.eq(ref[h][0] * other[g][0], r) and A.eq(ref[h][1] + other[g][1], c) for r, c in within)
               for h, g in enumerate(perm)):
            found.append(perm)
            if len(found) > 1:
                break
    if H > 6:                       # one partner per head, found pole by pole
        perm = []
        for a, c in ref:
            g = [t for t, (b, gc) in enumerate(other)
                 if any(A.eq(a * b, r) and A.eq(c + gc, cw) for r, cw in within)]
            if len(g) != 1:
                return []
            perm.append(g[0])
        found = [tuple(perm)] if len(set(perm)) == H else []
    return found
