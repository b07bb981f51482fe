"""Hostile review (helper-80, 5 Dec 2026) of the adapters as layers ship: subclasses and
custom products that compute with other weights than those ``true_heads`` reads were
accepted (a certified run whose heads ``true_heads`` contradicted), and two flax layers
raised flax's own errors out of ``learn()``.  Each test failed before its fix."""

from __future__ import annotations

import numpy as np
import pytest

from exactlearn import learn
from exactlearn.errors import ModelError


def test_a_torch_subclass_that_overrides_forward_is_refused():
    torch = pytest.importorskip("torch")
    from exactlearn.adapters import torch as ta
    mha = torch.ao.nn.quantizable.MultiheadAttention(4, 2, bias=False, batch_first=True,
                                                     dtype=torch.float64).eval()
    for make in (lambda: ta.black_box(mha, readout=np.ones(4)), lambda: ta.true_heads(mha)):
        with pytest.raises(ModelError, match="overrides MultiheadAttention.forward"):
            make()


def _flax_layer(**kw):
    pytest.importorskip("flax")
    import jax
    import jax.numpy as jnp
    import flax.linen as nn
    layer = nn.MultiHeadDotProductAttention(num_heads=2, use_bias=False,
                                            param_dtype=jnp.float32, **kw)
    return layer, layer.init(jax.random.key(0), jnp.zeros((1, 2, 4), jnp.float32))


def test_a_flax_layer_with_a_custom_dot_general_is_refused():
    pytest.importorskip("flax")
    import jax
    layer, params = _flax_layer(
        qkv_dot_general=lambda lhs, rhs, *a, **k: 2.0 * jax.lax.dot_general(lhs, rhs, *a, **k))
    from exactlearn.adapters import flax as fa
    for make in (lambda: fa.black_box(layer, params, readout=np.ones(4)),
                 lambda: fa.true_heads(layer, params)):
        with pytest.raises(ModelError, match="custom qkv_dot_general"):
            make()


def test_flax_self_attention_is_refused_at_the_box():
    pytest.importorskip("flax")
    import jax
    import jax.numpy as jnp
    import flax.linen as nn
    from exactlearn.adapters import flax as fa
    layer = nn.SelfAttention(num_heads=2, use_bias=False)
    params = layer.init(jax.random.key(0), jnp.zeros((1, 2, 4), jnp.float32))
    with pytest.raises(ModelError, match="SelfAttention overrides"):
        fa.black_box(layer, params, readout=np.ones(4))


def test_a_flax_layer_built_for_training_is_refused_and_one_built_deterministic_is_learned():
    from exactlearn.adapters import flax as fa
    from exactlearn.strategies.real.learn import max_parameter_error
    layer, params = _flax_layer(dropout_rate=0.1, deterministic=False)
    with pytest.raises(ModelError, match="deterministic=False and dropout_rate > 0"):
        fa.black_box(layer, params, readout=np.ones(4))
    layer, params = _flax_layer(dropout_rate=0.1, deterministic=True)     # flax raised here
    r = np.array([1.0, -0.5, 0.25, 2.0])
    res = learn(fa.black_box(layer, params, readout=r), d=4, heads=2, field="real",
                tokens="float32", noise="auto", seed=0, retries=2)
    assert res.certified, res.error
    err, _ = max_parameter_error(res.heads, fa.true_heads(layer, params, readout=r).heads(),
                                 res.field)
    assert err <= res.error_bound


def test_a_linear_subclass_that_overrides_forward_is_refused():
    torch = pytest.importorskip("torch")
    from exactlearn.adapters import torch as ta

    class Scaled(torch.nn.Linear):               # e.g. a LoRA or fake-quantised Linear
        def forward(self, x):
            return 2 * super().forward(x)
    lin = [torch.nn.Linear(4, 4, dtype=torch.float64) for _ in range(3)]
    with pytest.raises(ModelError, match="query is a Scaled, which overrides Linear.forward"):
        ta.black_box_linear(Scaled(4, 4, dtype=torch.float64), *lin, heads=2,
                            readout=np.ones(4))


@pytest.mark.parametrize("argv, message", [
    (["--field", "real", "--field", "modular"], "argument --field: given twice"),
    (["--heads", "3"], "argument --heads: given twice"),
    (["--model", "other.json"], "argument --model: given twice")])
def test_cli_options_given_twice_exit_2(argv, message, tmp_path, capsys):
    """A repeated option was last-one-wins (``--field real --field modular`` ran modular).
    (``--snap`` over an exact field, also reported, is not ignored: its JSON says the heads
    are exact, ``snap.exact`` -- kept.)"""
    from exactlearn.cli.main import main
    from exactlearn.model import MultiHeadAttention
    path = tmp_path / "m.json"
    MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])]).dump(path)
    assert main(["learn", "--model", str(path), "--heads", "1", "--seed", "1"] + argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.parametrize("kw", [{"query_scale": 1}])
def test_real_field_options_over_an_exact_field_are_refused(kw):
    from exactlearn import MultiHeadAttention, Oracle
    from exactlearn.fields import Rational
    box = Oracle(MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])]), Rational())
    with pytest.raises(ValueError, match="applies to the real field, not the rational field"):
        learn(box, d=2, heads=1, seed=1, **kw)
    assert box.queries == 0


def test_a_float_box_asked_with_exact_tokens_is_bad_input_without_the_heads_note():
    """The paper plan's probe turned the box's refusal of the tokens into "the scale probe
    failed at every scale" (a degenerate draw), and every bad-input failure carried the note
    that more heads than the bound fail this way too."""
    torch = pytest.importorskip("torch")
    from exactlearn.adapters import torch as ta
    mha = torch.nn.MultiheadAttention(4, 2, bias=False, batch_first=True,
                                      dtype=torch.float64).eval()
    box = ta.black_box(mha, readout=np.ones(4))          # refuses tokens not of its dtype
    for plan in ("paper", "stable"):
        res = learn(box, d=4, heads=2, field="real", noise=1e-12, seed=0, plan=plan)
        assert isinstance(res.failure, ModelError), (plan, res.error)
        assert "float64 tokens" in res.error and "[note" not in res.error, (plan, res.error)


def test_an_adapters_box_names_a_d_that_is_not_its_own():
    torch = pytest.importorskip("torch")
    from exactlearn.adapters import torch as ta
    mha = torch.nn.MultiheadAttention(4, 2, bias=False, batch_first=True,
                                      dtype=torch.float64).eval()
    with pytest.raises(ValueError, match=r"model in d=4; learn\(\) was given d=5"):
        learn(ta.black_box(mha, readout=np.ones(4)), d=5, heads=2, field="real",
              tokens="float64", noise=1e-12)
