"""Multi-head attention with exact weights, its canonical form and evaluation (docs: explanation/algorithm.md#the-model-and-its-sign-convention).

Convention (that of arXiv:2601.16873): head h has a merged query-key matrix
W_h (d x d) and a merged value-readout vector v_h (d).  For a query
X = (x_1, ..., x_n) the final token x_n attends to every token, itself
included; the score of token i is ``s_{h,i} = x_i^T W_h x_n`` -- **key on the
left, query on the right** -- and the output is

    f(X) = sum_h sum_i softmax_i(s_{h,.}) * v_h . x_i .

The canonical form groups heads with equal W, sums their v, and drops groups
whose sum is zero; f depends only on it.

>>> m = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2]), ([[1, 0], [0, 1]], [-1, 0]),
...                         ([[0, 1], [0, 0]], [3, "1/2"])])
>>> [(h.W, h.v) for h in m.canonical_heads()]     # doctest: +NORMALIZE_WHITESPACE
[(((mpq(0,1), mpq(1,1)), (mpq(0,1), mpq(0,1))), (mpq(3,1), mpq(1,2))),
 (((mpq(1,1), mpq(0,1)), (mpq(0,1), mpq(1,1))), (mpq(0,1), mpq(2,1)))]
>>> from exactlearn.fields import Rational
>>> m.evaluate([[1, 0], [0, 1]], Rational())
mpq(7,2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple, Sequence

import flint

from exactlearn.errors import BadReduction, ExactnessError, ModelError
from exactlearn.fields.base import Field, as_mpq, format_rational, lcm_of_denominators
from exactlearn.limits import check_model_size, check_outputs_size
from exactlearn.io import check_format, dump_json, exact_matrix, exact_vector, load_json

FORMAT = "exactlearn.mha/1"

#: The model file format with biases: per-head ``u`` and a top-level ``constant``
#: (docs: explanation/biases.md).
FORMAT_BIAS = "exactlearn.mha/2"

#: The model file format with vector outputs: ``outputs`` m, per-head ``v`` an m x d matrix,
#: ``u``, and a top-level length-m ``constant`` (docs: explanation/biases.md#vector-outputs).
FORMAT_VECTOR = "exactlearn.mha/3"


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


class MultiHeadAttention:
    """A multi-head attention model with exact rational weights.

    ``MultiHeadAttention([(W, v), ...], d=None)``: W a d x d nested list, v a
    list; entries are ints, Fractions, mpq, or ``"p/q"``/decimal strings.

    With biases (docs: explanation/biases.md) a head is ``(W, v, u)`` and
    ``constant`` is the additive constant c:
    ``f(X) = c + sum_h sum_i softmax_i(x_i^T W_h x_n + u_h^T x_i) v_h . x_i``.

    With vector outputs (``outputs=m``, docs: explanation/biases.md#vector-outputs) every
    head's v is an m x d matrix, ``constant`` a length-m vector, and ``evaluate`` returns the
    m outputs; ``output(j)`` is output j as a scalar model.

    >>> from exactlearn.fields import Rational
    >>> MultiHeadAttention([([[0]], [[1], [2]])], outputs=2).evaluate([[0], [3]], Rational())
    [mpq(3,2), mpq(3,1)]
    >>> m = MultiHeadAttention([([[0]], [1], [1])], constant=5)
    >>> m.bias, m.evaluate([[0], [1]], Rational()) == 5 + Rational(scale=1).exp(1) / (1 + Rational(scale=1).exp(1))
    (True, True)
    """

    def __init__(self, heads: Sequence, d: int | None = None, constant=None, bias: bool | None = None,
                 outputs: int | None = None):
        heads = list(heads)
        if outputs is not None and (isinstance(outputs, bool) or not isinstance(outputs, int)
                                    or outputs <= 0):
            raise ModelError(f"outputs must be a positive integer, got {outputs!r}")
        if d is None:
            if not heads:
                raise ModelError("a model without heads needs an explicit d")
            first = heads[0]
            v = first.v if isinstance(first, Head) else (first["v"] if isinstance(first, dict) and "v" in first
                                                          else first[1])
            d = len(v[0]) if outputs is not None and is_matrix(v) else len(v)
        if isinstance(d, bool) or not isinstance(d, int) or d <= 0:
            raise ModelError(f"d must be a positive integer, got {d!r}")
        self.d = d
        #: m for a model of vector outputs (each head's v an m x d matrix,
        #: docs: explanation/biases.md#vector-outputs); None for a scalar model
        self.outputs = outputs
        parsed = []
        for idx, h in enumerate(heads):
            u = None
            if isinstance(h, Head):
                W, v, u = h.W, h.v, h.u
            elif isinstance(h, dict):
                if "W" not in h or "v" not in h:
                    raise ModelError(f"head {idx + 1}: missing key 'W' or 'v'")
                W, v, u = h["W"], h["v"], h.get("u")
            else:
                try:
                    if len(h) == 3:
                        W, v, u = h
                    else:
                        W, v = h
                except (TypeError, ValueError):
                    raise ModelError(f"head {idx + 1}: expected a pair (W, v) or a triple (W, v, u)") from None
            if u is not None:
                u = exact_vector(u, d, f"head {idx + 1}: u")
            parsed.append(Head(exact_matrix(W, d, d, f"head {idx + 1}: W"),
                               exact_vector(v, d, f"head {idx + 1}: v") if outputs is None else
                               exact_matrix(v, outputs, d, f"head {idx + 1}: v"), u))
        self.heads = tuple(parsed)
        if outputs is not None:
            self.constant = (tuple(as_mpq(0) for _ in range(outputs)) if constant is None
                             else exact_vector(constant, outputs, "constant"))
        elif constant is None:
            self.constant = as_mpq(0)
        else:
            try:
                self.constant = as_mpq(constant)
            except (ValueError, TypeError) as exc:
                raise ModelError(f"constant: {exc}") from None
        # a model with biases (docs: explanation/biases.md): written as mha/2
        self.bias = bool(bias) if bias is not None else (
            constant is not None or any(h.biased for h in self.heads))

    def output(self, j: int) -> "MultiHeadAttention":
        """Output j of a vector-output model as a scalar model (its heads' row j, its
        constant's entry j); independent of the learner, for comparisons."""
        if self.outputs is None:
            raise ModelError("output(j) is for a model with vector outputs")
        return MultiHeadAttention([h.row(j) for h in self.heads], d=self.d,
                                  constant=self.constant[j] if self.bias else None, bias=self.bias)

    # ---- structure ----------------------------------------------------------------
    @property
    def H(self) -> int:
        return len(self.heads)

    def canonical_heads(self) -> tuple:
        """The canonical heads (docs: explanation/algorithm.md#the-model-and-its-sign-convention) as a sorted tuple of :class:`Head`;
        for a model with biases a :class:`HeadSet` that also carries the constant
        (docs: explanation/biases.md)."""
        if self.bias:
            return canonicalize(self.heads, self.constant, True)
        return canonicalize(self.heads)

    def scale(self) -> int:
        """lcm of the denominators of the *raw* heads' W entries: the D of docs: howto/field-and-range.md#number-systems-fields.

        Taken from the heads as written, so that the oracle evaluates the model
        it was given -- every raw head, cancelling or merging ones included --
        and never a substitute for it (docs: howto/field-and-range.md#number-systems-fields).  A canonical head's
        W is a raw head's W, so D also realises the canonical form.

        >>> MultiHeadAttention([([["1/3", 0], [0, 1]], [1, 1]), ([["1/3", 0], [0, 1]], [-1, -1]),
        ...                     ([["1/2", 0], [0, 0]], [1, 0])]).scale()
        6
        """
        return lcm_of_denominators(x for h in self.heads for x in _exponent_entries(h))

    def __eq__(self, other):
        return (isinstance(other, MultiHeadAttention) and self.d == other.d and self.heads == other.heads
                and self.constant == other.constant)

    def __repr__(self):
        return f"MultiHeadAttention(d={self.d}, H={self.H})"

    # ---- evaluation -----------------------------------------------------------------
    def evaluate(self, tokens, field: Field):
        """f(X) in ``field`` for a token sequence (docs: explanation/algorithm.md#the-model-and-its-sign-convention), summed over the raw heads.

        Work is in the number of *distinct* tokens: repeated tokens are
        weighted by their multiplicity.  A field left on auto scale takes
        D = :meth:`scale`; an explicit D must clear every raw head's W
        denominators (:meth:`check_scale`), or :class:`ExactnessError` is raised.
        """
        if field.scale is None:
            field = field.with_scale(self.scale())
        self.check_scale(field)
        return evaluator(self.heads, self.d, field, self.constant, self.outputs)(tokens)

    def check_scale(self, field: Field) -> None:
        """Raise ExactnessError unless ``field`` (exact) realises every raw head.

        An exact field realises exp(s) only for D*s an integer, so D must clear
        the denominators of every raw W -- including heads that cancel or merge
        in the canonical form: the black box is the model as written.
        """
        if field.is_exact and field.scale is not None:
            D = field.D
            for idx, h in enumerate(self.heads):
                if any((x * D).denominator != 1 for x in _exponent_entries(h)):
                    need = lcm_of_denominators(_exponent_entries(h))
                    raise ExactnessError(
                        f"the {field.name} field's scale D = {D} does not clear the W (and u) denominators "
                        f"of head {idx + 1} (they need a multiple of {need}); leave the scale on "
                        f"auto (D = {self.scale()}) or choose a multiple of it")

    # ---- files -----------------------------------------------------------------------
    def to_json(self) -> dict:
        if self.outputs is not None:
            return {"format": FORMAT_VECTOR, "d": self.d, "outputs": self.outputs, "bias": self.bias,
                    "heads": [h.to_json(bias=True) for h in self.heads],
                    "constant": [format_rational(c) for c in self.constant]}
        if self.bias:
            return {"format": FORMAT_BIAS, "d": self.d,
                    "heads": [h.to_json(bias=True) for h in self.heads],
                    "constant": format_rational(self.constant)}
        return {"format": FORMAT, "d": self.d, "heads": [h.to_json() for h in self.heads]}

    def dump(self, path) -> None:
        dump_json(self.to_json(), path)

    @classmethod
    def from_json(cls, obj) -> "MultiHeadAttention":
        """Read an ``exactlearn.mha/1`` or ``exactlearn.mha/2`` (biases) model file
        (docs: reference/model-files.md)."""
        if isinstance(obj, dict) and obj.get("format") == FORMAT_VECTOR:
            return cls._from_json_vector(obj)
        biased = isinstance(obj, dict) and obj.get("format") == FORMAT_BIAS
        if not biased:
            check_format(obj, FORMAT, default=FORMAT)
        for key in ("d", "heads") + (("constant",) if biased else ()):
            if key not in obj:
                raise ModelError(f"model file: missing key {key!r}")
        d = obj["d"]
        if isinstance(d, bool) or not isinstance(d, int) or d <= 0:
            raise ModelError(f"model file: d must be a positive integer, got {d!r}")
        if not isinstance(obj["heads"], list):
            raise ModelError("model file: 'heads' must be a list")
        check_model_size(d, len(obj["heads"]), what="model file")     # before any entry is read
        for idx, h in enumerate(obj["heads"]):
            if isinstance(h, list):                      # a pair [W, v] or a triple [W, v, u]
                if biased and len(h) != 3:
                    raise ModelError(f"model file: head {idx + 1}: a head of {FORMAT_BIAS} is "
                                     f"{{\"W\", \"v\", \"u\"}} or a triple [W, v, u]")
                if not biased and len(h) == 3:
                    raise ModelError(f"model file: head {idx + 1} is a triple [W, v, u] (a bias u): "
                                     f"use format {FORMAT_BIAS!r}")
                continue
            if not isinstance(h, dict):
                continue
            if biased and "u" not in h:
                raise ModelError(f"model file: head {idx + 1}: missing key 'u' ({FORMAT_BIAS})")
            if not biased and "u" in h:
                raise ModelError(f"model file: head {idx + 1} has a bias 'u': use format {FORMAT_BIAS!r}")
            if biased and h["u"] is None:
                raise ModelError(f"model file: head {idx + 1}: u is null (a d-vector is needed)")
        if not biased and "constant" in obj:
            raise ModelError(f"model file: a 'constant' needs format {FORMAT_BIAS!r}")
        if biased and obj["constant"] is None:
            raise ModelError("model file: constant is null (a rational number is needed)")
        if biased:
            return cls(obj["heads"], d=d, constant=obj["constant"], bias=True)
        return cls(obj["heads"], d=d)

    @classmethod
    def _from_json_vector(cls, obj) -> "MultiHeadAttention":
        """An ``exactlearn.mha/3`` file: vector outputs (docs: reference/model-files.md)."""
        for key in ("d", "outputs", "heads", "constant"):
            if key not in obj:
                raise ModelError(f"model file: missing key {key!r} ({FORMAT_VECTOR})")
        d, m = obj["d"], obj["outputs"]
        for name, n in (("d", d), ("outputs", m)):
            if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
                raise ModelError(f"model file: {name} must be a positive integer, got {n!r}")
        if not isinstance(obj["heads"], list):
            raise ModelError("model file: 'heads' must be a list")
        check_model_size(d, len(obj["heads"]), what="model file")     # before any entry is read
        check_outputs_size(d, len(obj["heads"]), m)                   # m rows each, too
        for idx, h in enumerate(obj["heads"]):
            if not isinstance(h, dict) or not {"W", "v", "u"} <= set(h):
                raise ModelError(f"model file: head {idx + 1}: a head of {FORMAT_VECTOR} is "
                                 f'{{"W", "v", "u"}} with v a list of {m} rows')
        if not isinstance(obj["constant"], list):
            raise ModelError(f"model file: constant must be a list of {m} numbers ({FORMAT_VECTOR})")
        bias = obj.get("bias", True)
        if bias not in (True, False):
            raise ModelError(f"model file: bias must be true or false, got {bias!r}")
        return cls(obj["heads"], d=d, constant=obj["constant"], bias=bias, outputs=m)

    @classmethod
    def from_file(cls, path) -> "MultiHeadAttention":
        return cls.from_json(load_json(path))


def _exponent_entries(h):
    """The entries of W and u of a head: the score's coefficients, which D must clear."""
    for row in h.W:
        yield from row
    yield from h.u


# ---------------------------------------------------------------------------------
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


class _NotInt(Exception):
    """A token of a query is not all Python ints: the integer path does not apply."""


class HeadEvaluator:
    """Evaluates raw or recovered heads through a field (docs: explanation/algorithm.md#the-model-and-its-sign-convention).

    Work is in the number of *distinct* tokens (multiplicities weight them) and
    each head's ``W_h x_n`` is computed once per final token.  For an exact
    field and integer tokens it takes an integer fast path: with D clearing
    every W denominator, ``D * (x_i - x_n)^T W_h x_n`` is an integer n and the
    weight is ``K.power(n) = T^n`` -- the same value as ``K.exp(s)``.
    """

    def __init__(self, heads, d: int, field: Field, constant=None):
        self.d = d
        self.K = field
        P = field.param
        if constant is None:
            constant = constant_of(heads)
        #: the additive constant c in the field (docs: explanation/biases.md); None when 0
        self.constant = None if constant == 0 else field(constant)
        self.heads = [([[P(a) for a in row] for row in h.W], [P(a) for a in h.v], [P(a) for a in h.u])
                      for h in heads]
        self._biased = any(h.biased for h in heads)
        self._cache: dict = {}
        self._int = None
        self._int_mats = None
        # F_p (python-flint fmpz_mod): an inversion costs several products, so the heads
        # are summed as one fraction; over Q the per-head fractions stay reduced
        self._one_fraction = getattr(field, "scalar_ctx", None) is not None
        if field.is_exact and P.is_exact:
            D = field.D
            ok = all((x * D).denominator == 1 for h in heads for x in _exponent_entries(h))
            if ok:
                ints = []
                self._u_ints = [[int((x * D).numerator) for x in h.u] for h in heads]
                for h in heads:
                    Wn = [[int((x * D).numerator) for x in row] for row in h.W]
                    dv = lcm_of_denominators(h.v)
                    vn = [int((x * dv).numerator) for x in h.v]
                    if field.is_zero(field(dv)):
                        raise BadReduction(f"a v denominator ({dv}) vanishes in the {field.name} "
                                           f"field: a bad reduction (use another prime)")
                    ints.append((Wn, vn, field.one / field(dv)))
                self._int = ints

    def _final(self, final):
        got = self._cache.get(final)
        if got is None:
            P = self.K.param
            got = []
            for W, v, u in self.heads:
                wx = [sum((a * b for a, b in zip(row, final)), P.zero) for row in W]
                if self._biased:                                   # W x_n + u
                    wx = [a + b for a, b in zip(wx, u)]
                s_final = sum((a * b for a, b in zip(final, wx)), P.zero)
                got.append((wx, s_final, v))
            self._remember(final, got)
        return got

    def _final_int(self, final):
        """Per head ``(D W_h x_n, D x_n^T W_h x_n)`` for the final token, with the heads'
        ``D W_h x_n`` stacked as one python-flint ``fmpz_mat`` (cached per final token)."""
        key = ("int", final)
        got = self._cache.get(key)
        if got is None:
            if not all(type(a) is int for a in final):
                raise _NotInt
            if self._int_mats is None:
                self._int_mats = ([flint.fmpz_mat(Wn) for Wn, _, _ in self._int],
                                  flint.fmpz_mat([vn for _, vn, _ in self._int]))
            col = flint.fmpz_mat(self.d, 1, list(final))
            wxs = [Wm * col for Wm in self._int_mats[0]]                    # D W_h x_n
            WX = flint.fmpz_mat([[wx[r, 0] for r in range(self.d)] for wx in wxs])
            if self._biased:                                                # D (W_h x_n + u_h)
                WX = WX + flint.fmpz_mat(self._u_ints)
            s_final = [int(x) for x in (WX * col).entries()]                # D x_n^T W_h x_n
            got = (WX, s_final)
            self._remember(key, got)
        return got

    def _remember(self, key, value):
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[key] = value

    def _pairs(self, tokens):
        pairs, final = distinct_tokens(tokens)
        for t, _ in pairs:
            if len(t) != self.d:
                raise ValueError(f"token of length {len(t)} in a model with d={self.d}")
        return pairs, final

    def averages(self, tokens) -> list:
        """``[y_h(X)]``: each head's softmax average ``sum_i softmax_i(s_h) x_i`` of the tokens
        (field d-vectors), so that ``f(X) = sum_h v_h . y_h(X)`` (the Transformer's heads and
        the multi-modular confirmation use them).

        >>> from exactlearn.fields import QQ
        >>> HeadEvaluator([Head(((1,),), (1,))], 1, QQ.with_scale(1)).averages([(0,), (1,)])
        [[mpq(2,3)]]
        """
        K = self.K
        P = K.param
        pairs, final = self._pairs(tokens)
        if self._int:
            try:
                return self._averages_int(pairs, final)
            except _NotInt:                # a token that is not all ints: the general path
                pass
        pairs = [(tuple(P(a) for a in t), m) for t, m in pairs]
        out = []
        for wx, s_final, _ in self._final(tuple(P(a) for a in final)):
            num = [K.zero] * self.d
            den = K.zero
            for tok, mult in pairs:
                s = sum((a * b for a, b in zip(tok, wx)), P.zero) - s_final
                w = K.exp(s) * mult
                num = [n + w * K(a) for n, a in zip(num, tok)]
                den = den + w
            out.append([n / den for n in num])
        return out

    def _averages_int(self, pairs, final):
        """:meth:`averages` by the integer path: the weight of token x_i for head h is
        ``T^(D (x_i - x_n)^T W_h x_n)`` -- the integer ``D s`` that ``K.exp(s)`` raises T to,
        from the stacked ``D W_h x_n`` (one ``fmpz_mat`` product per token) -- so the same
        field elements as the general path."""
        K = self.K
        if not all(type(a) is int for t, _ in pairs for a in t):
            raise _NotInt
        WX, s_final = self._final_int(final)
        power = K.power
        m = len(self._int)
        num = [[K.zero] * self.d for _ in range(m)]
        den = [K.zero] * m
        for tok, mult in pairs:
            scores = (WX * flint.fmpz_mat(self.d, 1, list(tok))).entries()
            xs = [K(a) for a in tok]
            for h in range(m):
                w = power(int(scores[h]) - s_final[h]) * mult
                num[h] = [n + w * x for n, x in zip(num[h], xs)]
                den[h] = den[h] + w
        return [[n / den[h] for n in num[h]] for h in range(m)]

    def __call__(self, tokens):
        try:
            y = self._value(tokens)
            return y if self.constant is None else y + self.constant
        except ZeroDivisionError:
            raise BadReduction(f"a softmax denominator vanishes in the {self.K.name} field on a "
                               f"query of length {len(tokens)}: a bad reduction (use another or a "
                               f"larger prime)") from None

    def _value(self, tokens):
        K = self.K
        pairs, final = self._pairs(tokens)
        if self._int is not None:
            try:
                return self._call_int(pairs, final)
            except _NotInt:                # a token that is not all ints: the general path
                pass
        P = K.param
        pairs = [(tuple(P(a) for a in t), m) for t, m in pairs]
        total = K.zero
        for wx, s_final, v in self._final(tuple(P(a) for a in final)):
            num = K.zero
            den = K.zero
            for tok, mult in pairs:
                s = sum((a * b for a, b in zip(tok, wx)), P.zero) - s_final
                w = K.exp(s) * mult
                num = num + w * K(sum((a * b for a, b in zip(v, tok)), P.zero))
                den = den + w
            total = total + num / den
        return total

    def _call_int(self, pairs, final):
        """f(X) by the integer path: per head, ``num_h / den_h`` with
        ``num_h = sum_i m_i w_{h,i} v_h.x_i / dv_h`` and ``den_h = sum_i m_i w_{h,i}``
        (``w = T^n``), summed -- over F_p as one fraction (one inversion per query)."""
        K = self.K
        if not self._int:
            return K.zero
        fin = self._final_int(final)
        terms = [(self._token_terms(tok, final, fin), None if mult == 1 else K(mult))
                 for tok, mult in pairs]
        one_fraction = self._one_fraction
        N = K.zero
        Dn = K.one
        if one_fraction and len(terms) == 2 and terms[1][1] is None and pairs[1][0] == final:
            # the plan's queries (a^m, x), x once: in partial fractions in m,
            # f = sum_h A_h + sum_h eps_h / (m + z_h) (see _partial_fractions)
            a = pairs[0][0]
            SA, pf = self._partial_fractions(a, final, terms[0][0], terms[1][0])
            m = K.one if terms[0][1] is None else terms[0][1]
            for z, eps in pf:
                u = m + z
                N = N * u + eps * Dn
                Dn = Dn * u
            return SA + N / Dn
        for h in range(len(self._int)):
            num = K.zero
            den = K.zero
            for tt, mult in terms:
                w, wv, _ = tt[h]
                if mult is None:
                    num = num + wv
                    den = den + w
                else:
                    num = num + wv * mult
                    den = den + w * mult
            if one_fraction:
                N = N * den + num * Dn
                Dn = Dn * den
            else:                      # over Q: one reduced fraction per head, as before
                N = N + num / den
        return N / Dn if one_fraction else N

    def _partial_fractions(self, a, x, ta, tx):
        """For the two-token queries (a^m, x): with per head ``w`` (the weight of a),
        ``A = v.a / dv`` and ``B = v.x / dv``, ``(m w A + B) / (m w + 1) = A + eps / (m + z)``
        where ``z = 1 / w`` and ``eps = (B - A) / w``; returns ``(sum_h A_h, [(z_h, eps_h)])``
        (cached per (a, x))."""
        key = ("pf", a, x)
        got = self._cache.get(key)
        if got is None:
            K = self.K
            SA = K.zero
            pf = []
            for (w, _, A), (_, b, _) in zip(ta, tx):
                z = K.one / w
                SA = SA + A
                pf.append((z, (b - A) * z))
            got = (SA, pf)
            self._remember(key, got)
        return got

    def _token_terms(self, tok, final, fin):
        """Per head ``(w, w A, A)``, ``A = v_h.x_i / dv_h``, for one token x_i and final token x_n, with
        ``w = T^(D (x_i - x_n)^T W_h x_n)`` (cached per (token, final token); the dot
        products of all heads are two ``fmpz_mat`` products)."""
        key = (tok, final)
        got = self._cache.get(key)
        if got is None:
            if not all(type(a) is int for a in tok):
                raise _NotInt
            K = self.K
            power = K.power
            WX, s_final = fin
            col = flint.fmpz_mat(self.d, 1, list(tok))
            scores = (WX * col).entries()
            vdots = (self._int_mats[1] * col).entries()
            got = []
            for (_, _, inv_dv), sc, sf, vd in zip(self._int, scores, s_final, vdots):
                w = power(int(sc) - sf)
                A = K(int(vd)) * inv_dv
                got.append((w, w * A, A))
            self._remember(key, got)
        return got

    def family(self, a, x):
        """Per head ``(w_h, A_h, B_h)`` with ``f(a^k, x) = sum_h (k w_h A_h + B_h) / (k w_h + 1)``
        for tokens ``a != x`` (integer path only; None otherwise): ``w_h = T^(D (a - x)^T W_h x)``,
        ``A_h = v_h.a`` and ``B_h = v_h.x`` in the field.  The certificate of a plan
        (:func:`exactlearn.pipeline.certify.certify_plan`) evaluates whole query families
        from it.

        >>> from exactlearn.fields import Modular
        >>> K = Modular(p=97, scale=1)
        >>> ev = HeadEvaluator([Head(((1,),), (3,))], 1, K)
        >>> (w, A, B), = ev.family((2,), (1,))
        >>> (2 * w * A + B) / (2 * w + 1) == ev([(2,), (2,), (1,)])
        True
        """
        a, x = tuple(a), tuple(x)
        if not self._int or a == x or len(a) != self.d or len(x) != self.d:
            return None
        try:
            fin = self._final_int(x)
            ta, tx = self._token_terms(a, x, fin), self._token_terms(x, x, fin)
        except _NotInt:
            return None
        return [(w, A, B) for (w, _, A), (_, B, _) in zip(ta, tx)]

    def families(self, pairs) -> list:
        """``[self.family(a, x) for a, x in pairs]``, batched: the pairs are grouped by final
        token x, and per group two ``fmpz_mat`` products give every head's exponent
        ``D (a - x)^T W_h x`` (the stacked ``D W_h x`` times the columns ``a - x``) and
        every ``v_h . a`` (the stacked v numerators times the columns a) -- the same
        integers :meth:`family` computes pair by pair, so the same ``(w_h, A_h, B_h)``.
        A pair :meth:`family` treats apart (a == x, a wrong length, a token not all
        ints) goes through :meth:`family`; an exception is raised as :meth:`family`
        would raise it (the certificate then goes pair by pair).

        >>> from exactlearn.fields import Modular
        >>> K = Modular(p=97, scale=1)
        >>> ev = HeadEvaluator([Head(((1, 2), (0, 1)), (3, 1)), Head(((0, 1), (1, 1)), (1, 5))], 2, K)
        >>> pairs = [((2, 1), (1, 1)), ((0, 3), (1, 1)), ((1, 1), (1, 1)), ((3, 0), (1, 2))]
        >>> ev.families(pairs) == [ev.family(a, x) for a, x in pairs]
        True
        """
        out: list = [None] * len(pairs)
        groups: dict = {}
        d = self.d
        for n, (a, x) in enumerate(pairs):
            a, x = tuple(a), tuple(x)
            if (not self._int or a == x or len(a) != d or len(x) != d
                    or not all(type(t) is int for t in a) or not all(type(t) is int for t in x)):
                out[n] = self.family(a, x)
            else:
                groups.setdefault(x, []).append((n, a))
        if not groups:
            return out
        K = self.K
        power = K.power
        inv_dvs = [inv_dv for _, _, inv_dv in self._int]
        for x, items in groups.items():
            WX, _ = self._final_int(x)                      # D W_h x, stacked (m x d)
            cols = len(items)
            diff = flint.fmpz_mat(d, cols, [a[r] - x[r] for r in range(d) for _, a in items])
            toks = flint.fmpz_mat(d, cols, [a[r] for r in range(d) for _, a in items])
            S = (WX * diff).entries()                       # S[h * cols + t] = D (a_t - x)^T W_h x
            VA = (self._int_mats[1] * toks).entries()       # v_h numerators . a_t
            VB = (self._int_mats[1] * flint.fmpz_mat(d, 1, list(x))).entries()
            Bs = [K(int(vb)) * inv for vb, inv in zip(VB, inv_dvs)]
            m = len(inv_dvs)
            for t, (n, _) in enumerate(items):
                out[n] = [(power(int(S[h * cols + t])), K(int(VA[h * cols + t])) * inv_dvs[h], Bs[h])
                          for h in range(m)]
        return out


class VectorEvaluator:
    """Evaluates heads with matrix v (vector outputs, docs: explanation/biases.md#vector-outputs):
    one :class:`HeadEvaluator` per output on its heads' row j and constant entry j, so each
    output takes the scalar paths (the integer path included).  ``ev(tokens)`` is the list of
    the m outputs.

    >>> from exactlearn.fields import QQ
    >>> ev = VectorEvaluator([Head(((0,),), ((1,), (2,)))], 1, QQ.with_scale(1), (3, 0))
    >>> ev([(1,), (3,)])
    [mpq(5,1), mpq(4,1)]
    """

    def __init__(self, heads, d: int, field: Field, constant=None):
        heads = list(heads)
        m = len(constant) if constant is not None else heads[0].outputs
        self.outputs = m
        self.d = d
        self.K = field
        self.rows = [HeadEvaluator([h.row(j) for h in heads], d, field,
                                   0 if constant is None else constant[j]) for j in range(m)]

    def __call__(self, tokens) -> list:
        return [ev(tokens) for ev in self.rows]


def evaluator(heads, d: int, field: Field, constant=None, outputs: int | None = None):
    """A :class:`HeadEvaluator`, or a :class:`VectorEvaluator` for ``outputs`` m."""
    if outputs is None:
        return HeadEvaluator(heads, d, field, constant)
    if constant is None or not isinstance(constant, (tuple, list)):
        constant = tuple(0 for _ in range(outputs))
    return VectorEvaluator(heads, d, field, constant)
