"""An independent canonical form, for checks of the learner and of ``canonicalize``.

The learner's output passes through :func:`exactlearn.model.canonicalize`, the
same function as ``model.canonical_heads()``.  A test that compares the two
therefore shares one piece of code on both sides: a mistake in it (say, W
compared after rounding, so that two heads merge wrongly) would be made twice
and cancel out.  :func:`reference_canonical` recomputes the canonical form
(SPEC §1) apart -- Python Fractions, W compared pairwise, no sorting, no
dictionary keyed by W -- and returns it as a set, so order plays no part.

>>> from exactlearn import MultiHeadAttention
>>> m = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2]), ([[1, 0], [0, 1]], [-1, 0]),
...                         ([["1/2", 0], [0, 0]], [3, 3]), ([["1/2", 0], [0, 0]], [-3, -3])])
>>> sorted(reference_canonical(m))
[(((Fraction(1, 1), Fraction(0, 1)), (Fraction(0, 1), Fraction(1, 1))), (Fraction(0, 1), Fraction(2, 1)))]
"""

from __future__ import annotations

from fractions import Fraction


def _fraction(x) -> Fraction:
    return Fraction(int(x.numerator), int(x.denominator))


def as_set(heads) -> frozenset:
    """Heads (mpq entries) as a set of (W, v) tuples of Fractions; asserts no duplicates."""
    heads = tuple(heads)
    out = frozenset((tuple(tuple(_fraction(x) for x in row) for row in h.W),
                     tuple(_fraction(x) for x in h.v)) for h in heads)
    assert len(out) == len(heads), "duplicate heads"
    return out


def reference_canonical(model) -> frozenset:
    """The canonical heads of ``model`` (merge equal W, sum v, drop zero sums) as a set."""
    groups: list = []                       # [W, v-sum] in first-seen order
    for h in model.heads:
        W = [[_fraction(x) for x in row] for row in h.W]
        v = [_fraction(x) for x in h.v]
        for g in groups:
            if g[0] == W:
                g[1] = [a + b for a, b in zip(g[1], v)]
                break
        else:
            groups.append([W, v])
    return frozenset((tuple(tuple(row) for row in W), tuple(v))
                     for W, v in groups if any(x != 0 for x in v))
