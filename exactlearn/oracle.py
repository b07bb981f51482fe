"""The black box: a model evaluated through a field, with a query counter.

``Oracle(model, field)`` is callable on a sequence of token vectors and returns
a field element.  It counts the queries (``.queries``), the longest query
(``.max_length``) and the time spent answering (``.seconds``).  A query of k
copies of one token costs work in the number of *distinct* tokens, not in k,
and each head's ``W_h x_n`` is computed once per final token.

When the field's scale D is left on auto (``scale=None``) the oracle fixes it to
the lcm of the model's W denominators (SPEC §4); ``oracle.field`` is the
resolved field, which the learner uses by default.

>>> from exactlearn.model import MultiHeadAttention
>>> from exactlearn.fields import Rational
>>> o = Oracle(MultiHeadAttention([([["1/2", 0], [0, 1]], [1, 1])]), Rational())
>>> o([[2, 0], [2, 0], [0, 2]]), o.queries, o.max_length, o.field.scale
(mpq(2,1), 1, 3, 2)
"""

from __future__ import annotations

import time

from .fields.base import Field
from .model import HeadEvaluator, MultiHeadAttention


class Oracle:
    """Counting black box over a model and a field."""

    def __init__(self, model: MultiHeadAttention, field: Field):
        if field.scale is None:
            field = field.with_scale(model.scale())
        self.model = model
        self.field = field
        self.d = model.d
        self._eval = HeadEvaluator(model.heads, model.d, field)
        self.queries = 0
        self.max_length = 0
        self.seconds = 0.0

    def __call__(self, tokens):
        t0 = time.perf_counter()
        try:
            out = self._eval(tokens)
        finally:
            self.seconds += time.perf_counter() - t0
        self.queries += 1
        self.max_length = max(self.max_length, len(tokens))
        return out

    def reset(self):
        self.queries = 0
        self.max_length = 0
        self.seconds = 0.0
