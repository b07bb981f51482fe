"""The paper's plan over the exact fields (arXiv:2608.03294, main theorem; docs: explanation/algorithm.md#how-it-works).

Exactly ``4 H d^2 - 2H + 1`` queries, the longest of ``2H + 1`` tokens: the
plan is drawn (:func:`draw_plan`), asked and analysed
(:func:`exactlearn.pipeline.analysis.analyse_and_certify`), and certified over
the field itself.  :func:`exactlearn.api.learn` runs it.

>>> from exactlearn import MultiHeadAttention, Oracle
>>> from exactlearn.fields import Rational
>>> from exactlearn.oracle import Recorder
>>> import random
>>> model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])])
>>> plan = draw_plan(2, 1, random.Random(0), 30)
>>> rec = Recorder(Oracle(model, Rational()), Rational(scale=1), convert=False)
>>> heads, n = run(plan, rec, Rational(scale=1), None, None)
>>> heads == model.canonical_heads(), rec.queries == plan.count == n
(True, True)
"""

from __future__ import annotations

from exactlearn.pipeline.analysis import analyse_and_certify, ask_plan
from exactlearn.pipeline.certify import verify_fresh
from exactlearn.pipeline.plan import draw_paper_plan, paper_count

#: The strategy runs over exact fields only (the real field has its own strategy).
EXACT = True

#: It asks exactly ``plan.queries``, in order, and certifies them itself: its observations can be
#: streamed (:func:`exactlearn.pipeline.multimodular.learn_modular`, ``plan=``).
ASKS_PLAN = True


def new_state():
    """No state across attempts."""
    return None


def plan_count(name, d, H, bias=False, drawn=None) -> int:
    """The paper's count ``4 H d^2 - 2H + 1`` (:func:`~exactlearn.pipeline.plan.paper_count`)."""
    return paper_count(d, H)


def draw_plan(d, H, rng, R, e_range=None, rank=None):
    """A random paper plan (docs: explanation/algorithm.md#how-it-works); ``rank`` does not apply."""
    return draw_paper_plan(d, H, rng, R, e_range)


def run(plan, ask, K, trace, options) -> tuple:
    """Ask ``plan`` through ``ask`` (a :class:`~exactlearn.oracle.Recorder`), analyse it in
    K (or K's analysis fields) and certify every observation over K.

    Returns ``(canonical heads, number of certified observations)``."""
    y_shared, values = ask_plan(plan, ask)
    return analyse_and_certify(plan, y_shared, values, K, None, trace)


def verify(oracle, heads, d, H, K, convert, rng, R, n, state) -> tuple:
    """``n`` fresh random queries compared exactly (:func:`~exactlearn.pipeline.certify.verify_fresh`)."""
    return verify_fresh(oracle, heads, d, H, K, convert, rng, R, n)


def detail(plan, state, certified):
    """The paper plan reports nothing beyond the common fields."""
    return None
