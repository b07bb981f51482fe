"""Asking a plan once per distinct query (docs: explanation/algorithm.md#how-it-works: plan -> queries).

The learners ask through :class:`exactlearn.oracle.Recorder`, which counts every
call the black box answers and keeps every observation.  :class:`AskOnce` sits on
top of it when a learner may ask the same query twice -- the efficient plan's
k = 0 values (x_i) and the real field's scaling probe, whose families the plan
repeats when the scale is 1: an identical query is answered from memory, so it is
neither asked nor counted again, and its observation index is the first one's.

>>> from exactlearn.fields import QQ
>>> from exactlearn.oracle import Recorder
>>> ask = AskOnce(Recorder(lambda tokens: len(tokens), QQ, convert=True))
>>> ask([(1,), (2,)]), ask.observe([(3,)]), ask.observe([(1,), (2,)]), ask.rec.queries
(mpq(2,1), (mpq(1,1), 1), (mpq(2,1), 0), 2)
"""

from __future__ import annotations


class AskOnce:
    """Asks through a :class:`~exactlearn.oracle.Recorder` once per distinct query."""

    def __init__(self, rec):
        self.rec = rec
        self.seen: dict = {}

    def observe(self, tokens) -> tuple:
        """``(value, index of its observation in rec.observations)``; an identical
        earlier query is reused, not asked again."""
        key = tuple(tuple(t) for t in tokens)
        got = self.seen.get(key)
        if got is None:
            y = self.rec(tokens)
            got = self.seen[key] = (y, len(self.rec.observations) - 1)
        return got

    def __call__(self, tokens):
        """The value of ``tokens`` (asked at most once)."""
        return self.observe(tokens)[0]
