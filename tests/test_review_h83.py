"""Hostile review (helper-83, 5 Dec 2026) of the adapters and arguments: layers whose call is
not their class's forward on the weights ``true_heads`` reads (hooks, an instance forward, a
flax ``apply`` override) were accepted and certified against heads ``true_heads``
contradicted; bad ``query_scale`` and numpy ``rank`` values.  Each test failed before its
fix."""

from __future__ import annotations

import numpy as np
import pytest

from exactlearn.errors import ModelError


def _mha(torch):
    return torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=torch.float64).eval()


def _learn(box):
    from exactlearn import learn
    return learn(box, d=4, heads=2, field="real", tokens="float64", noise="auto", seed=0)


def test_a_torch_layer_with_an_instance_forward_is_refused():
    torch = pytest.importorskip("torch")
    from exactlearn.adapters import torch as ta
    mha = _mha(torch)
    fwd = mha.forward
    mha.forward = lambda *a, **k: fwd(*a, **k)
    for make in (lambda: ta.black_box(mha, readout=np.ones(4)), lambda: ta.true_heads(mha)):
        with pytest.raises(ModelError, match="forward set on the instance"):
            make()


def test_a_hook_that_changes_the_output_or_input_fails_the_run_an_observing_one_is_learned():
    """A forward hook returning a value replaces the output (a pre-hook, the input): the run
    fails with the ModelError at the first call, never certified; a hook returning None only
    observes and the run is learned, exactly as without it."""
    torch = pytest.importorskip("torch")
    from exactlearn.adapters import torch as ta
    torch.manual_seed(0)
    mha = _mha(torch)
    plain = _learn(ta.black_box(mha, readout=np.ones(4)))
    calls = []
    handle = mha.register_forward_hook(lambda mod, inp, out: calls.append(1))
    seen = _learn(ta.black_box(mha, readout=np.ones(4)))
    assert seen.certified and seen.heads == plain.heads and len(calls) > 0
    handle.remove()
    for register, hook in ((mha.register_forward_hook, lambda m, i, o: (2 * o[0], o[1])),
                           (mha.register_forward_pre_hook, lambda m, a: tuple(2 * x for x in a))):
        handle = register(hook)
        res = _learn(ta.black_box(mha, readout=np.ones(4)))
        handle.remove()
        assert not res.certified and isinstance(res.failure, ModelError)
        assert "changes its input or output" in str(res.failure)


def test_a_global_hook_that_changes_the_output_fails_the_run():
    torch = pytest.importorskip("torch")
    from exactlearn.adapters import torch as ta
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, i, o: (2 * o[0], o[1]) if isinstance(o, tuple) else o)
    try:
        res = _learn(ta.black_box(_mha(torch), readout=np.ones(4)))
    finally:
        handle.remove()
    assert not res.certified and "a global forward hook changes" in str(res.failure)


def test_black_box_linear_with_a_hook_scaling_the_value_map_fails_the_run():
    torch = pytest.importorskip("torch")
    from exactlearn.adapters import torch as ta
    torch.manual_seed(0)
    q, k, v, o = (torch.nn.Linear(4, 4, bias=False, dtype=torch.float64) for _ in range(4))
    v.register_forward_hook(lambda mod, inp, out: 2 * out)
    res = _learn(ta.black_box_linear(q, k, v, o, heads=2, readout=np.ones(4)))
    assert not res.certified and "a forward hook of value changes" in str(res.failure)


def test_a_flax_subclass_overriding_apply_and_a_numpy_false_deterministic_are_refused():
    pytest.importorskip("flax")
    import jax
    import jax.numpy as jnp
    import flax.linen as nn
    from exactlearn.adapters import flax as fa

    class Doubled(nn.MultiHeadDotProductAttention):
        def apply(self, variables, *args, **kwargs):
            return 2 * super().apply(variables, *args, **kwargs)

    layer = Doubled(num_heads=2, use_bias=False, param_dtype=jnp.float32)
    params = layer.init(jax.random.key(0), jnp.zeros((1, 2, 4), jnp.float32))
    with pytest.raises(ModelError, match="overrides MultiHeadDotProductAttention's call or apply"):
        fa.black_box(layer, params, readout=np.ones(4))
    noisy = nn.MultiHeadDotProductAttention(num_heads=2, use_bias=False, dropout_rate=0.5,
                                            deterministic=np.bool_(False),
                                            param_dtype=jnp.float32)
    params = noisy.init(jax.random.key(0), jnp.zeros((1, 2, 4), jnp.float32))
    with pytest.raises(ModelError, match="deterministic=False"):
        fa.black_box(noisy, params, readout=np.ones(4))


@pytest.mark.parametrize("scale", [0, -1, float("inf"), float("nan"), "1e400", 1e308, "1e-30"])
@pytest.mark.parametrize("plan", ["stable", "paper"])
def test_a_query_scale_out_of_range_is_refused_before_any_query(scale, plan):
    """The stable plan took 0 (a degenerate draw after 7 queries) and -1 (certified), and a
    huge scale crashed in float64 (a traceback at the CLI)."""
    from exactlearn import Oracle, learn
    from exactlearn.fields import Real
    from exactlearn.generate import random_model
    box = Oracle(random_model(2, 2, seed=1), Real())
    with pytest.raises(ValueError, match="query_scale must be"):
        learn(box, 2, heads=2, field=Real(), plan=plan, noise="1e-40", query_scale=scale)
    assert box.queries == 0


def test_a_huge_query_scale_at_the_cli_exits_2_in_one_line(tmp_path, capsys):
    from exactlearn.cli.main import main
    path = tmp_path / "m.json"
    assert main(["random-model", "--d", "2", "--heads", "2", "--seed", "1", "--out", str(path)]) == 0
    capsys.readouterr()
    assert main(["learn", "--model", str(path), "--heads", "2", "--field", "real", "--plan",
                 "stable", "--declared-noise", "1e-40", "--query-scale", "1e400"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "about 10^400" in err


def test_numpy_integers_are_taken_for_rank_retries_and_verify():
    from exactlearn import Oracle, learn
    from exactlearn.fields import QQ
    from exactlearn.generate import random_model
    m = random_model(3, 2, seed=1)
    res = learn(Oracle(m, QQ), d=3, heads=2, plan="efficient", rank=np.int64(3),
                retries=np.int32(1), verify=np.int64(2), seed=0)
    assert res.certified and res.heads == m.canonical_heads()


@pytest.mark.parametrize("path, message", [("fig.pdff", ".pdff is not a figure format"),
                                           ("", "--plot needs a file name")])
def test_demo_plot_to_a_path_that_cannot_be_a_figure_is_refused_before_any_output(
        path, message, tmp_path, capsys, monkeypatch):
    """It printed the whole walk-through, then failed in matplotlib (or wrote a hidden .png
    for an empty name and exited 0)."""
    pytest.importorskip("matplotlib")
    from exactlearn.cli.main import main
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--plot", path]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and message in out.err
    assert list(tmp_path.iterdir()) == []


def test_the_checks_before_any_query_see_through_a_noisy_oracle():
    """Wrapped in the package's own NoisyOracle, a vector model without outputs= ended in a
    raw TypeError, a Transformer went to learn() for 12 queries, and learn_transformer's d
    check was missed."""
    from exactlearn import Oracle, learn
    from exactlearn.fields import Real
    from exactlearn.generate import random_model
    from exactlearn.noise import NoisyOracle
    from exactlearn.oracle import TransformerOracle
    from exactlearn.strategies.transformer.learn import learn_transformer
    from exactlearn.transformer_model import random_transformer
    K = Real(dps=30)
    vector = NoisyOracle(Oracle(random_model(2, 1, seed=1, outputs=2), K), "1e-20", seed=0)
    with pytest.raises(ValueError, match="pass outputs=2"):
        learn(vector, d=2, heads=1, field=K)
    T = NoisyOracle(TransformerOracle(random_transformer(2, 1, 2, seed=0), K), "1e-20", seed=0)
    with pytest.raises(ValueError, match="learn_transformer"):
        learn(T, d=2, heads=1, field=K)
    with pytest.raises(ValueError, match="a model in d=2; learn_transformer.. was given d=3"):
        learn_transformer(T, d=3, heads=1)
    assert T.queries == 0 and vector.queries == 0


@pytest.mark.parametrize("kind, given, expected", [
    ("--transformer", ["--noise-rel", "1e-10"],
     "--noise-rel applies to attention models only"),     # not "needs --plan stable"
    ("--outputs", ["--snap"], "a vector model (exactlearn.mha/3, 2 outputs) is not supported"),
    ("--outputs", ["--outputs", "2", "--snap"], "--outputs is not supported yet with --snap"),
    ("--seed", ["--noise-rel", "1e-10"], "--noise-rel needs --plan stable"),
])
def test_the_refusal_names_what_was_given(tmp_path, capsys, kind, given, expected):
    """The one-line refusal names the option or the file that was given: a Transformer file
    with --noise-rel was told to add --plan stable (which a Transformer file refuses), and
    --snap on a vector file named --outputs, which was not given (helper-83's review)."""
    from exactlearn.cli.main import main
    path = tmp_path / "m.json"
    extra = {"--transformer": ["--transformer"], "--outputs": ["--outputs", "2"]}.get(kind, [])
    assert main(["random-model", "--d", "2", "--heads", "2", "--seed", "1", *extra,
                 "--out", str(path)]) == 0
    capsys.readouterr()
    assert main(["learn", "--model", str(path), "--heads", "2", "--field", "real", *given]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
