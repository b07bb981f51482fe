"""Heads and the canonical form of a multi-head attention (docs: explanation/algorithm.md#the-model-and-its-sign-convention).

A :class:`Head` is one head's merged query-key matrix W, its value-readout v (a vector, or
an m x d matrix for vector outputs) and, with biases, its query-bias vector u;
:func:`canonicalize` groups heads with equal W, sums their v and drops zero sums.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple

from gmpy2 import mpq

from exactlearn.fields.base import format_rational


def is_matrix(v) -> bool:
    """True when a head's ``v`` is a matrix (a tuple of rows: vector outputs), not a vector."""
    return bool(v) and isinstance(v[0], (tuple, list))


def _flat(v):
    """The entries of a head's v, vector or matrix."""
    return [x for row in v for x in row] if is_matrix(v) else list(v)


def _add_v(a, b):
    if is_matrix(a):
        return tuple(tuple(x + y for x, y in zip(ra, rb)) for ra, rb in zip(a, b))
    return tuple(x + y for x, y in zip(a, b))


@dataclass(frozen=True, order=True)
class Head:
    """One (canonical or raw) head: W as a tuple of row tuples, v as a tuple, and the
    query-bias vector u (docs: explanation/biases.md): the score of token i is
    ``x_i^T W x_n + u^T x_i``.  ``u`` defaults to zeros (a head without bias).  With vector
    outputs v is an m x d matrix, a tuple of m rows (row j: output j's readout;
    docs: explanation/biases.md#vector-outputs).

    >>> Head(((1,),), (2,)) == Head(((1,),), (2,), (0,)), Head(((1,),), (2,)).u
    (True, (0,))
    >>> h = Head(((1,),), ((2,), (3,)))
    >>> h.d, h.outputs, h.u, h.row(1)
    (1, 2, (0,), Head(W=((1,),), v=(3,), u=(0,)))
    """

    W: tuple
    v: tuple
    u: tuple = None

    def __post_init__(self):
        if self.u is None:
            flat = _flat(self.v)
            zero = flat[0] * 0 if flat else 0
            object.__setattr__(self, "u", tuple(zero for _ in range(self.d)))

    def __reduce__(self):
        """Pickled with W's numerators and denominators as two strings of fixed-width
        integers when W is a tuple of tuples of gmpy2 ``mpq`` (else as the dataclass is).
        A Dask run sends the model and the learned heads to its workers; at d = 384 the
        12 heads' 1.77 million mpq, each pickled through gmpy2's own reducer and held in
        the pickler's memo, grew the driver by about 500 MB
        (docs/explanation/performance.md).  Unpickled, the entries are the same mpq values.

        >>> import pickle
        >>> h = Head(((mpq(1, 3), mpq(-2, 1)), (mpq(0), mpq(5, 6))), (mpq(1),))
        >>> pickle.loads(pickle.dumps(h)) == h, [x[8:].hex() for x in h.__reduce__()[1][1:3]]
        (True, ['01fe0005', '03010106'])
        """
        W = self.W
        if not (type(W) is tuple and W and all(type(row) is tuple and row for row in W)
                and all(type(x) is mpq for row in W for x in row)):
            return (Head, (self.W, self.v, self.u))
        return (_head_from_bytes, (len(W[0]), _packed([int(x.numerator) for row in W for x in row]),
                                   _packed([int(x.denominator) for row in W for x in row]), self.v, self.u))

    @property
    def d(self) -> int:
        return len(self.v[0]) if is_matrix(self.v) else len(self.v)

    @property
    def outputs(self) -> int | None:
        """m for a head of a vector-output model (v an m x d matrix), None for a vector v."""
        return len(self.v) if is_matrix(self.v) else None

    def row(self, j: int) -> "Head":
        """Output j's scalar head ``(W, v[j], u)`` of a vector-output head."""
        return Head(self.W, tuple(self.v[j]), self.u)

    @property
    def biased(self) -> bool:
        """True when u is not zero."""
        return any(x != 0 for x in self.u)

    def to_json(self, fmt=format_rational, bias: bool = False) -> dict:
        """``{"W", "v"}``, and ``"u"`` with ``bias`` (the bias runs' JSON and mha/2 files)."""
        v = ([[fmt(x) for x in row] for row in self.v] if is_matrix(self.v)
             else [fmt(x) for x in self.v])
        out = {"W": [[fmt(x) for x in row] for row in self.W], "v": v}
        if bias:
            out["u"] = [fmt(x) for x in self.u]
        return out


def _packed(ints: list) -> bytes:
    """``ints`` as signed little-endian integers of one width, after that width (8 bytes)."""
    width = max(abs(a) for a in ints).bit_length() // 8 + 1         # with the sign bit
    return width.to_bytes(8, "little") + b"".join([a.to_bytes(width, "little", signed=True) for a in ints])


def _unpacked(blob: bytes) -> list:
    """The integers of :func:`_packed`."""
    width = int.from_bytes(blob[:8], "little")
    return [int.from_bytes(blob[t:t + width], "little", signed=True) for t in range(8, len(blob), width)]


def _head_from_bytes(n: int, nums: bytes, dens: bytes, v, u) -> Head:
    """A :class:`Head` whose W (rows of n entries, row-major) has the numerators and
    denominators ``nums`` and ``dens`` (:func:`_packed`): its pickle (:meth:`Head.__reduce__`)."""
    W = [mpq(a, b) for a, b in zip(_unpacked(nums), _unpacked(dens))]
    return Head(tuple(tuple(W[t:t + n]) for t in range(0, len(W), n)), v, u)


class HeadSet(tuple):
    """Canonical heads with the model's additive constant c (docs: explanation/biases.md).

    A tuple of :class:`Head` (so every use of a tuple of heads keeps working) with
    ``constant`` (0 when absent) and ``bias`` (True for a model or run with biases).
    Equality also compares the constants: a HeadSet equals a plain tuple of the same
    heads exactly when its constant is 0.

    >>> h = Head(((1,),), (2,))
    >>> HeadSet([h], constant=3) == HeadSet([h], constant=3), HeadSet([h], constant=3) == (h,)
    (True, False)
    >>> HeadSet([h]) == (h,)
    True
    """

    def __new__(cls, heads=(), constant=0, bias: bool = False):
        self = super().__new__(cls, heads)
        self.constant = constant
        self.bias = bool(bias)
        return self

    def __eq__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        mine = self.constant
        theirs = getattr(other, "constant", 0)
        return tuple.__eq__(self, other) and mine == theirs

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        # equal objects hash equally: a HeadSet with constant 0 equals the plain tuple
        if self.constant == 0:
            return tuple.__hash__(self)
        return hash((tuple(self), self.constant))

    def __getnewargs__(self):
        return (tuple(self), self.constant, self.bias)

    def __reduce__(self):
        return (HeadSet, (tuple(self), self.constant, self.bias))


def _nonzero_constant(c) -> bool:
    return any(x != 0 for x in c) if isinstance(c, (tuple, list)) else c != 0


def constant_of(heads):
    """The additive constant of a collection of heads (0 unless it is a :class:`HeadSet`)."""
    return getattr(heads, "constant", 0)


def canonicalize(heads: Iterable[Head], constant=None, bias: bool | None = None) -> tuple:
    """Canonical form (docs: explanation/algorithm.md#the-model-and-its-sign-convention): merge equal (W, u), sum v, drop zero sums; sorted.

    Sorting makes the result a *value*: two canonical forms are equal as sets
    exactly when the tuples are equal.  Heads with equal W but different u are
    *not* merged (docs: explanation/biases.md).  With ``constant`` (or a
    :class:`HeadSet` given) the result is a :class:`HeadSet` carrying it.
    """
    if constant is None:
        constant = constant_of(heads)
    if bias is None:
        bias = getattr(heads, "bias", False)
    groups: dict = {}
    for h in heads:
        key = (h.W, h.u)
        acc = groups.get(key)
        groups[key] = h.v if acc is None else _add_v(acc, h.v)
    out = tuple(sorted(Head(W, v, u) for (W, u), v in groups.items()
                       if any(x != 0 for x in _flat(v))))
    if bias or _nonzero_constant(constant):
        return HeadSet(out, constant, bias)
    return out


class Structure(NamedTuple):
    """What the canonical form does to a list of raw heads (see :func:`structure`)."""

    merged: int       # W groups of >= 2 heads with nonzero v and a nonzero sum: one canonical head each
    cancelled: int    # W groups of >= 2 heads with nonzero v summing to 0: dropped
    zero: int         # raw heads with v = 0 (they vanish on their own)


def structure(heads: Iterable[Head]) -> Structure:
    """Count the merges, cancellations and zero heads the canonical form resolves (docs: explanation/algorithm.md#the-model-and-its-sign-convention).

    A model is canonical (its own canonical form, up to order) exactly when all
    three counts are 0.  Generators of "merged" or "cancelling" test models use it
    to make sure the structure they promise is really there.

    >>> W = ((1, 0), (0, 1))
    >>> structure([Head(W, (1, 2)), Head(W, (0, 1)), Head(((0, 1), (0, 0)), (3, 3)),
    ...            Head(((0, 1), (0, 0)), (-3, -3)), Head(((2, 0), (0, 0)), (0, 0))])
    Structure(merged=1, cancelled=1, zero=1)
    """
    groups: dict = {}
    zero = 0
    for h in heads:
        if any(x != 0 for x in _flat(h.v)):
            groups.setdefault((h.W, h.u), []).append(_flat(h.v))
        else:
            zero += 1
    merged = cancelled = 0
    for vs in groups.values():
        if len(vs) >= 2:
            if any(sum(col) != 0 for col in zip(*vs)):
                merged += 1
            else:
                cancelled += 1
    return Structure(merged, cancelled, zero)



def exponent_entries(h):
    """The entries of W and u of a head: the score's coefficients, which D must clear."""
    for row in h.W:
        yield from row
    yield from h.u



def distinct_tokens(tokens):
    """Group a token sequence into (token, multiplicity) pairs, final token last.

    Returns ``(pairs, final)`` where ``pairs`` lists each distinct token once.
    A run of the *same object* (the plan's ``[a] * k``) is counted without hashing
    each copy; equal tokens that are different objects still merge.

    >>> a = (1, 2)
    >>> distinct_tokens([a, a, [1, 2], (0, 1)])
    ([((1, 2), 3), ((0, 1), 1)], (0, 1))
    """
    if len(tokens) == 0:
        raise ValueError("a query needs at least one token")
    counts: dict = {}
    prev = None
    run = 0
    for t in tokens:
        if t is prev:
            run += 1
            continue
        if run:
            key = tuple(prev)
            counts[key] = counts.get(key, 0) + run
        prev, run = t, 1
    key = tuple(prev)
    counts[key] = counts.get(key, 0) + run
    final = tuple(tokens[-1])
    return list(counts.items()), final


