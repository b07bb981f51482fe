"""The efficient plan's certificate, step 7 (:mod:`~exactlearn.strategies.efficient.learn`; docs:
explanation/efficient-plan.md): *unique* when H heads come out with every label tied
(:func:`unique_on_plan`), else *by checks*, further check configurations asked until the
probability that a wrong model passes them is at most 2^-40 (:func:`enough_checks`,
:func:`miss_bound`).
"""

from __future__ import annotations

from exactlearn.errors import ExactLearnError
from exactlearn.fields.multimodular import analysis_fields
from exactlearn.fields.rational import QQ
from exactlearn.pipeline.certify import certify
from exactlearn.strategies.efficient.known_c import pairings, poles_known_c
from exactlearn.strategies.efficient.plan import (MAX_CHECK_MISS, MISS_TARGET_BITS, RangeTooSmall,
                                                  check_miss_bound, checks_needed, min_range)


def miss_bound(plan, heads, K, full: bool, rank_plan: bool, n_checks: int, asked=None,
               attempts: int = 1) -> tuple:
    """``(certificate, per-check bound, candidates, bound)`` for certified ``heads``
    (docs/explanation/efficient-plan.md, "When a certificate can miss").

    * ``unique`` (bound 0): heads of the full plan (also after a rank fallback) that
      number H and pass :func:`unique_on_plan` -- no other model with at most H
      canonical heads reproduces the observations, so under the promise the answer is
      right whatever the checks.
    * ``checks``: otherwise the check configurations alone guard the answer: each
      misses a wrong model with probability at most
      :func:`~exactlearn.strategies.efficient.plan.check_miss_bound` (with the number
      of heads learned), and a union bound over the ``candidates`` the run may certify
      (one per analysis field of K, times two for a rank plan: its reconstruction and
      the full plan's, times the ``attempts`` a run with retries may make) gives
      ``candidates * per_check ** n_checks``.
    """
    if full and len(heads) == plan.H and unique_on_plan(heads, plan, K, asked):
        return "unique", 0.0, 1, 0.0
    per = check_miss_bound(plan.H, plan.x_range, plan.e_range, learned=len(heads)) \
        if plan.x_range is not None else 1.0
    if rank_plan:                        # the rank candidate may have had any number of heads <= H
        per = max(per, check_miss_bound(plan.H, plan.x_range, plan.e_range)) \
            if plan.x_range is not None else 1.0
    candidates = len(analysis_fields(K)) * (2 if rank_plan else 1) * max(1, attempts)
    return "checks", per, candidates, min(1.0, candidates * per ** n_checks)


def enough_checks(plan, values, K, heads, full, rank_plan, observations, attempts=1):
    """Set ``plan.certificate`` and ``plan.miss_bound`` for certified ``heads``; when the
    bound exceeds 2^-MISS_TARGET_BITS ask further check configurations
    (``plan.more_checks``, counted; the same in every run of the plan), certify them
    too, and return the number of certified observations (None when none were asked).
    Raises :class:`RangeTooSmall` when one check misses with probability above 1/2,
    :class:`CertificateError` when the heads fail a further check."""
    n0 = len(plan.checks)
    asked = [c for c in plan.configs if c.asked_in(values, plan.samples_of(c))]
    if plan.lean:                   # families asked at fewer than 2H - 1 samples
        asked = [c if c.asked_in(values, plan.samples) else _Reduced(c, plan.samples_of(c))
                 for c in asked]
    kind, per, candidates, bound = miss_bound(plan, heads, K, full, rank_plan, n0 + len(plan.extra_checks),
                                              asked, attempts)
    plan.certificate, plan.miss_bound = kind, bound
    if bound <= 2.0 ** -MISS_TARGET_BITS:
        return None
    if plan.x_range is None:
        raise RangeTooSmall(
            f"the plan's {n0} check configuration(s) leave a miss bound of {bound:.3g} > "
            f"2^-{MISS_TARGET_BITS} and it has no query range to draw more from (a plan from "
            f"draw_efficient_plan has one)")
    try:
        need = checks_needed(per, MISS_TARGET_BITS, candidates)
    except RangeTooSmall:
        R = min_range(plan.H, len(heads))
        raise RangeTooSmall(
            f"the query range {plan.x_range} is too small to certify this answer: it has "
            f"{len(heads)} of at most {plan.H} head(s), so {'the rank promise' if rank_plan else 'the observations'} "
            f"leave(s) other models possible and only the check configurations can rule them out, and one "
            f"check at this range misses a wrong model with probability up to {per:.3g} (> {MAX_CHECK_MISS}); "
            f"use query_range >= {R} (and e_range, if given; --range on the command line) or "
            f"plan='paper'") from None
    more = need - n0
    if more > len(plan.extra_checks):
        plan.extra_checks = plan.more_checks(more)
        plan.check_reason = (f"{more} further check configuration(s): with {len(heads)} head(s) learned "
                             f"of at most {plan.H}, the observations alone do not determine the model, and "
                             f"one check at this range misses a wrong model with probability up to "
                             f"{per:.3g}; {need} checks bring the miss bound to <= 2^-{MISS_TARGET_BITS}")
        before = values.rec.queries
        for c in plan.extra_checks:
            for k in range(1, plan.samples + 1):
                values(c.tokens(k))
        plan.extra_queries += values.rec.queries - before   # a repeated query is not asked again
    plan.miss_bound = min(1.0, candidates * per ** need)
    return certify(heads, plan.d, observations(), K)


class _Reduced:
    """An asked configuration whose family was asked at k = 1..n only, n < 2H − 1 (a lean
    plan): it ties labels only by the tests of "Fewer samples once v is known"
    (docs/explanation/efficient-plan.md)."""

    def __init__(self, config, n):
        self.config, self.n = config, n

    def __getattr__(self, name):
        return getattr(self.config, name)


def unique_on_plan(heads, plan, K, asked=None) -> bool:
    """True when no model with at most ``plan.H`` canonical heads other than ``heads``
    reproduces the single tokens and the families of the configurations ``asked``
    (default: the full efficient plan's ``plan.asked``; check configurations are ignored), decided exactly in K
    (docs/explanation/efficient-plan.md, "A unique certificate").

    Requires len(heads) == H and, with rho_h(c) = exp(e^T W_h x) and c_h(e) = -v_h.e:
    on every asked configuration the rho_h are pairwise distinct and every c_h != 0
    (so every family shows H poles and any such model has one head per pole); and the
    labels of the basis configurations (x_i, e_j) are tied into one class (for H = 1 they
    are trivially) by

    * equal c-values: all (x_i, e_j), i = 1..d, when the c_h(e_j) are pairwise distinct;
    * a matching configuration (x_i, e_1 + e_j) or (x_1 + x_i, e_j) whose poles are
      products rho_h rho_h' of its two basis configurations only for h = h'.

    >>> from exactlearn.fields import QQ, Rational
    >>> from exactlearn.model import Head
    >>> from exactlearn.strategies.efficient.plan import efficient_plan
    >>> p = efficient_plan([[1, 0], [0, 1]], [[1, 1], [0, 1]], H=1, checks=[((1, 2), (3, -1))])
    >>> W = ((QQ(1), QQ(0)), (QQ(0), QQ(2)))
    >>> unique_on_plan((Head(W, (QQ(1), QQ(1))),), p, Rational())
    True
    >>> unique_on_plan((Head(W, (QQ(1), QQ(-1))),), p, Rational())     # v.e_1 = 0: row 1 unseen
    False
    """
    d, H = plan.d, plan.H
    if len(heads) != H:
        return False
    if asked is None:                   # a lean plan's fewer samples, as planned
        asked = [_Reduced(c, plan.samples_of(c)) if plan.samples_of(c) < plan.samples else c
                 for c in plan.asked]
    asked = [c for c in asked if c.kind != "check"]
    cells = {(c.i, c.j) for c in asked if c.kind == "basis"}
    if len(cells) != d * d:
        return False

    got = _poles_and_c(heads, asked, K, d)
    if got is None:
        return False
    vs, rho, cval = got

    def distinct(ys):
        return all(not K.eq(ys[a], ys[b]) for a in range(len(ys)) for b in range(a))

    for c in asked:
        if not distinct(rho[(c.kind, c.i, c.j)]) or any(K.is_zero(y) for y in cval[c.e]):
            return False
    reduced = {(c.kind, c.i, c.j): c.n for c in asked if isinstance(c, _Reduced)}
    if reduced and not _reduced_determined(reduced, heads, plan, K, rho, cval, vs):
        return False
    parent = {cell: cell for cell in cells}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def union(a, b):
        parent[find(a)] = find(b)

    if H == 1:                          # one head: every labelling is the same
        return True
    for j in range(d):
        if distinct(cval[plan.E[j]]):
            for i in range(1, d):
                union((0, j), (i, j))
        elif any(("basis", i, j) in reduced for i in range(d)):
            return False                # a reduced family needs distinct c-values

    for c in asked:
        if (c.kind, c.i, c.j) in reduced:
            if c.kind == "within":      # its one pairing was checked by _reduced_determined
                union((c.i, 0), (c.i, c.j))
            continue
        if c.kind == "within":          # (x_i, e_1 + e_j): rho = rho(i, 1) rho(i, j)
            a, b = (c.i, 0), (c.i, c.j)
        elif c.kind == "across":        # (x_1 + x_i, e_j): rho = rho(1, j) rho(i, j)
            a, b = (0, c.j), (c.i, c.j)
        else:
            continue
        if _products_unique(K, rho[("basis",) + a], rho[("basis",) + b], rho[(c.kind, c.i, c.j)]):
            union(a, b)
    return len({find(cell) for cell in cells}) == 1


def _poles_and_c(heads, asked, K, d):
    """``(v's in K, rho_h per asked configuration, c_h per direction)`` of ``heads``, exactly
    in K; None when K cannot form them (an exponential it does not hold)."""
    Wx: dict = {}                       # (head, x) -> W_h x, once per final token

    def score(h, e, x):
        y = Wx.get((h, x))
        if y is None:
            W = heads[h].W
            y = Wx[(h, x)] = [sum((W[r][t] * x[t] for t in range(d)), QQ(0)) for r in range(d)]
        return sum((e[r] * y[r] for r in range(d)), QQ(0))

    try:
        vs = [[K(x) for x in h.v] for h in heads]
        rho = {}
        for c in asked:
            rho[(c.kind, c.i, c.j)] = [K.exp(score(h, c.e, c.x)) for h in range(len(heads))]
        cval = {}
        for c in asked:
            if c.e not in cval:
                ke = [K(e) for e in c.e]
                cval[c.e] = [-sum((e * y for e, y in zip(ke, v)), K.zero) for v in vs]
    except (ExactLearnError, ArithmeticError, ValueError):
        return None
    return vs, rho, cval


def _products_unique(K, r1, r2, r) -> bool:
    """No pole of ``r`` is a product ``rho_h rho_g`` of the two basis families' poles with
    h != g."""
    H = len(r1)
    return not any(K.eq(r1[h] * r2[g], y) for h in range(H) for g in range(H) if h != g
                   for y in r)


def _reduced_determined(reduced, heads, plan, K, rho, cval, vs) -> bool:
    """The families a lean plan asked at fewer samples pin the learned heads down
    (docs/explanation/efficient-plan.md, "Fewer samples once v is known"): each reduced
    basis configuration's poles are the only ones with its labelled c-values that
    reproduce its samples (:func:`~exactlearn.strategies.efficient.known_c.poles_known_c`
    on the learned model's values, which the certificate has made the observed ones), and
    each reduced matching configuration (x_1, e_1 + e_j) is reproduced at k = 1 by the
    learned pairing only (:func:`~exactlearn.strategies.efficient.known_c.pairings`)."""
    d, H = plan.d, plan.H
    V = [sum((v[r] for v in vs), K.zero) for r in range(d)]

    def value(key, c, k):
        """The learned model's f(q_k) on configuration c."""
        lim = sum((K(a) * x for a, x in zip(c.a, V)), K.zero)
        return lim + sum((cv / (K.one + K(k) * r) for r, cv in zip(rho[key], cval[c.e])), K.zero)

    for c in plan.asked:
        key = (c.kind, c.i, c.j)
        n = reduced.get(key)
        if n is None:
            continue
        lim = sum((K(a) * x for a, x in zip(c.a, V)), K.zero)
        if c.kind == "basis":
            data = ([value(key, c, k) - lim for k in range(1, n + 1)], cval[c.e])
            test = _only_poles
        elif c.kind == "within" and c.i == 0 and n == 1:
            data = (list(zip(rho[("basis", 0, 0)], cval[plan.E[0]])),
                    list(zip(rho[("basis", 0, c.j)], cval[plan.E[c.j]])), value(key, c, 1) - lim)
            test = _only_pairing
        else:
            return False
        if not _holds(test, data, K, getattr(plan, "known_c_passed", None)):
            return False
    return True


def _only_poles(data, F, memo=None) -> bool:
    """The test of poles_known_c on ``data``; ``memo`` (field, values, c-values) of the
    tests the analysis passed in the same field: an identical input passed already (the
    c-values up to their order: the heads' names do not change the claim it proves)."""
    gs, cs = data
    if memo is not None and any(_same_field(f, F) and g == gs and len(c) == len(cs)
                                and all(any(x == y for y in c) for x in cs) for f, g, c in memo):
        return True
    return poles_known_c(gs, cs, F) is not None


def _only_pairing(data, F) -> bool:
    ref, other, y = data
    if any(F.is_zero(F.one + a * b) for a, _ in ref for b, _ in other):
        return False                # (over Q, 1 + rho rho' > 0: a zero is a bad prime)
    return pairings(ref, other, y, F.zero, F) == [tuple(range(len(ref)))]


def _same_field(f, F) -> bool:
    """The same arithmetic: the same object, or two prime fields F_p with the same p (the
    tests use + - * / and roots only, which depend on p alone)."""
    if f is F:
        return True
    p = getattr(F, "p", None)
    return p is not None and getattr(f, "p", None) == p and f.name == F.name == "modular"


def _holds(test, data, K, memo=None) -> bool:
    """``test(data, K)``; over Q decided modulo a prime instead (the analysis primes, the
    first whose reduction exists): uniqueness modulo p implies uniqueness over Q
    (docs/explanation/efficient-plan.md, "Fewer samples once v is known": two rational
    solutions reduce to two solutions, or to a repeated root of both resultants, modulo p),
    and the rationals here -- powers b^(Ds) of thousands of bits -- make the test slow in Q."""
    fields = analysis_fields(K) if K.is_rational else [K]
    for F in fields:
        if F is K:
            conv = (lambda x: x)
        else:
            conv = F
        try:
            mapped = _map(data, conv)
        except (ExactLearnError, ArithmeticError, ValueError, ZeroDivisionError):
            continue                # a denominator divisible by p: the next prime
        try:
            return test(mapped, F, memo) if test is _only_poles else test(mapped, F)
        except (ExactLearnError, ArithmeticError, ValueError, ZeroDivisionError):
            return False
    return False


def _map(x, conv):
    if isinstance(x, (list, tuple)):
        return type(x)(_map(y, conv) for y in x)
    return conv(x)
