"""Black boxes the tests wrap around a model, written once (docs/explanation/tests.md).

- :class:`Counting`: a callable box that counts every query it answers (``answered``), apart
  from exactlearn's own counts, so that a test compares ``res.queries`` with the box's count.
- :class:`CallableBox`: an :class:`~exactlearn.oracle.Oracle` seen as a plain callable with a
  ``field`` and ``over`` (not an Oracle instance), so a learn takes the black-box route.
"""

from __future__ import annotations


class Counting:
    """A box that counts every query it answers."""

    def __init__(self, box):
        self.box, self.answered = box, 0

    def __call__(self, query):
        self.answered += 1
        return self.box(query)


class CallableBox:
    """``inner`` (an Oracle) behind a plain callable with its ``field`` and ``over``."""

    def __init__(self, inner):
        self.inner = inner
        self.field = inner.field

    def __call__(self, tokens):
        return self.inner(tokens)

    def over(self, K):
        return self.inner.over(K)
