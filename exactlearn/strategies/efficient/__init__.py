"""The efficient plan over the exact fields: fewer queries, still exact (docs: explanation/efficient-plan.md).

:mod:`~exactlearn.strategies.efficient.plan` draws it and reads its counts off
it; :mod:`~exactlearn.strategies.efficient.learn` analyses it.  This module is
the strategy interface :func:`exactlearn.api.learn` drives.
"""

from __future__ import annotations

from dataclasses import dataclass

from exactlearn.pipeline.certify import verify_fresh
from exactlearn.pipeline.plan import paper_count

# the plan's modules (.plan, .learn and what they import) are imported where they run: a
# paper-plan run imports this package for EfficientDetail only (exactlearn.api.result)

#: The strategy runs over exact fields only.
EXACT = True

#: It asks beyond ``plan.queries`` (fallbacks): its observations are kept.
ASKS_PLAN = False


@dataclass
class EfficientDetail:
    """What the efficient plan adds to a result: its fallbacks and its counts."""

    fallbacks: list
    plan_detail: dict


def new_state():
    """No state across attempts."""
    return None


def plan_count(name, d, H, bias=False, drawn=None) -> int:
    """The drawn plan's own count (it depends on the draw); the paper's count when no plan
    was drawn (every draw refused)."""
    return drawn.count if drawn is not None else paper_count(d, H)


def draw_plan(d, H, rng, R, e_range=None, rank=None):
    """A random efficient plan; ``rank=r`` promises heads of rank <= r (a CUR skeleton)."""
    from exactlearn.strategies.efficient.plan import draw_efficient_plan
    return draw_efficient_plan(d, H, rng, R, e_range, rank)


#: The fields on which the plan samples lean (docs/explanation/efficient-plan.md): over Q(T)
#: (the symbolic field) the resultants of its tests grow too fast, so it asks the plan
#: before lean sampling there (its count, no fallback).
LEAN_FIELDS = ("modular", "rational")


def run(plan, ask, K, trace, options) -> tuple:
    """Ask and analyse ``plan`` in K and certify every observation: ``(heads, n_certified)``."""
    if plan.lean and K.name not in LEAN_FIELDS:
        plan.unlean()
    from exactlearn.strategies.efficient.learn import run_efficient
    return run_efficient(plan, ask, K, lambda: ask.observations, trace,
                         attempts=options.attempts)


def verify(oracle, heads, d, H, K, convert, rng, R, n, state) -> tuple:
    """``n`` fresh random queries compared exactly."""
    return verify_fresh(oracle, heads, d, H, K, convert, rng, R, n)


def detail(plan, state, certified) -> EfficientDetail:
    return EfficientDetail(list(plan.fallbacks), plan.describe())
