"""Analysis of the efficient plan: V first, labels from v, CUR for low rank (docs: explanation/efficient-plan.md).

:func:`run_efficient` asks an :class:`~exactlearn.strategies.efficient.plan.EfficientPlan`,
analyses it and certifies the result (docs: explanation/algorithm.md#what-a-failure-means: certified or
an explicit failure); :func:`exactlearn.learn` calls it for ``plan="efficient"``.
The steps, reusing the paper learner's parts:

1. **V** from the d single-token queries: V·x_i = f((x_i)), V = X^{-T} (f((x_i)))_i.
2. **Fit each family** from k = 0 (V·x), k = 1..2H−1 and the limit V·a
   (:func:`~exactlearn.strategies.efficient.lean.poles_through_limit`: :func:`~exactlearn.pipeline.interpolate.cauchy_interpolate`
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

**Lean sampling** (issue 23; the default for the full plan over the modular and rational
fields, :func:`~exactlearn.strategies.efficient.lean.analyse_lean`): the families whose c-values the group of x_1 has given are
asked at fewer samples (:mod:`~exactlearn.strategies.efficient.known_c`); a family whose
samples do not determine it is completed (counted, a ``samples`` fallback).

7. **Certificate** (:mod:`~exactlearn.strategies.efficient.certificate`): *unique* when H
   heads come out with every label tied
   (:func:`~exactlearn.strategies.efficient.certificate.unique_on_plan`: no other model with
   at most H heads reproduces the observations), else *by checks*: further check configurations
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
('certified', True, 35, 'efficient', [])
>>> [r["queries"] for r in res.multimodular["primes"]]      # the count holds per prime
[35, 35]
"""

from __future__ import annotations

from exactlearn.algebra import linalg
from exactlearn.fields.base import ExactnessError
from exactlearn.pipeline.analysis import over_analysis_fields
from exactlearn.pipeline.ask import AskOnce
from exactlearn.pipeline.certify import CertificateError, certify
from exactlearn.pipeline.match import Exact, PoleCounts, label_heads
from exactlearn.progress import current
from exactlearn.strategies.efficient.certificate import enough_checks
from exactlearn.strategies.efficient.lean import (LeanIncomplete, PlanReader,  # noqa: F401
                                                 analyse_lean, completed_fallbacks,
                                                 poles_through_limit)
from exactlearn.strategies.efficient.plan import skeleton

# the names this module had before its split stay importable from here
from exactlearn.strategies.efficient.certificate import (miss_bound,  # noqa: F401
                                                         unique_on_plan)


class _CoreSingular(Exception):
    """The r x r core of some head's skeleton is singular (rank plan)."""


def run_efficient(plan, ask, K, observations, trace=None, attempts: int = 1) -> tuple:
    """Ask ``plan`` through ``ask``, analyse it in ``K`` and certify.

    ``observations()`` returns every (tokens, value) observed so far in this
    attempt (the certificate covers all of them).  Returns (canonical heads,
    number of certified observations) and leaves the fallbacks in
    ``plan.fallbacks`` (and ``plan.name = "efficient"`` after a rank fallback),
    the certificate's kind in ``plan.certificate`` and its miss bound in
    ``plan.miss_bound`` (:func:`~exactlearn.strategies.efficient.certificate.miss_bound`: more check configurations are asked,
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
    plan.lean_reasons = set()
    plan.known_c_passed = []        # (field, values, c-values) whose poles_known_c test passed
    try:
        while True:
            try:
                heads, matching, n_cert = _analyse_and_certify(plan, values, K, full, observations, trace)
                checks = enough_checks(plan, values, K, heads, full, rank_plan, observations, attempts)
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
                plan.fallbacks = (dropped + ([rank_fallback] if rank_fallback else []) + completed_fallbacks(plan, values)
                                  + matching + extra)
                return heads, n_cert
            full = True
            off = plan.d * plan.d - len(skeleton(plan.d, plan.rank))
            rank_fallback = {"kind": "rank", "reason": reason + "; asked the configurations off the "
                             "skeleton (the full efficient plan)", "configs": off,
                             "queries": off * plan.samples}
            plan.name = "efficient"
    except Exception:
        # a failed run reports what it asked beyond the plan too (the count is complete
        # either way: every query is in ``queries``)
        plan.fallbacks = ([rank_fallback] if rank_fallback else []) + completed_fallbacks(plan, values)
        raise


def _analyse_and_certify(plan, values, K, full, observations, trace) -> tuple:
    """Analyse in K, or in each of analysis_fields(K) in turn (the rational
    field's multi-modular method, as the paper learner does), certify over K."""
    def analyse_and_certify(A):
        heads, matching = _analyse(plan, values, A, K, full, trace)
        return heads, matching, certify(heads, plan.d, observations(), K)

    return over_analysis_fields(K, analyse_and_certify, trace)


def _analyse(plan, values, A, K, full: bool, trace) -> tuple:
    """Steps 1-5 of the module docstring in the field A: (canonical heads, matching fallbacks).

    A lean plan (:meth:`~exactlearn.strategies.efficient.plan.EfficientPlan.samples_of`)
    is analysed by :func:`~exactlearn.strategies.efficient.lean.analyse_lean`; where that cannot go on (fewer poles than H,
    coinciding c-values, a pairing or a c-value label that is not unique) every family
    is completed to 2H − 1 samples -- asked here, counted, reported as a ``samples``
    fallback -- and analysed as below."""
    known: dict = {}
    if plan.lean and full:
        try:
            return analyse_lean(plan, values, A, K, trace)
        except LeanIncomplete as exc:
            known = exc.known
            plan.lean_reasons.add(f"{exc}: {'those' if known else 'every'} famil{'ies' if known else 'y'} "
                                  f"completed to 2H - 1 = {plan.samples} samples")
    d, H, ns = plan.d, plan.H, plan.samples
    P = A.param
    # 1. V from the single tokens (x_i); 2. a family's poles (lean.PlanReader)
    read = PlanReader(plan, values, A, K, known)
    fit = read.fit

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
        logs = _completed(plan, logs, P)
    heads = read.heads(logs, cs, lab, P, trace)
    matching = []
    if used:
        matching.append({
            "kind": "matching",
            "reason": (f"the heads' c-values coincide at e_j for j in {sorted(j + 1 for j in coincide)} "
                       f"(equal v_h.e_j, e.g. equal v): those configurations are labelled by the "
                       f"paper's matching (products of rho in the field)"),
            "configs": len(used), "queries": len(used) * ns})
    return heads, matching


def _completed(plan, logs, P):
    """The heads' completed scores (:func:`_cur`) in order.  Over Q every head's core is
    checked first (the same failure, in the same order, as completing them all), and then
    each head is completed only when the solve asks for it, so that one head's d² scores
    are held at a time, not all of them (MiniLM's 12 heads at d = 384: about 45 MB each;
    docs/explanation/performance.md)."""
    if not getattr(P, "is_rational", False):
        return [_cur(plan, L, P, h) for h, L in enumerate(logs)]
    cores = [_core(plan, L, h) for h, L in enumerate(logs)]
    return (_cur(plan, L, P, h, U) for h, (L, U) in enumerate(zip(logs, cores)))


def _core(plan, L, h):
    """Head h's r x r core U = M[:r, :r] as a python-flint ``fmpq_mat``; raises
    :class:`_CoreSingular` when it is singular."""
    import flint
    r = plan.rank
    Uq = flint.fmpq_mat([[flint.fmpq(int(L[(a, b)].numerator), int(L[(a, b)].denominator))
                          for a in range(r)] for b in range(r)])
    if Uq.rank() < r:
        raise _CoreSingular(f"head {h + 1}: the {r} x {r} core of its skeleton is singular "
                            f"(rank below {r}, or an unlucky draw)")
    return Uq


def _cur(plan, L, P, h, core=None) -> dict:
    """All d² scores M[j][i] = L[(i, j)] of a rank-≤ r head from its skeleton:
    M = C U⁻¹ R with C = M[:, :r], U = M[:r, :r], R = M[:r, :] (over Q ``core``: U from
    :func:`_core`, already checked)."""
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
        Uq = core if core is not None else _core(plan, L, h)
        M = fq(C) * Uq.solve(fq(R))              # C U^-1 R: the same exact matrix
        return {(i, j): P(mpq(int(M[j, i].p), int(M[j, i].q))) for i in range(d) for j in range(d)}
    try:
        Uinv = linalg.inverse(U, P)
    except linalg.SingularMatrix:
        raise _CoreSingular(f"head {h + 1}: the {r} x {r} core of its skeleton is singular "
                            f"(rank below {r}, or an unlucky draw)") from None
    M = linalg.matmul(linalg.matmul(C, Uinv, P), R, P)
    return {(i, j): M[j][i] for i in range(d) for j in range(d)}
