"""Analysis of the efficient plan: V first, labels from v, CUR for low rank (docs: explanation/efficient-plan.md).

:func:`run_efficient` asks an :class:`~exactlearn.strategies.efficient.plan.EfficientPlan`,
analyses it and certifies the result (docs: explanation/algorithm.md#what-a-failure-means: certified or
an explicit failure); :func:`exactlearn.learn` calls it for ``plan="efficient"``.
The steps, reusing the paper learner's parts:

1. **V** from the d single-token queries: V·x_i = f((x_i)), V = X^{-T} (f((x_i)))_i.
2. **Fit each family** from k = 0 (V·x), k = 1..2H−1 and the limit V·a
   (:func:`poles_through_limit`: :func:`~exactlearn.pipeline.interpolate.cauchy_interpolate`
   and :func:`~exactlearn.pipeline.interpolate.poles` after a change of variable that
   puts k = ∞ at a finite point).
3. **Label the group of x_1** by the paper's matching (configurations
   (x_1, e_1 + e_j)); that gives v_h (:func:`~exactlearn.pipeline.solve.solve_v`).
4. **Label every other configuration by its c-values** c_h = −v_h·e_j.  When two
   heads' c-values at e_j coincide, fall back to the paper's matching for that
   configuration ((x_1 + x_i, e_1) and (x_i, e_1 + e_j)), reported in
   ``plan.fallbacks``.  Either way each c-value must be the head's (c depends on
   e only): a failed check is a detected degenerate draw.  Steps 3 and 4 are the
   one labelling walk of :func:`~exactlearn.pipeline.match.label_heads` with
   ``by_c=True`` and exact equality.
5. **Rank r**: complete each M_h = Eᵀ W_h X from its skeleton as C U⁻¹ R.  A
   singular r × r core U falls back to the full plan (asked then).
6. **Solve** W_h (:func:`~exactlearn.pipeline.solve.solve_W`), canonicalise, and **certify**
   over every observed value (:func:`~exactlearn.pipeline.certify.certify`), including the
   check configurations.  A rank reconstruction the certificate rejects -- a
   false rank promise, caught by the check configurations -- falls back to the
   full plan as well; so does one whose W is not exact in the field.

7. **Certificate** (:func:`miss_bound`): *unique* when H heads come out with every
   label tied (:func:`unique_on_plan`: no other model with at most H heads
   reproduces the observations), else *by checks*: further check configurations
   are asked until the probability that a wrong model passes them is at most
   2^-40, or the run fails explicitly (``RangeTooSmall``) when the range is too
   small for that.

Unlike the paper's plan, the efficient plan's observations need not determine
the model (a head can hide in every configuration it asks: issue 20), which is
what step 7 is for; the check configurations also guard a rank promise (see
:func:`~exactlearn.strategies.efficient.plan.check_miss_bound` and
docs/explanation/efficient-plan.md).

>>> from exactlearn import MultiHeadAttention, Oracle, learn
>>> from exactlearn.fields import Modular
>>> model = MultiHeadAttention([([[1, 0, 2], [0, -1, 1], [1, 1, 0]], [1, 2, 0]),
...                             ([[0, 1, 0], [1, 0, -2], [2, 0, 1]], [-1, 1, 3])])
>>> res = learn(Oracle(model, Modular()), d=3, heads=2, seed=1, plan="efficient")
>>> res.status, res.heads == model.canonical_heads(), res.plan_queries, res.plan, res.plan_fallbacks
('certified', True, 39, 'efficient', [])
>>> [r["queries"] for r in res.multimodular["primes"]]      # the count holds per prime
[39, 39]
"""

from __future__ import annotations

from exactlearn.algebra import linalg
from exactlearn.algebra import polys
from exactlearn.pipeline.certify import CertificateError, certify
from exactlearn.fields.base import ExactnessError
from exactlearn.pipeline.interpolate import InterpolationError, cauchy_interpolate, poles
from exactlearn.pipeline.analysis import over_analysis_fields
from exactlearn.pipeline.ask import AskOnce
from exactlearn.progress import current
from exactlearn.pipeline.match import Exact, PoleCounts, label_heads
from exactlearn.model import Head, canonicalize
from exactlearn.errors import ExactLearnError
from exactlearn.fields.multimodular import analysis_fields
from exactlearn.fields.rational import QQ
from exactlearn.strategies.efficient.plan import (MAX_CHECK_MISS, MISS_TARGET_BITS, RangeTooSmall, check_miss_bound,
                                                  checks_needed, min_range, skeleton)
from exactlearn.pipeline.solve import solve_v, solve_W


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


class _CoreSingular(Exception):
    """The r x r core of some head's skeleton is singular (rank plan)."""


def run_efficient(plan, ask, K, observations, trace=None, attempts: int = 1) -> tuple:
    """Ask ``plan`` through ``ask``, analyse it in ``K`` and certify.

    ``observations()`` returns every (tokens, value) observed so far in this
    attempt (the certificate covers all of them).  Returns (canonical heads,
    number of certified observations) and leaves the fallbacks in
    ``plan.fallbacks`` (and ``plan.name = "efficient"`` after a rank fallback),
    the certificate's kind in ``plan.certificate`` and its miss bound in
    ``plan.miss_bound`` (:func:`miss_bound`: more check configurations are asked,
    and reported as a ``checks`` fallback, until it is at most 2^-40).
    Raises what the paper learner raises on a detected degenerate draw, and
    :class:`RangeTooSmall` when the query range cannot make the bound small.
    ``attempts``: how many attempts (``retries + 1``) the caller may make, each with
    fresh checks; the bound is a union over all of them.
    """
    values = AskOnce(ask)
    current().phase("ask", len(plan.queries))          # progress=
    for q in plan.queries:              # the plan is a value: ask all of it first
        values(plan.tokens(q))
    full = plan.rank is None
    rank_plan = not full
    rank_fallback = None
    plan.extra_checks, plan.extra_queries = [], 0
    while True:
        try:
            heads, matching, n_cert = _analyse_and_certify(plan, values, K, full, observations, trace)
            checks = _enough_checks(plan, values, K, heads, full, rank_plan, observations, attempts)
        except _CoreSingular as exc:
            reason = str(exc)
        except (CertificateError, ExactnessError) as exc:
            if full:
                raise
            why = ("the certificate rejects it on the check configurations"
                   if isinstance(exc, CertificateError) else
                   "its scores are not exact in the field (denominators the scale D does not clear), "
                   "so it cannot reproduce the check configurations")
            reason = f"the rank-{plan.rank} reconstruction is refuted: {why}; not every head has rank <= {plan.rank}"
        else:
            n_cert = checks if checks is not None else n_cert
            dropped = ([{"kind": "rank", "reason": f"rank promise not used: {plan.rank_dropped}",
                         "configs": 0, "queries": 0}] if plan.rank_dropped else [])
            extra = ([{"kind": "checks", "reason": plan.check_reason, "configs": len(plan.extra_checks),
                       "queries": plan.extra_queries}] if plan.extra_checks else [])
            plan.fallbacks = dropped + ([rank_fallback] if rank_fallback else []) + matching + extra
            return heads, n_cert
        full = True
        off = plan.d * plan.d - len(skeleton(plan.d, plan.rank))
        rank_fallback = {"kind": "rank", "reason": reason + "; asked the configurations off the "
                         "skeleton (the full efficient plan)", "configs": off,
                         "queries": off * plan.samples}
        plan.name = "efficient"


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


def _enough_checks(plan, values, K, heads, full, rank_plan, observations, attempts=1):
    """Set ``plan.certificate`` and ``plan.miss_bound`` for certified ``heads``; when the
    bound exceeds 2^-MISS_TARGET_BITS ask further check configurations
    (``plan.more_checks``, counted; the same in every run of the plan), certify them
    too, and return the number of certified observations (None when none were asked).
    Raises :class:`RangeTooSmall` when one check misses with probability above 1/2,
    :class:`CertificateError` when the heads fail a further check."""
    n0 = len(plan.checks)
    seen = values.seen
    asked = [c for c in plan.configs
             if all(tuple(tuple(t) for t in c.tokens(k)) in seen for k in range(1, plan.samples + 1))]
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
    asked = [c for c in (plan.asked if asked is None else asked) if c.kind != "check"]
    cells = {(c.i, c.j) for c in asked if c.kind == "basis"}
    if len(cells) != d * d:
        return False

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
            rho[(c.kind, c.i, c.j)] = [K.exp(score(h, c.e, c.x)) for h in range(H)]
        cval = {}
        for c in asked:
            if c.e not in cval:
                ke = [K(e) for e in c.e]
                cval[c.e] = [-sum((e * y for e, y in zip(ke, v)), K.zero) for v in vs]
    except (ExactLearnError, ArithmeticError, ValueError):
        return False
    def distinct(ys):
        return all(not K.eq(ys[a], ys[b]) for a in range(len(ys)) for b in range(a))

    for c in asked:
        if not distinct(rho[(c.kind, c.i, c.j)]) or any(K.is_zero(y) for y in cval[c.e]):
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

    def products_unique(r1, r2, r):
        return not any(K.eq(r1[h] * r2[g], y) for h in range(H) for g in range(H) if h != g for y in r)

    for c in asked:
        if c.kind == "within":          # (x_i, e_1 + e_j): rho = rho(i, 1) rho(i, j)
            a, b = (c.i, 0), (c.i, c.j)
        elif c.kind == "across":        # (x_1 + x_i, e_j): rho = rho(1, j) rho(i, j)
            a, b = (0, c.j), (c.i, c.j)
        else:
            continue
        if products_unique(rho[("basis",) + a], rho[("basis",) + b], rho[(c.kind, c.i, c.j)]):
            union(a, b)
    return len({find(cell) for cell in cells}) == 1


def _analyse_and_certify(plan, values, K, full, observations, trace) -> tuple:
    """Analyse in K, or in each of analysis_fields(K) in turn (the rational
    field's multi-modular method, as the paper learner does), certify over K."""
    def analyse_and_certify(A):
        heads, matching = _analyse(plan, values, A, K, full, trace)
        return heads, matching, certify(heads, plan.d, observations(), K)

    return over_analysis_fields(K, analyse_and_certify, trace)


def _analyse(plan, values, A, K, full: bool, trace) -> tuple:
    """Steps 1-5 of the module docstring in the field A: (canonical heads, matching fallbacks)."""
    d, H, ns = plan.d, plan.H, plan.samples
    P = A.param
    conv = (lambda y: y) if A is K else A

    def obs(c, k):
        return conv(values(c.tokens(k)))

    def dot(u, x):
        acc = A.zero
        for a, b in zip(u, x):
            acc = acc + a * A(b)
        return acc

    # 1. V from the single tokens (x_i)
    singles = [plan.configs[plan.index("basis", i, 0)] for i in range(d)]
    Xt = [[A(x[r]) for r in range(d)] for x in plan.X]                 # rows x_i^T
    V = linalg.matvec(linalg.inverse(Xt, A), [obs(c, 0) for c in singles], A)

    # 2. fit a family (k = 0 observed for final tokens x_i, else V.x)
    fits: dict = {}

    def fit(n):
        if n not in fits:
            c = plan.configs[n]
            y0 = obs(c, 0) if c.x in plan.X else dot(V, c.x)
            fits[n] = poles_through_limit(y0, [obs(c, k) for k in range(1, ns + 1)], dot(V, c.a), H, A)
        return fits[n]

    counts = PoleCounts(plan, len(fit(plan.index("basis", 0, 0))))

    # 3 and 4. the group of x_1 by the paper's matching through (x_1, e_1 + e_j), which
    # gives v_h; every other configuration by c = -v_h.e_j, or by the paper's matching
    cells = skeleton(d, None if full else plan.rank)
    labels = label_heads(plan, lambda n: counts.check(n, fit(n)), Exact(A), cells,
                         across=lambda i, d: 0, by_c=True)
    lab = labels.cells
    m = len(lab[(0, 0)])
    cs = [[c for _, c in lab[(0, j)]] for j in range(d)]
    used = [n for i, _, n in labels.ties if i > 0]
    coincide = {j for i, j, _ in labels.ties if i > 0}

    # 5. scores (param domain); complete them from the skeleton for a rank plan
    logs = [{(i, j): A.log(lab[(i, j)][h][0]) for i, j in cells} for h in range(m)]
    if not full:
        logs = [_cur(plan, L, P, h) for h, L in enumerate(logs)]
    heads = []
    for h in range(m):
        v = solve_v(plan, [cs[j][h] for j in range(d)], A)
        heads.append(Head(solve_W(plan, logs[h], P), tuple(A.to_param(x) for x in v)))
    if trace is not None:
        trace.clear()
        for n, pl in fits.items():
            c = plan.configs[n]
            trace.append({"config": c, "poles": pl,
                          "labelled": lab.get((c.i, c.j)) if c.kind == "basis" else None})
        trace.append({"V": V})
    matching = []
    if used:
        matching.append({
            "kind": "matching",
            "reason": (f"the heads' c-values coincide at e_j for j in {sorted(j + 1 for j in coincide)} "
                       f"(equal v_h.e_j, e.g. equal v): those configurations are labelled by the "
                       f"paper's matching (products of rho in the field)"),
            "configs": len(used), "queries": len(used) * ns})
    return canonicalize(heads), matching


def _cur(plan, L, P, h) -> dict:
    """All d² scores M[j][i] = L[(i, j)] of a rank-≤ r head from its skeleton:
    M = C U⁻¹ R with C = M[:, :r], U = M[:r, :r], R = M[:r, :]."""
    d, r = plan.d, plan.rank
    C = [[L[(a, j)] for a in range(r)] for j in range(d)]
    U = [[L[(a, b)] for a in range(r)] for b in range(r)]
    R = [[L[(i, b)] for i in range(d)] for b in range(r)]
    if getattr(P, "is_rational", False):        # over Q: python-flint fmpq_mat, in C
        import flint
        from gmpy2 import mpq

        def fq(rows):
            return flint.fmpq_mat([[flint.fmpq(int(x.numerator), int(x.denominator)) for x in row]
                                   for row in rows])
        Uq = fq(U)
        if Uq.rank() < r:
            raise _CoreSingular(f"head {h + 1}: the {r} x {r} core of its skeleton is singular "
                                f"(rank below {r}, or an unlucky draw)")
        M = fq(C) * Uq.solve(fq(R))              # C U^-1 R: the same exact matrix
        return {(i, j): P(mpq(int(M[j, i].p), int(M[j, i].q))) for i in range(d) for j in range(d)}
    try:
        Uinv = linalg.inverse(U, P)
    except linalg.SingularMatrix:
        raise _CoreSingular(f"head {h + 1}: the {r} x {r} core of its skeleton is singular "
                            f"(rank below {r}, or an unlucky draw)") from None
    M = linalg.matmul(linalg.matmul(C, Uinv, P), R, P)
    return {(i, j): M[j][i] for i in range(d) for j in range(d)}
