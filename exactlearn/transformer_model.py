"""One-layer Transformer: multi-head attention, then a bias-free ReLU FFN (arXiv:2608.03294, one-layer Transformer; docs: howto/transformer.md).

Model (file format ``exactlearn.transformer/1``)::

    T(X) = sum_j u_j ReLU(b_j . z(X)),
    z(X) = sum_h sum_i softmax_i(x_i^T W_h x_n) O_h x_i          (key left, query right)

with W_h (d x d), O_h (m x d), B = [b_1 ... b_r]^T (r x m), u (r).  Writing
``y_h(X) = sum_i softmax_i(x_i^T W_h x_n) x_i`` for head h's average token and
``gamma_{jh} = O_h^T b_j`` for what neuron j reads from head h,

    T(X) = sum_j u_j ReLU(sum_h gamma_{jh} . y_h(X)) .

Functional equivalence allows: merging heads with equal W (their O add),
dropping heads no neuron reads, positive scaling of a neuron
(``u ReLU(b.z) = (u/c) ReLU(c b.z)``, c > 0), merging neurons whose
``(gamma_{j1}, ..., gamma_{jH})`` are positively parallel, dropping null
neurons, and any factorisation ``gamma_{jh} = O_h^T b_j`` (so m is free).
:mod:`exactlearn.strategies.transformer.learn` recovers T up to exactly these freedoms.

Learning (:mod:`exactlearn.strategies.transformer.learn`) recovers such a model up to
these freedoms from value queries under stated conditions: every neuron is
switched by single tokens (beta_j = sum_h O_h^T b_j != 0), neurons sharing a
hyperplane have parallel gammas, the final token can be made to dominate in
every cone crossed, and draws are generic; failures are explicit.

ReLU needs a sign.  Evaluation is therefore defined over *ordered* fields
only: the rational field (exact sign) and the real field (a pre-activation
within the field's own ``tol`` of 0 counts as 0).  The modular and symbolic
fields have no order compatible with the model and are refused with
:class:`NotOrdered`.

>>> from exactlearn.fields import Rational
>>> T = OneLayerTransformer([([[1, 0], [0, 1]], [[1, 0], [0, 1]])], B=[[1, 0], [0, -1]], u=[1, "1/2"])
>>> T.evaluate([[1, 2]], Rational()), T.evaluate([[1, -2]], Rational())
(mpq(1,1), mpq(2,1))
>>> T.evaluate([[2, 0], [0, 1]], Rational())        # softmax weights 2^0, 2^1 over base 2
mpq(2,3)
"""

from __future__ import annotations

import random
from fractions import Fraction

from exactlearn.fields.base import Field, FieldError, as_mpq, format_rational, lcm_of_denominators
from exactlearn.limits import check_model_size
from exactlearn.io import check_format, dump_json, exact_matrix, exact_vector, load_json
from exactlearn.model import Head, HeadEvaluator, ModelError, distinct_tokens
from exactlearn.errors import NotOrdered

FORMAT = "exactlearn.transformer/1"

# (its box, ``TransformerOracle``, is in :mod:`exactlearn.oracle`, a layer above)
__all__ = ["OneLayerTransformer", "TransformerEvaluator", "NotOrdered",
           "FORMAT", "relu", "sign", "random_transformer"]


# ------------------------------------------------------------------ sign and ReLU
def require_ordered(K: Field) -> None:
    if not K.is_ordered:
        raise NotOrdered(f"the one-layer Transformer needs ReLU, i.e. a sign decision, which the "
                         f"{K.name} field cannot make; use --field rational or --field real")


def sign(K: Field, z, scale=None):
    """Sign of a field element: -1, 0 or 1; None when the real field cannot decide
    (:meth:`~exactlearn.fields.base.Field.sign`)."""
    require_ordered(K)
    return K.sign(z, scale)


def relu(K: Field, z):
    """max(z, 0) in an ordered field (real field: |z| <= tol counts as 0, error <= tol)."""
    require_ordered(K)
    return K.relu(z)


# ------------------------------------------------------------------ parsing helpers
def _posint(x, what):
    if isinstance(x, bool) or not isinstance(x, int) or x <= 0:
        raise ModelError(f"{what} must be a positive integer, got {x!r}")
    return x


# ------------------------------------------------------------------ the model
class OneLayerTransformer:
    """Attention heads ``(W_h, O_h)`` and a bias-free ReLU FFN ``(B, u)``, exact rationals.

    Parameters
    ----------
    heads : list
        ``(W, O)`` pairs or ``{"W": ..., "O": ...}`` dicts: W is d x d, O is m x d; entries
        are ints, Fractions, mpq or ``"p/q"``/decimal strings.
    B : list
        The r x m matrix of the neurons' input weights.
    u : list
        The r output weights of the neurons.
    d, m : int, optional
        Read off the first head (and B) when not given.
    """

    def __init__(self, heads, B, u, d: int | None = None, m: int | None = None):
        heads = list(heads)
        pairs = []
        for idx, h in enumerate(heads):
            if isinstance(h, dict):
                if "W" not in h or "O" not in h:
                    raise ModelError(f"head {idx + 1}: missing key 'W' or 'O'")
                pairs.append((h["W"], h["O"]))
            else:
                try:
                    W, O = h
                except (TypeError, ValueError):
                    raise ModelError(f"head {idx + 1}: expected a pair (W, O)") from None
                pairs.append((W, O))
        if d is None:
            if not pairs or not isinstance(pairs[0][0], (list, tuple)):
                raise ModelError("a model without heads needs an explicit d")
            d = len(pairs[0][0])
        if m is None:
            if pairs and isinstance(pairs[0][1], (list, tuple)):
                m = len(pairs[0][1])
            elif isinstance(B, (list, tuple)) and B and isinstance(B[0], (list, tuple)):
                m = len(B[0])
            else:
                raise ModelError("a model without heads or neurons needs an explicit m")
        self.d = _posint(d, "d")
        self.m = _posint(m, "m")
        self.heads = tuple((exact_matrix(W, self.d, self.d, f"head {i + 1}: W"),
                            exact_matrix(O, self.m, self.d, f"head {i + 1}: O"))
                           for i, (W, O) in enumerate(pairs))
        if not isinstance(B, (list, tuple)):
            raise ModelError("ffn: B must be a list of rows")
        if not isinstance(u, (list, tuple)):
            raise ModelError("ffn: u must be a list")
        if len(u) != len(B):
            raise ModelError(f"ffn: B has {len(B)} rows but u has {len(u)} entries")
        self.B = tuple(exact_vector(b, self.m, f"ffn: B row {j + 1}") for j, b in enumerate(B))
        self.u = exact_vector(u, len(B), "ffn: u")

    # ---- structure --------------------------------------------------------------
    @property
    def H(self) -> int:
        return len(self.heads)

    @property
    def r(self) -> int:
        """Number of FFN neurons."""
        return len(self.B)

    def gammas(self) -> tuple:
        """``gamma[j][h] = O_h^T b_j`` (a d-vector): what neuron j reads from head h."""
        return tuple(tuple(tuple(sum((O[k][c] * b[k] for k in range(self.m)), as_mpq(0))
                                 for c in range(self.d)) for _, O in self.heads) for b in self.B)

    def scale(self, max_digits: int | None = None) -> int:
        """lcm of the W denominators: the D of docs: howto/field-and-range.md#number-systems-fields
        (``max_digits`` as :meth:`exactlearn.model.MultiHeadAttention.scale`)."""
        return lcm_of_denominators((x for W, _ in self.heads for row in W for x in row),
                                   max_digits)

    def __eq__(self, other):
        return (isinstance(other, OneLayerTransformer) and self.d == other.d and self.m == other.m
                and self.heads == other.heads and self.B == other.B and self.u == other.u)

    def __repr__(self):
        return f"OneLayerTransformer(d={self.d}, m={self.m}, H={self.H}, r={self.r})"

    # ---- evaluation -------------------------------------------------------------
    def evaluate(self, tokens, field: Field):
        """T(X) in an ordered ``field`` (rational or real)."""
        return TransformerEvaluator(self, field)(tokens)

    # ---- files ------------------------------------------------------------------
    def to_json(self, fmt=format_rational) -> dict:
        return {"format": FORMAT, "d": self.d, "m": self.m,
                "heads": [{"W": [[fmt(x) for x in row] for row in W],
                           "O": [[fmt(x) for x in row] for row in O]} for W, O in self.heads],
                "ffn": {"B": [[fmt(x) for x in b] for b in self.B], "u": [fmt(x) for x in self.u]}}

    def dump(self, path) -> None:
        dump_json(self.to_json(), path)

    @classmethod
    def from_json(cls, obj) -> "OneLayerTransformer":
        """Parse the file format; every problem is a one-line :class:`ModelError`."""
        check_format(obj, FORMAT)
        for key in ("d", "m", "heads", "ffn"):
            if key not in obj:
                raise ModelError(f"model file: missing key {key!r}")
        d = _posint(obj["d"], "model file: d")
        m = _posint(obj["m"], "model file: m")
        if not isinstance(obj["heads"], list):
            raise ModelError("model file: 'heads' must be a list")
        ffn = obj["ffn"]
        if not isinstance(ffn, dict):
            raise ModelError("model file: 'ffn' must be an object with keys 'B' and 'u'")
        for key in ("B", "u"):
            if key not in ffn:
                raise ModelError(f"model file: ffn: missing key {key!r}")
        r = len(ffn["B"]) if isinstance(ffn["B"], list) else 0
        check_model_size(d, len(obj["heads"]), neurons=r, m=m, what="model file")
        return cls(obj["heads"], ffn["B"], ffn["u"], d=d, m=m)

    @classmethod
    def from_file(cls, path) -> "OneLayerTransformer":
        return cls.from_json(load_json(path))


class TransformerEvaluator:
    """Evaluates a :class:`OneLayerTransformer` through an ordered field.

    The head averages ``y_h(X)`` come from :meth:`exactlearn.model.HeadEvaluator.averages`
    (work in the number of distinct tokens, ``W_h x_n`` cached per final token);
    ``T(X) = sum_j u_j ReLU(sum_h gamma_jh . y_h(X))``.
    """

    def __init__(self, model: OneLayerTransformer, field: Field):
        require_ordered(field)
        self.model = model
        self.K = field
        self.d = model.d
        zero = tuple(0 for _ in range(model.d))
        self._heads = HeadEvaluator([Head(W, zero) for W, _ in model.heads], model.d, field)
        self.gamma = [[[field(c) for c in g] for g in row] for row in model.gammas()]
        self.u = [field(x) for x in model.u]

    def averages(self, tokens) -> list:
        """``[y_h(X)]``: each head's softmax average of the tokens (field d-vectors)."""
        return self._heads.averages(tokens)

    def __call__(self, tokens):
        K = self.K
        ys = self.averages(tokens)
        total = K.zero
        for gam, u in zip(self.gamma, self.u):
            pre = K.zero
            for g, y in zip(gam, ys):
                for a, b in zip(g, y):
                    pre = pre + a * b
            total = total + u * relu(K, pre)
        return total


def random_transformer(d: int, H: int, r: int, seed=None, w_range: int = 2,
                       num: int = 3, den: int = 3) -> OneLayerTransformer:
    """A random model of the acceptance distribution (m = d).

    Parameters
    ----------
    d : int
        The token dimension (and m, the heads' output size).
    H : int
        The number of heads ``(W_h, O_h)``.
    r : int
        The number of ReLU neurons (the rows of B, the entries of u).
    seed : int, optional
        Seeds ``random.Random(seed)``; the same seed gives the same model.
    w_range : int, default 2
        W entries are integers in ``[-w_range, w_range]``.
    num, den : int, default 3
        O, B and u entries are p/q with ``|p| <= num``, ``1 <= q <= den``.

    Returns
    -------
    OneLayerTransformer
        Drawn in the order W and O of each head, then B, then u.

    Raises
    ------
    ValueError
        One line (a ``ModelError``), before anything is drawn, when the model would be
        beyond :mod:`exactlearn.limits`.
    """
    check_model_size(d, H, neurons=r, m=d)          # before anything is drawn
    rng = random.Random(seed)

    def q():
        return Fraction(rng.randint(-num, num), rng.randint(1, den))

    heads = [([[rng.randint(-w_range, w_range) for _ in range(d)] for _ in range(d)],
              [[q() for _ in range(d)] for _ in range(d)]) for _ in range(H)]
    B = [[q() for _ in range(d)] for _ in range(r)]
    u = [q() for _ in range(r)]
    return OneLayerTransformer(heads, B, u, d=d, m=d)
