"""The shapes :mod:`~exactlearn.strategies.real.eta` measures and the envelope it fits to
their spreads (docs: howto/float-black-box.md#measure-eta-from-the-box): the stable plan's
family lengths (:func:`shape_lengths`), the measurement's size checked against
:mod:`exactlearn.limits` before anything is built (:func:`measurement_size_problem`), and the
least line ``abs + rel * |y|`` over every spread (:func:`envelope`, over the upper hull of
the points).
"""

from __future__ import annotations

import numpy as np

from exactlearn.limits import (MAX_DIMENSION, MAX_HEADS, MAX_PLAN_BYTES, MAX_PLAN_QUERIES,
                               MAX_PLAN_TOKENS, PLAN_BYTES_PER_QUERY, output_value_bytes,
                               readable_int)
from exactlearn.strategies.real.ratio import ratio_nodes


def envelope(sizes, spreads) -> tuple:
    """``(abs, rel) >= 0`` of least mean ``abs + rel * size`` with ``abs + rel * size >=
    spread`` at every point: the vertices of the feasible set (the axes' intercepts and the
    lines through two points) are the candidates.

    >>> envelope([1.0, 10.0], [1.0, 10.0])
    (0.0, 1.0)
    >>> envelope([1.0, 10.0], [2.0, 2.0])
    (2.0, 0.0)
    """
    y = np.asarray(sizes, dtype=float)
    s = np.asarray(spreads, dtype=float)
    if not len(s) or not s.max() > 0:
        return 0.0, 0.0
    cands = [(float(s.max()), 0.0)]
    pos = y > 0
    if pos.any() and not (s[~pos] > 0).any():
        cands.append((0.0, float((s[pos] / y[pos]).max())))
    hy, hs = _upper_hull(y, s)          # a line on or above every point passes through two
    i, j = np.triu_indices(len(hy), 1)  # of its vertices: pairs of those only (n points of
    dy = hy[i] - hy[j]                  # m outputs each: no n^2 m^2 arrays)
    ok = dy != 0
    rel = (hs[i][ok] - hs[j][ok]) / dy[ok]
    ab = hs[i][ok] - rel * hy[i][ok]
    keep = (rel >= 0) & (ab >= 0)
    cands += list(zip(ab[keep].tolist(), rel[keep].tolist()))
    best = None
    for a, r in cands:
        a_ok = a * (1 + 1e-12) + r * (1 + 1e-12) * y     # ties: rounding of the intercepts
        if np.all(a_ok >= s):
            cost = a + r * float(y.mean())
            if best is None or cost < best[0]:
                best = (cost, a, r)
    return best[1], best[2]


def _upper_hull(y, s) -> tuple:
    """The vertices of the upper convex hull of the points ``(y_i, s_i)`` (Andrew's monotone
    chain), ascending in y; of equal y only the largest s."""
    order = np.lexsort((-s, y))
    hull: list = []
    last = None
    for k in order:
        p = (float(y[k]), float(s[k]))
        if last is not None and p[0] == last:
            continue                        # the same y: the largest s came first
        last = p[0]
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) >= 0:
                hull.pop()                  # the middle point is on or below the chord
            else:
                break
        hull.append(p)
    return (np.array([p[0] for p in hull]), np.array([p[1] for p in hull]))


def shape_lengths(H: int) -> list:
    """The ``(k, m)`` of the stable plan's families with at least two non-final tokens.

    >>> [k + m for k, m in shape_lengths(1)][-1]
    257
    """
    return [(k, m) for k, m in ratio_nodes(H) if k + m - 1 >= 2]


def measurement_size_problem(d: int, H: int, n_scales: int, draws: int,
                             permutations: int, steps: bool = False,
                             outputs: int = 1) -> str | None:
    """None when the measurement of :func:`measure_noise` is within the plan limits of
    :mod:`exactlearn.limits` (queries, tokens sent, bytes: every query's tokens may be
    converted at once for a batch), else a one-line reason; computed from the sizes alone.
    ``outputs``: a box of m outputs (``learn(..., outputs=m)``), whose m answers per query
    are all kept for the measurement (:func:`~exactlearn.limits.output_value_bytes` each).

    >>> measurement_size_problem(2, 1, 3, 2, 3) is None
    True
    >>> measurement_size_problem(2, 1, 3, 10**9, 3)
    'noise measurement: 96000000000 queries, more than the limit 33554432 (MAX_PLAN_QUERIES)'
    """
    if d > MAX_DIMENSION:
        return (f"d = {readable_int(d)} is more than the largest dimension {MAX_DIMENSION} "
                f"(MAX_DIMENSION)")
    if H > MAX_HEADS:
        return (f"heads = {readable_int(H)} is more than the largest head count {MAX_HEADS} "
                f"(MAX_HEADS)")
    shapes = shape_lengths(H)
    per_draw = n_scales * draws * (1 + permutations + 2 * steps)
    queries = per_draw * len(shapes)
    tokens = per_draw * sum(k + m for k, m in shapes)
    size = (PLAN_BYTES_PER_QUERY + (output_value_bytes("real") * outputs if outputs > 1 else 0)) \
        * queries + 8 * tokens * (d + 1)
    for n, limit, name in ((queries, MAX_PLAN_QUERIES, "queries"), (tokens, MAX_PLAN_TOKENS, "tokens"),
                           (size, MAX_PLAN_BYTES, "bytes")):
        if n > limit:
            return (f"noise measurement: {n} {name}, more than the limit {limit} "
                    f"(MAX_PLAN_{name.upper()})")
    return None
