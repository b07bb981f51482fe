"""The path of single tokens and the exact kinks of the output along it.

On one token every softmax is 1, so the one-layer Transformer is
``T(x) = sum_j u_j ReLU(beta_j . x)`` with ``beta_j = sum_h O_h^T b_j``
(docs: howto/transformer.md; the model is :mod:`exactlearn.transformer_model`).

1. **Path** (:class:`Path`).  Random integer A, P; the path A -> P -> -A (two
   segments) sweeps a half-plane of directions once, so it crosses every
   hyperplane ``beta_j^perp`` exactly once.  Single-token outputs are piecewise
   linear along each segment and are asked at integer points only
   (``T(x) = T(L x)/L``, no biases).
2. **Kinks** (:func:`kinks`): the linear pieces at both ends of an interval are
   intersected; a kink is accepted when the output at the intersection lies on
   both pieces and the pieces just left and right of it (three collinear
   samples each) are exactly those two; otherwise the interval is split.
   Kinks are exact rationals.

>>> from exactlearn.fields import QQ
>>> relu_x1 = lambda tokens: QQ(max(0, tokens[-1][0]))      # T(x) = ReLU(x_1)
>>> path = Path((-1, 1), (1, 2), relu_x1, QQ)
>>> kinks(path, 0, 1), kinks(path, 1, 2)                    # x_1 = 0 once on A -> P -> -A
([mpq(1,2)], [])
>>> primitive(path.x(mpq(1, 2)))
(0, 1)
"""

from __future__ import annotations

import math

from gmpy2 import mpq

from exactlearn.algebra.rationals import mpf_to_mpq
from exactlearn.errors import TransformerFailure
from exactlearn.fields.base import as_mpq


def to_mpq(K, x) -> mpq:
    """A param-domain value as an exact rational (the dyadic value of an mpf)."""
    if K.is_exact:
        return as_mpq(x)
    return mpf_to_mpq(x)


def primitive(v) -> tuple:
    """The primitive integer vector with the direction of a nonzero rational vector.

    >>> primitive([mpq(1, 2), mpq(-3, 4)])
    (2, -3)
    """
    v = [as_mpq(a) for a in v]
    L = 1
    for a in v:
        L = L * int(a.denominator) // math.gcd(L, int(a.denominator))
    ints = [int(a * L) for a in v]
    g = 0
    for a in ints:
        g = math.gcd(g, a)
    if g == 0:
        raise TransformerFailure("a path point is the zero vector")
    return tuple(a // g for a in ints)


class _Line:
    """The linear piece g(s) = g0 + slope (s - s0) of the single-token output."""

    def __init__(self, s0, g0, slope):
        self.s0, self.g0, self.slope = s0, g0, slope

    def at(self, s, K):
        return self.g0 + self.slope * K(s - self.s0)


class Path:
    """x(t) = A + t (P - A) on [0, 1], P + (t - 1)(-A - P) on [1, 2]; single-token outputs."""

    def __init__(self, A, P, ask, K):
        self.A, self.P, self.ask, self.K = A, P, ask, K
        self.samples: dict = {}          # t -> g(t)

    def x(self, t):
        K = self.K
        if t <= 1:
            return tuple(K(a) + K(t) * K(p - a) for a, p in zip(self.A, self.P))
        return tuple(K(p) + K(t - 1) * K(-a - p) for a, p in zip(self.A, self.P))

    def value(self, x):
        """T of the single token x (integer tokens only over exact fields)."""
        K = self.K
        if K.is_exact:                         # integer token: T(x) = T(L x) / L (no biases)
            L = 1
            for a in x:
                L = L * int(a.denominator) // math.gcd(L, int(a.denominator))
            return self.ask([tuple(int(a * L) for a in x)]) / K(L)
        return self.ask([x])

    def g(self, t):
        got = self.samples.get(t)
        if got is None:
            if len(self.samples) > 400:
                raise TransformerFailure("kink search exceeded its query budget (400 single tokens)")
            got = self.samples[t] = self.value(self.x(t))
        return got

    def off_hyperplanes(self, point, direction) -> bool:
        """Is T linear on single tokens near ``point`` along ``direction`` (5 collinear
        samples for some small step)?  False when a hyperplane passes through it."""
        K = self.K
        h = K(1) / 64
        for _ in range(5):
            ys = [self.value(tuple(K(p) + K(j) * h * K(q) for p, q in zip(point, direction)))
                  for j in range(-2, 3)]
            if all(K.eq(ys[j + 1] - ys[j], ys[1] - ys[0]) for j in range(1, 4)):
                return True
            h = h / 8
        return False


def _line(path, pts):
    """The line through three samples if they are collinear, else None."""
    K = path.K
    (s0, s1, s2) = pts
    g0, g1, g2 = path.g(s0), path.g(s1), path.g(s2)
    m01 = (g1 - g0) / K(s1 - s0)
    m12 = (g2 - g1) / K(s2 - s1)
    return _Line(s0, g0, m01) if K.eq(m01, m12) else None


def _line_near(path, s, side, width):
    """The linear piece just right (side=+1) / left (-1) of s, or around s (side=0)."""
    h = width / 64
    for _ in range(6):
        pts = {1: (s, s + h, s + 2 * h), -1: (s - 2 * h, s - h, s), 0: (s - h, s, s + h)}[side]
        ln = _line(path, pts)
        if ln is not None:
            return ln
        h = h / 8
    raise TransformerFailure(f"no linear piece near path parameter {path.K.format(s)} "
                             f"(kinks too close together, or the path meets two hyperplanes at once)")


def _same_line(K, L1, L2, s) -> bool:
    return K.eq(L1.slope, L2.slope) and K.eq(L1.at(s, K), L2.at(s, K))


def _pieces_at(path, s, a, b, La, Lb) -> bool:
    """Is g exactly La just left of s and Lb just right of it?

    Three samples on each side at distances eps, 2 eps, 3 eps with a tiny eps
    (2^-30 of the interval), s itself excluded: two kinks whose outer pieces
    happen to meet at s are rejected unless both lie within 3 eps of s.
    """
    K = path.K
    eps = K(b - a) / K(2 ** 30)
    left = _line(path, (s - 3 * eps, s - 2 * eps, s - eps))
    right = _line(path, (s + eps, s + 2 * eps, s + 3 * eps))
    return (left is not None and right is not None
            and _same_line(K, left, La, s) and _same_line(K, right, Lb, s))


def kinks(path, lo, hi) -> list:
    """Exact kink parameters of the single-token output on the segment [lo, hi] (module doc, step 2)."""
    K = path.K
    found = []

    def search(a, b, La, Lb, depth):
        if depth > 40:
            raise TransformerFailure("kink search did not terminate (more than 2^40 pieces?)")
        same_slope = K.eq(La.slope, Lb.slope)
        if same_slope and K.eq(La.at(b, K), Lb.at(b, K)):
            m = (a + b) / 2
            if K.eq(path.g(m), La.at(m, K)):
                return
        elif not same_slope:
            s = (Lb.g0 - La.g0 + La.slope * K(La.s0) - Lb.slope * K(Lb.s0)) / (La.slope - Lb.slope)
            if a < s < b and K.eq(path.g(s), La.at(s, K)) and _pieces_at(path, s, a, b, La, Lb):
                found.append(s)
                return
        for frac in (mpq(1, 2), mpq(3, 7), mpq(4, 7), mpq(2, 5), mpq(3, 5)):
            m = a + (b - a) * K(frac)
            try:
                Lm = _line_near(path, m, 0, (b - a) / 4)
            except TransformerFailure:
                continue
            break
        else:
            raise TransformerFailure("no kink-free split point in a path interval")
        search(a, m, La, Lm, depth + 1)
        search(m, b, Lm, Lb, depth + 1)

    width = K(hi - lo)
    search(K(lo), K(hi), _line_near(path, K(lo), 1, width), _line_near(path, K(hi), -1, width), 0)
    return sorted(found)
