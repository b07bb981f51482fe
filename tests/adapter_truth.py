"""The biased model class evaluated in numpy float64, apart from exactlearn and the adapters'
forwards (tests/test_adapters_*.py).

``f(X) = c + sum_h sum_i softmax_i(x_i^T W_h x_n + u_h^T x_i) v_h^T x_i`` from the arrays of a
``TrueHeads`` (v of shape (H, d) gives a scalar, (H, m, d) a length-m vector).
"""

from __future__ import annotations

import numpy as np


def evaluate(t, X):
    X = np.asarray(X, dtype=np.float64)
    s = np.einsum("ic,hcr,r->hi", X, t.W, X[-1]) + np.einsum("hc,ic->hi", t.u, X)
    a = np.exp(s - s.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)
    if t.v.ndim == 2:
        return float(t.c) + float(np.sum(a * np.einsum("hc,ic->hi", t.v, X)))
    return t.c + np.einsum("hi,hmc,ic->m", a, t.v, X)


def random_tokens(rng, d, lengths=(1, 2, 5, 9)):
    return [rng.normal(0.0, 1.0, (n, d)) for n in lengths]


class Counting:
    """A box that counts what it answers (``answered``: one per call, the batch's length per
    batch), to compare with ``learn()``'s ``res.queries``."""

    def __init__(self, box):
        self.box, self.answered = box, 0

    def __call__(self, X):
        self.answered += 1
        return self.box(X)

    def batch(self, queries):
        self.answered += len(queries)
        return self.box.batch(queries)
