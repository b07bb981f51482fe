"""What the adapters share (exactlearn.adapters.common; docs/howto/torch-jax-layer.md), without
torch or flax: the canonical map from weight blocks, the dtype rule, the length-grouped batch."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from exactlearn.adapters.common import LayerBox, canonical_parameters, token_dtypes
from exactlearn.errors import ModelError

from adapter_truth import evaluate


def numpy_layer(rng, d=4, H=2, bias=True):
    """A self-attention written the textbook way (full sequence), and its blocks."""
    dh = d // H
    Wq, Wk, Wv, Wo = (rng.normal(0, 0.5, (d, d)) for _ in range(4))
    bq, bk, bv, bo = (rng.normal(0, 0.5, d) if bias else np.zeros(d) for _ in range(4))

    def forward(X):
        q, k, v = X @ Wq.T + bq, X @ Wk.T + bk, X @ Wv.T + bv
        ctx = []
        for h in range(H):
            sl = slice(h * dh, (h + 1) * dh)
            s = k[:, sl] @ q[-1, sl] / np.sqrt(dh)
            a = np.exp(s - s.max())
            ctx.append((a / a.sum()) @ v[:, sl])
        return Wo @ np.concatenate(ctx) + bo

    blocks = (Wq.reshape(H, dh, d), bq.reshape(H, dh), Wk.reshape(H, dh, d), bk.reshape(H, dh),
              Wv.reshape(H, dh, d), bv.reshape(H, dh), Wo, bo)
    return forward, blocks


@pytest.mark.parametrize("bias", [True, False])
def test_canonical_parameters_reproduce_a_textbook_layer(bias):
    rng = np.random.default_rng(1)
    forward, blocks = numpy_layer(rng, bias=bias)
    r = rng.normal(size=4)
    t, tv = canonical_parameters(*blocks, readout=r), canonical_parameters(*blocks)
    assert t.has_bias == bias and t.v.shape == (2, 4) and tv.v.shape == (2, 4, 4)
    for X in [rng.normal(size=(n, 4)) for n in (1, 3, 8)]:
        assert abs(evaluate(t, X) - r @ forward(X)) < 1e-12
        assert np.max(np.abs(evaluate(tv, X) - forward(X))) < 1e-12


def test_heads_carry_the_biases_and_give_matrix_v_without_a_readout():
    """A biased layer's heads() is the canonical HeadSet with u and the constant c, and that
    model (exactlearn's own evaluator over the real field) reproduces the layer's forward;
    without a readout each v is the m x d matrix O_h V_h (vector outputs)."""
    from fractions import Fraction

    from exactlearn.fields import Real
    from exactlearn.model import MultiHeadAttention
    rng = np.random.default_rng(2)
    forward, blocks = numpy_layer(rng, bias=True)
    r = rng.normal(size=4)
    heads = canonical_parameters(*blocks, readout=r).heads()
    assert heads.bias and heads.constant != 0 and any(h.biased for h in heads)
    model = MultiHeadAttention(list(heads), d=4, constant=heads.constant, bias=True)
    assert model.canonical_heads() == heads
    for X in [rng.normal(size=(n, 4)) for n in (1, 3, 8)]:
        y = float(model.evaluate([[Fraction(float(a)) for a in t] for t in X], Real(dps=30)))
        assert abs(y - r @ forward(X)) < 1e-12
    _, blocks = numpy_layer(rng, bias=False)
    vector = canonical_parameters(*blocks).heads()      # v_h = O_h V_h, m x d (vector outputs)
    assert len(vector) == 2 and all(len(h.v) == 4 and len(h.v[0]) == 4 for h in vector)
    heads = canonical_parameters(*blocks, readout=np.ones(4)).heads()
    assert len(heads) == 2 and all(len(h.W) == 4 for h in heads)


def test_tokens_of_another_dtype_are_refused_or_converted_exactly():
    seen = []

    def forward(stack):
        seen.append(stack.dtype)
        return stack[:, -1, :2]

    box = LayerBox(forward, 2, 2, [1.0, 1.0], *token_dtypes("float32", None))
    assert box(np.array([[0.5, 0.25]], np.float32)) == 0.75 and seen == [np.float32]
    with pytest.raises(ModelError, match="takes float32 tokens, got float64") as e:
        box(np.array([[0.5, 0.25]]))
    assert "\n" not in str(e.value)
    with pytest.raises(ModelError, match=r"got object: call learn\(\.\.\., tokens='float32'\)$"):
        box([(Fraction(1, 2), Fraction(1, 4))])         # exact tokens (learn's default)
    conv = LayerBox(forward, 2, 2, None, *token_dtypes("float32", "float64"))
    assert conv(np.array([[0.5, 0.25]])).dtype == np.float32
    with pytest.raises(ModelError, match="not exactly a float32"):
        conv(np.array([[0.1, 0.25]]))
    with pytest.raises(ModelError, match="float32 or float64"):
        token_dtypes("float16", None)
    with pytest.raises(ModelError, match="computes in bfloat16: .* float32 or float64"):
        token_dtypes("bfloat16", None)          # unknown to numpy: was taken for float64
    with pytest.raises(ModelError, match="length 2"):
        LayerBox(forward, 2, 2, [1.0], *token_dtypes("float64", None))
    with pytest.raises(ModelError, match="dimension 2"):
        LayerBox(forward, 2, 2, None, *token_dtypes("float64", None))(np.ones((3, 3)))


def test_batch_runs_one_forward_per_length_in_query_order():
    calls = []

    def forward(stack):
        calls.append(stack.shape)
        return stack.sum(axis=1)                # (B, d): one output row per query

    box = LayerBox(forward, 2, 2, [1.0, -1.0], *token_dtypes("float64", None))
    rng = np.random.default_rng(3)
    qs = [rng.normal(size=(n, 2)) for n in (3, 5, 3, 1, 5, 3)]
    got = box.batch(qs)
    assert sorted(calls) == [(1, 1, 2), (2, 5, 2), (3, 3, 2)]
    assert got == [np.float64(X.sum(axis=0) @ [1.0, -1.0]) for X in qs]
