"""The efficient query plan as a value (docs: explanation/efficient-plan.md): fewer queries, still exact.

The paper's plan (:mod:`exactlearn.pipeline.plan`) samples every configuration (x, e) at
k = 1..2H and spends half of its configurations on matching heads.  This plan
keeps the paper's configurations (x_i, e_j) but asks less of each:

* **V first.** The d single-token queries (x_i) give V·x_i for every i, so V is
  known before any family is analysed (a single token attends only to itself:
  f((x)) = V·x for every attention model).  Every family then has its k = 0
  value V·x *and* its limit V·a = lim_k f(q_k): 2H − 1 samples k = 1..2H−1 fix
  the rational function of type (H, H) (:func:`exactlearn.strategies.efficient.lean.poles_through_limit`).
* **Labels from v.** Only the group of x_1 is matched (the paper's
  ``within`` configurations (x_1, e_1 + e_j), j ≥ 2).  That labels the v_h;
  afterwards the c-values c_h = −v_h·e_j label the poles of every other
  configuration (x_i, e_j).  Where two heads' c-values at e_j coincide (e.g.
  equal v) the learner falls back to the paper's matching for that configuration:
  the ``reserve`` configurations (x_1 + x_i, e_1) and (x_i, e_1 + e_j) below,
  asked only when needed and reported in ``plan_fallbacks``.
* **Lean sampling** (issue 23, the default for the full plan; ``lean=False`` turns it
  off): once the group of x_1 has given every c_h(e_j), a basis configuration
  (x_i, e_j), i ≥ 2, is asked at k = 1..2H−2 for H ≥ 3
  (:func:`~exactlearn.strategies.efficient.known_c.samples_basis`), and a matching
  configuration (x_1, e_1 + e_j) at k = 1 alone for 2 ≤ H ≤ 6
  (:func:`~exactlearn.strategies.efficient.known_c.samples_within`).  Where those
  samples do not pin the answer down the learner asks the rest (a ``samples``
  fallback, counted).
* **H = 1.** No matching at all, and 2H − 1 = 1 sample per configuration.
* **Rank r** (``rank=r``, a promise that every canonical M_h = Eᵀ W_h X has
  rank ≤ r): only the skeleton -- configurations (x_i, e_j) with i < r or j < r,
  d² − (d − r)² of them -- is asked; M_h = C U⁻¹ R (CUR) needs the r × r core U
  invertible, otherwise the learner asks the rest (a reported fallback).
* **Check configurations.** Random fresh configurations (x', e'), sampled like the
  others and never used by the analysis: the certificate must reproduce them.
  One for the full plan; for a rank plan as many as make the miss bound ≤ 2^−40
  (:func:`rank_checks`).  A certificate is either *unique* -- no other model with
  at most H heads reproduces the observations (checked exactly on the learned
  heads), miss bound 0 -- or rests on the checks: each misses a wrong model with
  probability at most :func:`check_miss_bound`, and the learner asks further
  checks (drawn from ``check_seed``, counted, a ``checks`` fallback) until the
  bound is ≤ 2^−40, or fails explicitly (:class:`RangeTooSmall`) when the range is
  too small for that (docs/explanation/efficient-plan.md).

The count is read off the plan (d singles, then the samples of each asked configuration:
2H − 1, or fewer where lean)::

    efficient_count(d, H)          = d + (2H−1)(d + 1) + (d − 1) n_w + d(d − 1) n_b     (lean)
                                   = d² + d + 1                 (H = 1)
        with n_b = 2H − 2 for H ≥ 3 (2H − 1 for H ≤ 2), n_w = 1 for 2 ≤ H ≤ 6 (2H − 1 above)
    efficient_count(d, H, lean=False) = d + (2H−1)(d² + [H ≥ 2](d − 1) + 1)
                                   = 2Hd² + 2Hd − d²            (H ≥ 2)
    efficient_count(d, H, rank=r, checks=n) = d + (2H−1)(d² − (d−r)² + [H ≥ 2](d−1) + n)

>>> p = efficient_plan([[1, 0], [0, 1]], [[1, 1], [0, 1]], H=2, checks=[((1, 2), (3, -1))])
>>> p.name, p.count, p.count == efficient_count(2, 2), efficient_count(3, 1), efficient_count(3, 2)
('efficient', 18, True, 13, 35)
>>> efficient_count(3, 2, lean=False), efficient_count(8, 4), efficient_count(8, 4, lean=False)
(39, 414, 512)
>>> efficient_count(6, 2, rank=1, checks=2), paper_count(6, 2)
(60, 285)
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from exactlearn.errors import LearningFailure
from exactlearn.pipeline.plan import (Config, Plan, Query, draw_matrix, paper_count, share_tokens,
                                     vector_sum, within_directions)
from exactlearn.strategies.efficient.known_c import samples_basis, samples_within

__all__ = ["EfficientPlan", "efficient_plan", "draw_efficient_plan", "efficient_count",
           "check_miss_bound", "checks_needed", "min_range", "rank_checks", "RangeTooSmall", "prior_count",
           "paper_count", "MISS_TARGET_BITS", "MAX_CHECK_MISS"]

#: No efficient-plan answer is certified unless the probability that it is wrong (over the
#: check configurations; 0 for a unique certificate) is at most 2^-MISS_TARGET_BITS.
MISS_TARGET_BITS = 40


def prior_count(d: int) -> int:
    """d² + d: the single-head count of the prior work (arXiv:2601.16873)."""
    return d * d + d


def samples_per_config(H: int) -> int:
    """2H − 1: k = 1..2H−1 (k = 0 is V·x, the limit is V·a, both known)."""
    return 2 * H - 1


def skeleton(d: int, rank: int | None) -> list:
    """The (i, j) (0-based: final token x_i, direction e_j) asked as ``basis``
    configurations: all d² of them, or those with i < r or j < r for rank r."""
    r = d if rank is None else min(rank, d)
    return [(i, j) for i in range(d) for j in range(d) if i < r or j < r]


def efficient_count(d: int, H: int, rank: int | None = None, checks: int = 1, lean: bool = True) -> int:
    """Queries of the efficient plan before any fallback (see the module docstring);
    ``lean=False``: the plan with 2H − 1 samples for every configuration (before issue 23).
    A rank plan is never lean."""
    within = d - 1 if H >= 2 else 0
    if rank is None and lean:
        n = samples_per_config(H)
        return d + n * (d + checks) + within * samples_within(H) + d * (d - 1) * samples_basis(H)
    return d + samples_per_config(H) * (len(skeleton(d, rank)) + within + checks)


def check_miss_bound(H: int, x_range: int, e_range: int | None = None, learned: int | None = None) -> float:
    """Bound on the probability that one random check configuration misses a wrong model.

    The check (x', e') has entries uniform on [-x_range, x_range] and [-e_range, e_range],
    drawn independently of the learned heads (docs/explanation/efficient-plan.md, "When a
    certificate can miss", has the proof).  Let the learned canonical heads
    (``learned`` of them, default H) differ from the true ones (at most H).  Both models
    reproduce the single tokens, so they share V; if they also reproduce the check family
    at k = 1..2H−1 they agree as rational functions of k.  With A_1..A_m (m ≤ H + learned)
    the distinct W's of either model and u_t the true v minus the learned v at A_t, pick a
    t0 with u_t0 ≠ 0: agreement forces u_t0·e' = 0 or e'ᵀ(A_t − A_t0)x' = 0 for one of the
    other m − 1 matrices.  By Schwartz–Zippel on the grids (s_x = 2 x_range + 1 values per
    coordinate of x', s_e = 2 e_range + 1 of e') that is at most

        1/s_e + (m − 1) (1/s_x + (1 − 1/s_x)/s_e).

    >>> check_miss_bound(1, 1)                         # R = 1, one head: 1/3 + 5/9
    0.8888888888888888
    >>> check_miss_bound(2, 1) == 1.0, check_miss_bound(2, 1, learned=1) < 1
    (True, False)
    >>> check_miss_bound(2, 2 ** 32) < 2 ** -30
    True
    """
    e_range = x_range if e_range is None else e_range
    learned = H if learned is None else learned
    s_x, s_e = 2 * x_range + 1, 2 * e_range + 1
    pair = 1 / s_x + (1 - 1 / s_x) / s_e
    return min(1.0, 1 / s_e + (H + learned - 1) * pair)


#: A check misses with probability at most 1/2 before more checks are drawn; above it the
#: range is too small to certify with a reasonable number of checks (at most about
#: MISS_TARGET_BITS of them).
MAX_CHECK_MISS = 0.5


class RangeTooSmall(LearningFailure, ValueError):
    """The query range cannot make the check configurations' miss bound small: an explicit
    failure of the run (a ValueError too, for callers of :func:`rank_checks`)."""

    kind = "query range too small to certify"
    bound_hint = False         # not a symptom of too many heads (exactlearn.api)


def checks_needed(per_check: float, target_bits: int = MISS_TARGET_BITS, candidates: int = 1) -> int:
    """How many independent check configurations, each missing a wrong model with probability
    at most ``per_check``, make ``candidates`` x per_check^n <= 2^-target_bits.

    Raises :class:`RangeTooSmall` (a ValueError) when ``per_check`` > 1/2 (MAX_CHECK_MISS).

    >>> checks_needed(2 ** -31), checks_needed(2 ** -31, candidates=2), checks_needed(0.5)
    (2, 2, 40)
    """
    if per_check > MAX_CHECK_MISS:
        raise RangeTooSmall(
            f"one check configuration misses a wrong model with probability up to {per_check:.3g} "
            f"> {MAX_CHECK_MISS}: the query range is too small (see min_range)")
    if per_check <= 0:
        return 1
    need = target_bits + math.log2(candidates)
    return max(1, math.ceil(need / -math.log2(per_check) - 1e-12))


def min_range(H: int, learned: int | None = None) -> int:
    """The smallest query range R (x and e alike) at which one check misses with
    probability at most MAX_CHECK_MISS (:func:`check_miss_bound`).

    >>> min_range(1), min_range(2), min_range(2, learned=1), min_range(3)
    (3, 7, 5, 11)
    """
    R = 1
    while check_miss_bound(H, R, R, learned) > MAX_CHECK_MISS:
        R += 1
    return R


def rank_checks(H: int, x_range: int, e_range: int | None = None,
                target_bits: int = MISS_TARGET_BITS) -> int:
    """Number of independent check configurations that push the miss bound of a rank plan
    below 2^-target_bits, counting both candidates it may certify (the rank reconstruction
    and, after a refuted promise, the full plan's); ValueError (:class:`RangeTooSmall`)
    when the ranges are too small."""
    try:
        return checks_needed(check_miss_bound(H, x_range, e_range), target_bits, candidates=2)
    except RangeTooSmall:
        raise RangeTooSmall(
            f"the query range {x_range} is too small to check a rank promise: one check "
            f"configuration misses a wrong model with probability up to "
            f"{check_miss_bound(H, x_range, e_range):.3g} > {MAX_CHECK_MISS}; use query_range >= "
            f"{min_range(H)} (--range {min_range(H)})") from None


@dataclass
class EfficientPlan(Plan):
    """A :class:`~exactlearn.pipeline.plan.Plan` whose ``queries`` are the efficient plan's.

    ``configs`` holds, in this order: the asked configurations (kinds ``basis``
    on the skeleton and ``within`` for the group of x_1), the ``check``
    configurations, and the ``reserve`` ones (kinds ``across`` and ``within``
    with i ≥ 1, and -- for a rank plan -- the ``basis`` configurations off the
    skeleton) that are asked only on a fallback.  ``queries`` start with the d
    single tokens (x_i) (Query(basis (i, 0), k = 0)).  ``fallbacks`` is filled
    by the learner: one dict per fallback, with its reason and extra queries.
    """

    rank: int | None = None
    n_asked: int = 0           # configs[:n_asked] are asked (including the checks)
    checks: tuple = ()         # indices of the check configurations
    miss_bound: float = 1.0    # bound on P(a wrong certified answer) over the checks (see describe)
    fallbacks: list = field(default_factory=list)
    rank_dropped: str | None = None    # why a rank promise was not used (see draw_efficient_plan)
    x_range: int | None = None         # the checks' ranges (None: unknown, no further checks drawn)
    e_range: int | None = None
    check_seed: int | None = None      # seeds the further check configurations (the same in every run)
    certificate: str | None = None     # "unique" or "checks" once certified (see the learner)
    extra_checks: list = field(default_factory=list)   # further check configurations, in order
    check_reason: str = ""             # why they were asked (the ``checks`` fallback's reason)
    extra_queries: int = 0             # the queries they asked (a query asked before is not asked again)
    lean: bool = False                 # fewer samples where the c-values are known (samples_of)
    lean_reasons: set = field(default_factory=set)     # why the learner asked beyond samples_of
    known_c_passed: list = field(default_factory=list)  # the learner's passed tests (the certificate reuses)

    @property
    def samples(self) -> int:
        """2H − 1: the samples k = 1..2H−1 that determine a family on their own."""
        return samples_per_config(self.H)

    def unlean(self) -> None:
        """Make this plan the one before lean sampling (every configuration at 2H − 1
        samples), before anything is asked: the learner does so over a field whose exact
        arithmetic makes the lean tests too slow (the symbolic field, Q(T))."""
        self.lean = False
        self.queries = _queries(self)

    def samples_of(self, c) -> int:
        """The samples k = 1..n the plan asks of configuration ``c``: in a lean plan
        :func:`~exactlearn.strategies.efficient.known_c.samples_basis` for a basis
        configuration (x_i, e_j) with i ≥ 2 and
        :func:`~exactlearn.strategies.efficient.known_c.samples_within` for a matching
        configuration (x_1, e_1 + e_j); 2H − 1 otherwise (and for every configuration of a
        plan that is not lean, and for the check configurations)."""
        if self.lean:
            if c.kind == "basis" and c.i > 0:
                return samples_basis(self.H)
            if c.kind == "within" and c.i == 0:
                return samples_within(self.H)
        return self.samples

    @property
    def asked(self) -> list:
        return self.configs[:self.n_asked]

    def more_checks(self, n: int) -> list:
        """The first ``n`` further check configurations (x', e'): uniform on the plan's
        ranges, from ``check_seed`` -- drawn before anything is asked, so independent of
        every answer, and the same in every run of the plan (each prime of the
        multi-modular method asks the same ones)."""
        if self.check_seed is None or self.x_range is None:
            raise RangeTooSmall("this plan has no ranges to draw further check configurations from")
        rng = random.Random(self.check_seed)
        R_x, R_e = self.x_range, self.e_range if self.e_range is not None else self.x_range
        return [Config("check", len(self.checks) + t, len(self.checks) + t,
                       tuple(rng.randint(-R_x, R_x) for _ in range(self.d)),
                       tuple(rng.randint(-R_e, R_e) for _ in range(self.d))) for t in range(n)]

    def describe(self) -> dict:
        """JSON-able summary (the learner reports it as ``plan_detail``).

        ``check_miss_bound``: an upper bound on the probability that the certified answer is
        wrong although the box keeps the promise (at most H heads; rank <= r), over the
        check configurations' draw: 0.0 for a ``unique`` certificate (no other model with
        at most H heads reproduces the observations), else the checks' Schwartz-Zippel
        bound (docs/explanation/efficient-plan.md).  ``check_miss_bound_log2`` is its log2
        (None for 0), ``certificate`` how it was certified."""
        b = self.miss_bound
        return {"rank": self.rank, "rank_dropped": self.rank_dropped, "samples_per_config": self.samples,
                "single_token_queries": self.d, "asked_configs": self.n_asked,
                "check_configs": len(self.checks) + len(self.extra_checks),
                "check_miss_bound": float(b),
                "check_miss_bound_log2": None if b <= 0 else round(math.log2(b), 2),
                "certificate": self.certificate,
                "planned_queries": self.count, "paper_queries": paper_count(self.d, self.H),
                "lean": self.lean, "samples_basis": self.samples_of(Config("basis", 1, 0, (), ())),
                "samples_within": self.samples_of(Config("within", 0, 1, (), ())),
                "parameter_count": self.H * prior_count(self.d)}


def efficient_plan(X, E, H: int, rank: int | None = None, checks=(), miss_bound: float = 1.0,
                   lean: bool = True) -> EfficientPlan:
    """The efficient plan for columns X, E, head bound H, optional rank promise r,
    and check configurations ``checks`` (a list of (x', e')); ``lean`` (the default; a
    rank plan never is) asks fewer samples where the c-values will be known
    (:meth:`EfficientPlan.samples_of`)."""
    X = tuple(tuple(x) for x in X)
    E = tuple(tuple(e) for e in E)
    d = len(X)
    if H < 1:
        raise ValueError("the head bound H must be at least 1")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
        raise ValueError(f"rank must be a positive integer, got {rank!r}")
    if rank is not None and rank >= d:
        rank = None                        # every d x d matrix has rank <= d: no promise
    sk = skeleton(d, rank)
    on = set(sk)
    within = within_directions(E)           # one tuple per direction, shared
    asked = [Config("basis", i, j, X[i], E[j]) for (i, j) in sk if i == 0]
    if H >= 2:
        asked += [Config("within", 0, j, X[0], within[j]) for j in range(1, d)]
    asked += [Config("basis", i, j, X[i], E[j]) for (i, j) in sk if i > 0]
    first_check = len(asked)
    asked += [Config("check", n, n, tuple(x), tuple(e)) for n, (x, e) in enumerate(checks)]
    reserve = [Config("across", i, 0, vector_sum(X[0], X[i]), E[0]) for i in range(1, d)]
    reserve += [Config("within", i, j, X[i], within[j]) for i in range(1, d) for j in range(1, d)]
    reserve += [Config("basis", i, j, X[i], E[j]) for i in range(d) for j in range(d) if (i, j) not in on]
    share_tokens(asked)
    configs = asked + reserve
    name = "efficient" if rank is None else f"efficient rank={rank}"
    plan = EfficientPlan(d, H, X, E, configs, [], name, rank=rank, n_asked=len(asked),
                         checks=tuple(range(first_check, len(asked))), miss_bound=miss_bound,
                         lean=lean and rank is None and H >= 2)
    plan.queries = _queries(plan)
    return plan


def _queries(plan) -> list:
    """The d single tokens, then k = 1..samples_of(c) for each asked configuration c."""
    queries = [Query(plan.index("basis", i, 0), 0) for i in range(plan.d)]
    for n in range(plan.n_asked):
        queries.extend(Query(n, k) for k in range(1, plan.samples_of(plan.configs[n]) + 1))
    return queries


def draw_efficient_plan(d: int, H: int, rng: random.Random, x_range: int, e_range: int | None = None,
                        rank: int | None = None, lean: bool = True) -> EfficientPlan:
    """Random X, E (as :func:`~exactlearn.pipeline.plan.draw_paper_plan`) and random check
    configurations with entries in the same ranges: one for the full plan, and
    :func:`rank_checks` of them for a rank plan; and a seed for further checks, which the
    learner asks when its certificate needs them (:func:`check_miss_bound`).

    A rank promise is not used (``rank_dropped`` says why, and the learner
    reports it as a fallback) when the ranges are too small to check it, or
    when its checks would make it no cheaper than the full plan."""
    R_e = e_range if e_range is not None else x_range
    X = draw_matrix(d, rng, x_range)
    E = draw_matrix(d, rng, R_e)
    dropped = None
    n = 1
    if rank is not None and rank < d:
        try:
            n = rank_checks(H, x_range, R_e)
            if efficient_count(d, H, rank, n) >= efficient_count(d, H):
                dropped = (f"the rank-{rank} plan needs {n} check configurations at this query range, "
                           f"so it would not be cheaper than the full plan")
        except ValueError as exc:
            dropped = str(exc)
        if dropped is not None:
            rank, n = None, 1
    checks = [(tuple(rng.randint(-x_range, x_range) for _ in range(d)),
               tuple(rng.randint(-R_e, R_e) for _ in range(d))) for _ in range(n)]
    plan = efficient_plan(X, E, H, rank, checks, 1.0, lean)
    plan.rank_dropped = dropped
    plan.x_range, plan.e_range, plan.check_seed = x_range, R_e, rng.randrange(2 ** 63)
    return plan
