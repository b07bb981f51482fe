"""The multi-head attention model: exact weights, evaluation, model files (docs: reference/model-files.md).

:class:`MultiHeadAttention` holds the heads as given (rationals), their canonical form
(:func:`~exactlearn.model.heads.canonicalize`) and the model file formats.
"""

from __future__ import annotations

from typing import Sequence

from exactlearn.errors import ExactnessError, ModelError
from exactlearn.fields.base import (Field, as_mpq, format_rational, lcm_of_denominators,
                                    scale_limit)
from exactlearn.io import check_format, dump_json, exact_matrix, exact_vector, load_json
from exactlearn.limits import check_model_size, check_outputs_size, readable_int
from exactlearn.model.evaluate import evaluator
from exactlearn.model.heads import Head, canonicalize, exponent_entries, is_matrix

FORMAT = "exactlearn.mha/1"

#: The model file format with biases: per-head ``u`` and a top-level ``constant``
#: (docs: explanation/biases.md).
FORMAT_BIAS = "exactlearn.mha/2"

#: The model file format with vector outputs: ``outputs`` m, per-head ``v`` an m x d matrix,
#: ``u``, and a top-level length-m ``constant`` (docs: explanation/biases.md#vector-outputs).
FORMAT_VECTOR = "exactlearn.mha/3"



class MultiHeadAttention:
    """A multi-head attention model with exact rational weights.

    ``f(X) = c + sum_h sum_i softmax_i(x_i^T W_h x_n + u_h^T x_i) v_h . x_i`` (u and c
    zero without biases; docs: explanation/biases.md).

    Parameters
    ----------
    heads : sequence
        ``(W, v)`` pairs, ``(W, v, u)`` triples, ``{"W", "v"[, "u"]}`` dicts or
        :class:`~exactlearn.model.Head` objects: W a d x d nested list, v a list of d
        (an m x d nested list with ``outputs=m``), u a list of d; entries are ints,
        Fractions, mpq, or ``"p/q"``/decimal strings.
    d : int, optional
        The token dimension (positive), read off the first head when not given (a model
        without heads needs it).
    constant : number or sequence, optional
        The additive constant c, an entry as above (a length-m vector with ``outputs=m``;
        default 0).
    bias : bool, optional
        Whether the model has biases (written as ``exactlearn.mha/2``); default: a constant
        or a head's u was given.
    outputs : int, optional
        m for vector outputs (a positive integer; docs:
        explanation/biases.md#vector-outputs): ``evaluate`` returns the m outputs;
        ``output(j)`` is output j as a scalar model.

    Raises
    ------
    ModelError
        One line (a ValueError), for a head or entry of the wrong shape or kind (naming the
        head and entry), or a ``d`` or ``outputs`` that is not a positive integer.

    Examples
    --------
    >>> from exactlearn.fields import Rational
    >>> MultiHeadAttention([([[0]], [[1], [2]])], outputs=2).evaluate([[0], [3]], Rational())
    [mpq(3,2), mpq(3,1)]
    >>> m = MultiHeadAttention([([[0]], [1], [1])], constant=5)
    >>> m.bias, m.evaluate([[0], [1]], Rational()) == 5 + Rational(scale=1).exp(1) / (1 + Rational(scale=1).exp(1))
    (True, True)
    """

    def __init__(self, heads: Sequence, d: int | None = None, constant=None, bias: bool | None = None,
                 outputs: int | None = None):
        if isinstance(heads, (str, bytes, dict)) or not hasattr(heads, "__iter__"):
            raise ModelError(f"heads must be a list of heads (pairs (W, v) or triples (W, v, u)), "
                             f"got a {type(heads).__name__}")
        heads = list(heads)
        if outputs is not None and (isinstance(outputs, bool) or not isinstance(outputs, int)
                                    or outputs <= 0):
            raise ModelError(f"outputs must be a positive integer, got {outputs!r}")
        if d is None:
            if not heads:
                raise ModelError("a model without heads needs an explicit d")
            first = heads[0]
            try:
                v = first.v if isinstance(first, Head) else (
                    first["v"] if isinstance(first, dict) and "v" in first else first[1])
                d = len(v[0]) if outputs is not None and is_matrix(v) else len(v)
            except (TypeError, IndexError, KeyError):
                raise ModelError("head 1: expected a pair (W, v) or a triple (W, v, u)") from None
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
            self.constant = exact_vector([constant], 1, "constant")[0]
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

    def scale(self, max_digits: int | None = None) -> int:
        """lcm of the denominators of the *raw* heads' W entries: the D of docs: howto/field-and-range.md#number-systems-fields.

        Taken from the heads as written, so that the oracle evaluates the model
        it was given -- every raw head, cancelling or merging ones included --
        and never a substitute for it (docs: howto/field-and-range.md#number-systems-fields).  A canonical head's
        W is a raw head's W, so D also realises the canonical form.  ``max_digits``: refuse
        (:class:`~exactlearn.errors.ExactnessError`) as soon as D gets longer (an exact field's
        :func:`~exactlearn.fields.base.scale_limit`).

        >>> MultiHeadAttention([([["1/3", 0], [0, 1]], [1, 1]), ([["1/3", 0], [0, 1]], [-1, -1]),
        ...                     ([["1/2", 0], [0, 0]], [1, 0])]).scale()
        6
        """
        return lcm_of_denominators((x for h in self.heads for x in exponent_entries(h)),
                                   max_digits)

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
            field = field.with_scale(self.scale(scale_limit(field)))
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
                if any((x * D).denominator != 1 for x in exponent_entries(h)):
                    need = lcm_of_denominators(exponent_entries(h))
                    raise ExactnessError(
                        f"the {field.name} field's scale D = {D} does not clear the W (and u) denominators "
                        f"of head {idx + 1} (they need a multiple of {need}); leave the scale on "
                        f"auto (D = {readable_int(self.scale())}) or choose a multiple of it")

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
            check_format(obj, (FORMAT, FORMAT_BIAS, FORMAT_VECTOR), default=FORMAT)
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
        model = cls(obj["heads"], d=d, constant=obj["constant"], bias=bias, outputs=m)
        if not bias and (any(model.constant) or any(h.biased for h in model.heads)):
            where = next((f"head {k + 1}'s u" for k, h in enumerate(model.heads) if h.biased),
                         "the constant")
            raise ModelError(f"model file: \"bias\": false, but {where} is not zero "
                             f"(write \"bias\": true, or zeros)")
        return model

    @classmethod
    def from_file(cls, path) -> "MultiHeadAttention":
        return cls.from_json(load_json(path))


