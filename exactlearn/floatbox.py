"""A model file evaluated in float64 or float32 by numpy: the float black box of
``exactlearn learn --tokens float64`` (docs: reference/cli.md, docs: howto/float-black-box.md).

:class:`FloatAttention` rounds the model's exact weights once to the float type and
evaluates the model's formula (docs: explanation/algorithm.md#the-model-and-its-sign-convention)
in that type, as a numpy layer would:

    f(X) = c + sum_h sum_i softmax_i(x_i^T W_h x_n + u_h^T x_i) v_h . x_i .

It takes the tokens :class:`~exactlearn.oracle.TokenAdapter` sends (a 2-D float array, one
row per token, or a list of lists of floats) and answers a numpy scalar of its float type
(a model of m outputs: a length-m array of it, docs: explanation/biases.md#vector-outputs);
it has no ``field`` (its answers are floats, read by the learner as their exact binary
values) and no counters of its own (the learner counts every query it asks).

>>> from exactlearn.model import MultiHeadAttention
>>> from exactlearn.fields import Real
>>> model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])])
>>> box = FloatAttention(model, "float64")
>>> y = box([[1.0, 0.0], [0.0, 1.0]])
>>> y.dtype.name, abs(float(y) - float(model.evaluate([[1, 0], [0, 1]], Real(dps=30)))) < 1e-15
('float64', True)
>>> FloatAttention(MultiHeadAttention([([[1]], [1])]), "float16")
Traceback (most recent call last):
...
exactlearn.errors.ModelError: the float box's type must be float64 or float32, got 'float16'
"""

from __future__ import annotations

import numpy as np

from exactlearn.errors import ModelError
from exactlearn.model import MultiHeadAttention

#: The float types a model file can be evaluated in.
FLOAT_TYPES = ("float64", "float32")


def _rounded(x, dtype):
    """An exact rational rounded once (correctly, through float64) to ``dtype``."""
    return dtype.type(float(x))


class FloatAttention:
    """``model`` (a :class:`~exactlearn.model.MultiHeadAttention`, biases included) evaluated
    in ``dtype`` (``"float64"`` or ``"float32"``): every weight, input and intermediate
    result in that precision.  ``float_heads()`` gives the rounded weights, as exact
    rationals, for comparing a learned result with what the box computes."""

    def __init__(self, model: MultiHeadAttention, dtype: str = "float64"):
        if dtype not in FLOAT_TYPES:
            raise ModelError(f"the float box's type must be {' or '.join(FLOAT_TYPES)}, got {dtype!r}")
        self.dtype = np.dtype(dtype)
        self.d = model.d
        heads = model.heads
        r = lambda xs: [_rounded(a, self.dtype) for a in xs]          # noqa: E731
        self.W = np.array([[r(row) for row in h.W] for h in heads], dtype=self.dtype).reshape(
            len(heads), model.d, model.d)
        #: m for a model of vector outputs (answers: an m-vector of ``dtype``), else None
        self.outputs = m = model.outputs
        vs = [h.v if m is None else [x for row in h.v for x in row] for h in heads]
        self.v = np.array([r(v) for v in vs], dtype=self.dtype).reshape(
            (len(heads), model.d) if m is None else (len(heads), m, model.d))
        self.u = np.array([r(h.u) for h in heads], dtype=self.dtype).reshape(len(heads), model.d)
        self.constant = (_rounded(model.constant, self.dtype) if m is None
                         else np.array(r(model.constant), dtype=self.dtype))

    def __call__(self, X):
        X = np.asarray(X, dtype=self.dtype)
        if X.ndim != 2 or X.shape[1] != self.d or X.shape[0] == 0:
            raise ModelError(f"the float box takes a non-empty (n, {self.d}) array of tokens, "
                             f"got shape {X.shape}")
        s = np.einsum("ic,hcr,r->hi", X, self.W, X[-1]) + np.einsum("hc,ic->hi", self.u, X)
        s = s - s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p = p / p.sum(axis=1, keepdims=True)
        if self.outputs is not None:            # head h's v is the m x d matrix v[h]
            out = np.einsum("hi,hjc,ic->j", p, self.v, X)
            return (out + self.constant).astype(self.dtype)
        out = (p * np.einsum("hc,ic->hi", self.v, X)).sum(dtype=self.dtype)
        return self.dtype.type(out + self.constant)

    def batch(self, queries) -> list:
        """One answer per query, in order."""
        return [self(X) for X in queries]

    def float_heads(self) -> list:
        """The rounded weights as exact rationals: ``[(W rows, v, u)]`` of ``fractions.Fraction``
        (v the rows of an m x d matrix for a model of vector outputs)."""
        from fractions import Fraction
        f = lambda a: Fraction(float(a))                                # noqa: E731
        vec = lambda v: [f(a) for a in v]                               # noqa: E731
        return [([vec(row) for row in W], vec(v) if v.ndim == 1 else [vec(row) for row in v],
                 vec(u)) for W, v, u in zip(self.W, self.v, self.u)]
