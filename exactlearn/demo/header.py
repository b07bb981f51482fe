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


def redraw_text(res) -> str:
    """What happened to the draws before the final one: degenerate draws (detected, their
    queries spent) and draws refused before any query (too large for the field).

    >>> from types import SimpleNamespace as NS
    >>> print(redraw_text(NS(attempt_log=[{"outcome": "refused"}, {"outcome": "failed"},
    ...                                   {"outcome": "certified"}], extra_queries=29)))
    ... # doctest: +NORMALIZE_WHITESPACE
    Of the first 2 random draws, 1 was refused before any query: its exponents exceed what
    the field realises (the range is too large for it; not a degenerate draw); 1 was
    degenerate and detected as such (e.g. two heads' rho coincide or some v_h.e = 0 at a
    small range).  The learner redrew, spending 29 extra queries.
    """
    earlier = res.attempt_log[:-1]
    refused = sum(1 for a in earlier if a["outcome"] == "refused")
    degenerate = len(earlier) - refused
    parts = []
    if refused:
        parts.append(f"{refused} {'was' if refused == 1 else 'were'} refused before any query: "
                     f"{'its' if refused == 1 else 'their'} exponents exceed what the field "
                     f"realises (the range is too large for it; not a degenerate draw)")
    if degenerate:
        parts.append(f"{degenerate} {'was' if degenerate == 1 else 'were'} degenerate and "
                     f"detected as such (e.g. two heads' rho coincide or some v_h.e = 0 at a "
                     f"small range)")
    n = len(earlier)
    return (f"Of the first {n} random draw{'s' if n > 1 else ''}, " + "; ".join(parts)
            + f".  The learner redrew, spending {res.extra_queries} extra queries.")
