"""The Flax adapter (exactlearn.adapters.flax; docs/howto/torch-jax-layer.md).

``true_heads`` is checked against the layer's OWN ``apply`` (self-attention, every position,
then the last one) through the model class evaluated in numpy (tests/adapter_truth.py).
Skipped without jax and flax (the ``flax`` extra).  float64 needs JAX's x64 mode, switched on
here for this process (float32 layers are unaffected by it).
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
nn = pytest.importorskip("flax.linen")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp                                           # noqa: E402

from exactlearn import learn                                      # noqa: E402
from exactlearn.adapters import flax as fa                        # noqa: E402
from exactlearn.errors import ModelError                          # noqa: E402
from exactlearn.strategies.real.learn import max_parameter_error  # noqa: E402

from adapter_truth import Counting, evaluate, random_tokens        # noqa: E402


def layer(d, H, seed, bias=True, dtype=jnp.float64, std=0.5, **kw):
    mod = nn.MultiHeadDotProductAttention(num_heads=H, param_dtype=dtype, use_bias=bias, **kw)
    shapes = jax.eval_shape(mod.init, jax.random.key(seed), jnp.zeros((1, 2, d), dtype))
    rng = np.random.default_rng(seed)
    variables = jax.tree_util.tree_map(
        lambda a: jnp.asarray(rng.normal(0.0, std, a.shape), dtype), shapes)
    return mod, variables


def own_forward(mod, variables, X):
    """The layer's own self-attention apply (every position), at the last position."""
    return np.asarray(jax.jit(mod.apply)(variables, jnp.asarray(X)[None]))[0, -1]


@pytest.mark.parametrize("bias", [True, False])
def test_true_heads_reproduce_the_layers_own_apply(bias):
    mod, var = layer(6, 2, 0, bias=bias, qkv_features=8)       # d_h = 4, not d / H
    rng = np.random.default_rng(0)
    r = rng.normal(size=6)
    t, tv = fa.true_heads(mod, var, readout=r), fa.true_heads(mod, var["params"])
    box, boxv = fa.black_box(mod, var, readout=r), fa.black_box(mod, var)
    assert t.has_bias == bias and t.W.shape == (2, 6, 6)
    for X in random_tokens(rng, 6, (1, 4, 9)):
        out = own_forward(mod, var, X)
        assert abs(evaluate(t, X) - r @ out) < 1e-12
        assert np.max(np.abs(evaluate(tv, X) - out)) < 1e-12
        assert abs(box(X) - r @ out) < 1e-12
        assert np.max(np.abs(boxv(X) - out)) < 1e-12 and boxv(X).dtype == np.float64
    qs = random_tokens(rng, 6, (4, 9, 4, 1))
    for y, X in zip(box.batch(qs), qs):
        assert abs(y - r @ own_forward(mod, var, X)) < 1e-12


def test_float32_layer_and_no_silent_casting():
    mod, var = layer(4, 2, 1, dtype=jnp.float32)
    X = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    box = fa.black_box(mod, var)
    assert box(X).dtype == np.float32
    assert np.max(np.abs(box(X) - own_forward(mod, var, X))) < 1e-5
    with pytest.raises(ModelError, match="takes float32 tokens, got float64"):
        box(X.astype(np.float64))
    with pytest.raises(ModelError, match="not exactly a float32"):
        fa.black_box(mod, var, dtype="float64")(np.full((2, 4), 0.1))


def test_refused_layers():
    mod, var = layer(4, 2, 0, normalize_qk=True)
    with pytest.raises(ModelError, match="normalize_qk"):
        fa.black_box(mod, var)
    with pytest.raises(ModelError, match="MultiHeadDotProductAttention or a flax.nnx.MultiHeadAttention, got Dense"):
        fa.true_heads(nn.Dense(4), {})
    mod, var = layer(4, 2, 0)
    with pytest.raises(ModelError, match="params must be"):
        fa.black_box(mod, {"query": {}})


@pytest.mark.slow                    # ~20 s at load 9 on 2 cores: about 15 jit compilations
def test_learns_a_float64_flax_layer_through_the_adapter():
    mod, var = layer(4, 2, 3, bias=False, std=0.4)
    r = np.array([0.5, 1.0, -1.5, 0.75])
    box = fa.black_box(mod, var, readout=r)
    counting = Counting(box)

    res = learn(counting, d=4, heads=2, field="real", tokens="float64", seed=0, retries=2,
                noise=2e-12, noise_rel=2e-13)
    assert res.certified, res.error
    err, _ = max_parameter_error(res.heads, fa.true_heads(mod, var, readout=r).heads(), res.field)
    assert err <= res.error_bound and err <= 1e-9
    assert res.queries == counting.answered


@pytest.mark.slow
def test_learns_a_float64_flax_layer_with_biases():
    """use_bias=True (query, key, value and output biases) is certified by learn(bias=True)
    against true_heads computed apart from the learner."""
    mod, var = layer(4, 2, 7, bias=True, std=0.4)
    r = np.array([1.0, -0.5, 0.25, 1.5])
    box = fa.black_box(mod, var, readout=r)
    res = learn(box, d=4, heads=2, field="real", tokens="float64", bias=True, seed=1, retries=2,
                noise=2e-12, noise_rel=2e-13)
    assert res.certified, res.error
    truth = fa.true_heads(mod, var, readout=r).heads()
    assert truth.constant != 0 and all(h.biased for h in truth)
    err, _ = max_parameter_error(res.heads, truth, res.field)
    assert err <= res.error_bound and err <= 1e-9
