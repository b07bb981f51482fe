"""The plan for biases over the exact fields (docs: explanation/biases.md).

The paper's theorem extended to ``s_{h,i} = x_i^T W_h x_n + u_h^T x_i`` and an
additive constant c: exactly ``4 H d^2 + 4 H d - 2H + 1`` queries, the longest of
``2H + 1`` tokens (H0 in H's place with a bound).  :func:`exactlearn.api.learn`
runs it with ``bias=True``.

>>> import random
>>> from exactlearn import MultiHeadAttention, Oracle
>>> from exactlearn.fields import Rational
>>> from exactlearn.oracle import Recorder
>>> model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2], [1, 0])], constant=3)
>>> plan = draw_plan(2, 1, random.Random(0), 30)
>>> rec = Recorder(Oracle(model, Rational()), Rational(scale=1), convert=False)
>>> heads, n = run(plan, rec, Rational(scale=1), None, None)
>>> heads == model.canonical_heads(), heads.constant, rec.queries == plan.count == n == 23
(True, mpq(3,1), True)
"""

from __future__ import annotations

from exactlearn.pipeline.analysis import analyse_and_certify, ask_plan
from exactlearn.pipeline.certify import verify_fresh
from exactlearn.pipeline.plan import bias_count, draw_bias_plan

#: The strategy runs over exact fields only (the real field is not supported with biases yet).
EXACT = True

#: It asks exactly ``plan.queries``, in order, and certifies them itself.
ASKS_PLAN = True


def new_state():
    """No state across attempts."""
    return None


def plan_count(name, d, H, bias=True, drawn=None) -> int:
    """The count of the plan for biases: :func:`~exactlearn.pipeline.plan.bias_count`."""
    return bias_count(d, H)


def draw_plan(d, H, rng, R, e_range=None, rank=None):
    """A random plan for biases (docs: explanation/biases.md); ``rank`` does not apply."""
    return draw_bias_plan(d, H, rng, R, e_range)


def run(plan, ask, K, trace, options) -> tuple:
    """Ask ``plan`` through ``ask``, analyse it in K (or K's analysis fields) and certify
    every observation over K, with u and c.

    The plan's count and longest query are checked against the formulas, and the queries
    this run asked (the recorder's own count) against the count.

    Returns ``(canonical heads with their constant, number of certified observations)``."""
    if plan.count != bias_count(plan.d, plan.H) or plan.max_length != 2 * plan.H + 1:
        raise AssertionError(f"the plan for biases has {plan.count} queries, the longest of "
                             f"{plan.max_length} tokens; the formulas give {bias_count(plan.d, plan.H)} "
                             f"and {2 * plan.H + 1}")
    before = ask.queries
    y_shared, values = ask_plan(plan, ask)
    if ask.queries - before != plan.count:
        raise AssertionError(f"{ask.queries - before} queries asked for a plan of {plan.count}")
    return analyse_and_certify(plan, y_shared, values, K, None, trace)


def verify(oracle, heads, d, H, K, convert, rng, R, n, state) -> tuple:
    """``n`` fresh random queries compared exactly, with u and c."""
    return verify_fresh(oracle, heads, d, H, K, convert, rng, R, n)


def detail(plan, state, certified):
    """Nothing beyond the common fields."""
    return None
