"""Float attention layers written independently of exactlearn's oracle code (numpy only).

They are what a user points exactlearn at: a multi-head attention layer computed in
float64 (or float32) by numpy, no biases, the readout at the final token
(arXiv:2608.03294; docs: explanation/algorithm.md#the-model-and-its-sign-convention): score
``s_{h,i} = x_i^T W_h x_n``, output ``sum_h sum_i softmax_i(s_h) v_h.x_i``.  Tokens
arrive as a 2-D float array (one row per token); the output is a numpy scalar.

``NumpyAttention.from_seed(d, H, seed, std)`` draws the weights ~ N(0, std^2) and the
exact rationals of those floats are the model's true parameters (``exact_heads``), so
a learned result can be compared with the truth computed apart.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np


class NumpyAttention:
    """``heads``: a list of ``(W, v)`` float arrays.  ``dtype`` float64 or float32: every
    input, weight and intermediate result is in that precision (numpy's own arithmetic)."""

    def __init__(self, heads, dtype=np.float64):
        self.dtype = np.dtype(dtype)
        self.W = np.stack([np.asarray(W, dtype=self.dtype) for W, _ in heads])
        self.v = np.stack([np.asarray(v, dtype=self.dtype) for _, v in heads])
        self.calls = 0

    @classmethod
    def from_seed(cls, d, H, seed, std=0.5, dtype=np.float64):
        rng = np.random.default_rng(seed)
        W = rng.normal(0.0, std, (H, d, d)).astype(dtype)
        v = rng.normal(0.0, std, (H, d)).astype(dtype)
        return cls(list(zip(W, v)), dtype)

    def __call__(self, X):
        self.calls += 1
        X = np.asarray(X, dtype=self.dtype)
        xn = X[-1]
        s = np.einsum("ic,hcr,r->hi", X, self.W, xn)          # x_i^T W_h x_n
        s = s - s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p = p / p.sum(axis=1, keepdims=True)
        u = np.einsum("hc,ic->hi", self.v, X)                  # v_h . x_i
        return (p * u).sum()

    def exact_heads(self):
        """The true parameters as exact rationals: ``[(W rows, v)]`` of Fractions."""
        return [([[Fraction(float(a)) for a in row] for row in W], [Fraction(float(a)) for a in v])
                for W, v in zip(self.W, self.v)]


class BatchedAttention(NumpyAttention):
    """The same layer with a batch interface: ``batch(queries)`` answers a list of token
    arrays at once (what a jitted or GPU model offers); ``batches`` counts the calls."""

    def __init__(self, heads, dtype=np.float64):
        super().__init__(heads, dtype)
        self.batches = 0

    def batch(self, queries):
        self.batches += 1
        return [self(X) for X in queries]
