"""The efficient query plan as a value (docs: explanation/efficient-plan.md): fewer queries, still exact.

The paper's plan (:mod:`exactlearn.pipeline.plan`) samples every configuration (x, e) at
k = 1..2H and spends half of its configurations on matching heads.  This plan
keeps the paper's configurations (x_i, e_j) but asks less of each:

* **V first.** The d single-token queries (x_i) give V·x_i for every i, so V is
  known before any family is analysed (a single token attends only to itself:
  f((x)) = V·x for every attention model).  Every family then has its k = 0
  value V·x *and* its limit V·a = lim_k f(q_k): 2H − 1 samples k = 1..2H−1 fix
  the rational function of type (H, H) (:func:`exactlearn.strategies.efficient.learn.poles_through_limit`).
* **Labels from v.** Only the group of x_1 is matched (the paper's
  ``within`` configurations (x_1, e_1 + e_j), j ≥ 2).  That labels the v_h;
  afterwards the c-values c_h = −v_h·e_j label the poles of every other
  configuration (x_i, e_j).  Where two heads' c-values at e_j coincide (e.g.
  equal v) the learner falls back to the paper's matching for that configuration:
  the ``reserve`` configurations (x_1 + x_i, e_1) and (x_i, e_1 + e_j) below,
  asked only when needed and reported in ``plan_fallbacks``.
* **H = 1.** No matching at all, and 2H − 1 = 1 sample per configuration.
* **Rank r** (``rank=r``, a promise that every canonical M_h = Eᵀ W_h X has
  rank ≤ r): only the skeleton -- configurations (x_i, e_j) with i < r or j < r,
  d² − (d − r)² of them -- is asked; M_h = C U⁻¹ R (CUR) needs the r × r core U
  invertible, otherwise the learner asks the rest (a reported fallback).
* **Check configurations.** Random fresh configurations (x', e'), sampled like the
  others and never used by the analysis: the certificate must reproduce them.
  They are what keeps a wrong promise from being certified (see
  :func:`check_miss_bound`).  One for the full plan; for a rank plan as many as
  make the miss bound ≤ 2^−40.

The count is read off the plan (d singles, then 2H − 1 samples per asked
configuration)::

    efficient_count(d, H)          = d + (2H−1)(d² + [H ≥ 2](d − 1) + 1)
                                   = d² + d + 1                 (H = 1)
                                   = 2Hd² + 2Hd − d²            (H ≥ 2)
    efficient_count(d, H, rank=r, checks=n) = d + (2H−1)(d² − (d−r)² + [H ≥ 2](d−1) + n)

>>> p = efficient_plan([[1, 0], [0, 1]], [[1, 1], [0, 1]], H=2, checks=[((1, 2), (3, -1))])
>>> p.name, p.count, p.count == efficient_count(2, 2), efficient_count(3, 1), efficient_count(3, 2)
('efficient', 20, True, 13, 39)
>>> efficient_count(6, 2, rank=1, checks=2), paper_count(6, 2)
(60, 285)
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from exactlearn.pipeline.plan import Config, Plan, Query, vector_sum, draw_matrix, paper_count

__all__ = ["EfficientPlan", "efficient_plan", "draw_efficient_plan", "efficient_count",
           "check_miss_bound", "rank_checks", "prior_count", "paper_count", "MISS_TARGET_BITS"]

#: A rank plan asks enough check configurations that a false rank promise is
#: certified with probability at most 2^-MISS_TARGET_BITS (Schwartz-Zippel bound).
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


def efficient_count(d: int, H: int, rank: int | None = None, checks: int = 1) -> int:
    """Queries of the efficient plan before any fallback (see the module docstring)."""
    within = d - 1 if H >= 2 else 0
    return d + samples_per_config(H) * (len(skeleton(d, rank)) + within + checks)


def check_miss_bound(H: int, x_range: int, e_range: int | None = None) -> float:
    """Probability bound that one random check configuration misses a wrong model.

    Let the recovered canonical heads differ from the true ones (both at most H
    heads).  If every observed value of the check family (x', e') -- k = 1..2H−1,
    together with the known k = 0 value V·x' and limit V·a' -- is reproduced, the
    two rational functions of k agree (numerator of degree ≤ 2H−1 with 2H zeros),
    so their poles and coefficients agree.  Unless one of at most 2H² + H
    polynomials of degree ≤ 2 in the entries of (x', e') vanishes -- e'ᵀ(A − B)x'
    for two distinct matrices among the ≤ 2H true and recovered W's, u·e' for a
    nonzero v or difference of v's -- that forces the two sets of heads to be
    equal.  x', e' are uniform on integer boxes of half-widths x_range, e_range,
    independent of everything else, so by Schwartz-Zippel each vanishes with
    probability ≤ 1/(2R_x+1) + 1/(2R_e+1).
    """
    e_range = x_range if e_range is None else e_range
    per = 1 / (2 * x_range + 1) + 1 / (2 * e_range + 1)
    return min(1.0, (2 * H * H + H) * per)


def rank_checks(H: int, x_range: int, e_range: int | None = None,
                target_bits: int = MISS_TARGET_BITS) -> int:
    """Number of independent check configurations that push the miss bound of a
    rank plan below 2^-target_bits; ValueError when the ranges are too small."""
    b = check_miss_bound(H, x_range, e_range)
    if b >= 0.5:
        raise ValueError(f"the query range is too small to check a rank promise (one check "
                         f"misses a wrong model with probability up to {b:.3g}): use a larger --range")
    return max(1, math.ceil(target_bits / -math.log2(b)))


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
    miss_bound: float = 1.0    # check_miss_bound ** len(checks)
    fallbacks: list = field(default_factory=list)
    rank_dropped: str | None = None    # why a rank promise was not used (see draw_efficient_plan)

    @property
    def samples(self) -> int:
        return samples_per_config(self.H)

    @property
    def asked(self) -> list:
        return self.configs[:self.n_asked]

    def describe(self) -> dict:
        """JSON-able summary (the learner reports it as ``plan_detail``)."""
        return {"rank": self.rank, "rank_dropped": self.rank_dropped, "samples_per_config": self.samples,
                "single_token_queries": self.d, "asked_configs": self.n_asked,
                "check_configs": len(self.checks), "check_miss_bound": float(f"{self.miss_bound:.3g}"),
                "planned_queries": self.count, "paper_queries": paper_count(self.d, self.H)}


def efficient_plan(X, E, H: int, rank: int | None = None, checks=(), miss_bound: float = 1.0) -> EfficientPlan:
    """The efficient plan for columns X, E, head bound H, optional rank promise r,
    and check configurations ``checks`` (a list of (x', e'))."""
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
    asked = [Config("basis", i, j, X[i], E[j]) for (i, j) in sk if i == 0]
    if H >= 2:
        asked += [Config("within", 0, j, X[0], vector_sum(E[0], E[j])) for j in range(1, d)]
    asked += [Config("basis", i, j, X[i], E[j]) for (i, j) in sk if i > 0]
    first_check = len(asked)
    asked += [Config("check", n, n, tuple(x), tuple(e)) for n, (x, e) in enumerate(checks)]
    reserve = [Config("across", i, 0, vector_sum(X[0], X[i]), E[0]) for i in range(1, d)]
    reserve += [Config("within", i, j, X[i], vector_sum(E[0], E[j])) for i in range(1, d) for j in range(1, d)]
    reserve += [Config("basis", i, j, X[i], E[j]) for i in range(d) for j in range(d) if (i, j) not in on]
    configs = asked + reserve
    name = "efficient" if rank is None else f"efficient rank={rank}"
    plan = EfficientPlan(d, H, X, E, configs, [], name, rank=rank, n_asked=len(asked),
                         checks=tuple(range(first_check, len(asked))), miss_bound=miss_bound)
    queries = [Query(plan.index("basis", i, 0), 0) for i in range(d)]
    for n in range(len(asked)):
        queries.extend(Query(n, k) for k in range(1, plan.samples + 1))
    plan.queries = queries
    return plan


def draw_efficient_plan(d: int, H: int, rng: random.Random, x_range: int, e_range: int | None = None,
                        rank: int | None = None) -> EfficientPlan:
    """Random X, E (as :func:`~exactlearn.pipeline.plan.draw_paper_plan`) and random check
    configurations with entries in the same ranges: one for the full plan, and
    :func:`rank_checks` of them for a rank plan.

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
    bound = check_miss_bound(H, x_range, R_e) ** n
    plan = efficient_plan(X, E, H, rank, checks, bound)
    plan.rank_dropped = dropped
    return plan
