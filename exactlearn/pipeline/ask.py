"""Asking a plan once per distinct query (docs: explanation/algorithm.md#how-it-works: plan -> queries).

The learners ask through :class:`exactlearn.oracle.Recorder`, which counts every
call the black box answers and keeps every observation.  :class:`AskOnce` sits on
top of it when a learner may ask the same query twice -- the efficient plan's
k = 0 values (x_i), the real field's scaling probe, whose families the plan
repeats when the scale is 1, and the stable plan's families, rescues and supplements:
an identical query is answered from memory, so it is neither asked nor counted again,
and its observation index is the first one's.  A query is known by its runs of equal
tokens (:func:`query_key`): the stable plan's queries are a few hundred copies of two
tokens, so the key is built and hashed in a few steps.

>>> from exactlearn.fields import QQ
>>> from exactlearn.oracle import Recorder
>>> ask = AskOnce(Recorder(lambda tokens: len(tokens), QQ, convert=True))
>>> ask([(1,), (2,)]), ask.observe([(3,)]), ask.observe([(1,), (2,)]), ask.rec.queries
(mpq(2,1), (mpq(1,1), 1), (mpq(2,1), 0), 2)
>>> ask.ask([[(3,)], [(4,)], [(4,)]]), ask.rec.queries, [(3,)] in ask
([(mpq(1,1), 1), (mpq(1,1), 2), (mpq(1,1), 2)], 3, True)
"""

from __future__ import annotations

from contextlib import nullcontext

from exactlearn.oracle.adapt import token_runs


class AskOnce:
    """Asks through a :class:`~exactlearn.oracle.Recorder` once per distinct query.

    ``around``, a context manager factory, is entered around each call of the black box
    (the stable plan's: the box keeps the BLAS threads the run started with)."""

    def __init__(self, rec, around=None):
        self.rec = rec
        self.seen: dict = {}             # query_key(tokens) -> (value, observation index)
        self.around = nullcontext if around is None else around

    def observe(self, tokens) -> tuple:
        """``(value, index of its observation in rec.observations)``; an identical
        earlier query is reused, not asked again."""
        key = query_key(tokens)
        got = self.seen.get(key)
        if got is None:
            with self.around():
                y = self.rec(tokens)
            got = self.seen[key] = (y, len(self.rec.observations) - 1)
        return got

    def __call__(self, tokens):
        """The value of ``tokens`` (asked at most once)."""
        return self.observe(tokens)[0]

    def __contains__(self, tokens) -> bool:
        """Whether ``tokens`` was asked already."""
        return query_key(tokens) in self.seen

    def ask(self, queries) -> list:
        """``[(value, observation index)]`` for a list of queries: the new ones (each once)
        in one :meth:`~exactlearn.oracle.Recorder.ask_many` (a box's ``batch`` when it has
        one), in order."""
        keys = [query_key(q) for q in queries]
        new, seen_now = [], set()
        for key, q in zip(keys, queries):
            if key not in self.seen and key not in seen_now:
                seen_now.add(key)
                new.append((key, q))
        if new:
            start = len(self.rec.observations)
            with self.around():
                ys = self.rec.ask_many([q for _, q in new])
            for n, ((key, _), y) in enumerate(zip(new, ys, strict=True)):
                self.seen[key] = (y, start + n)
        return [self.seen[k] for k in keys]


def query_key(tokens) -> tuple:
    """The query as its runs, flat: ``(token, copies, token, copies, ...)``, adjacent equal
    tokens in one run (so two queries have the same key exactly when they are the same
    sequence of tokens).  One tuple, not one a run: a run's pair cost 72 bytes a query
    more, about 40 MB of keys a pass of the efficient plan at d = 384
    (docs/explanation/performance.md).

    >>> query_key([(1, 2), (1, 2), (3, 4), (1, 2)])
    ((1, 2), 2, (3, 4), 1, (1, 2), 1)
    """
    return tuple(x for t, n in token_runs(tokens) for x in (tuple(t), n))   # maximal runs
