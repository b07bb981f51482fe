"""The walk-throughs' common ground: the default model and the header they print.

:mod:`~exactlearn.demo.walkthrough` (exact fields) and :mod:`~exactlearn.demo.symbolic`
(Q(T)) both start from here, so neither imports the other for it: the walk-through
hands ``--symbolic`` to the symbolic demo, one way only (docs/explanation/algorithm.md).

>>> show_model(DEFAULT_MODEL, "rational", print)
Model: d = 2, 2 raw heads; score x_i^T W_h x_n (key left, query right).
Field: rational
  raw head 1: W = [['1', '0'], ['0', '-1']], v = ['1', '2']
  raw head 2: W = [['0', '1'], ['1', '0']], v = ['-1/2', '1']
"""

from __future__ import annotations

from exactlearn.model import MultiHeadAttention

DEFAULT_MODEL = MultiHeadAttention([
    ([[1, 0], [0, -1]], [1, 2]),
    ([[0, 1], [1, 0]], ["-1/2", 1]),
])


def show_model(model, field_text, out) -> None:
    """The demo's header: the model, its convention, and the field."""
    out(f"Model: d = {model.d}, {model.H} raw heads; score x_i^T W_h x_n (key left, query right).")
    out(f"Field: {field_text}")
    for n, h in enumerate(model.heads, 1):
        out(f"  raw head {n}: W = {[[str(x) for x in r] for r in h.W]}, v = {[str(x) for x in h.v]}")
