"""The PyTorch adapter (exactlearn.adapters.torch; docs/howto/torch-jax-layer.md).

``true_heads`` is checked against the module's OWN forward (``mha(X, X, X)`` at the last
position; a BERT-shaped self-attention written here as Hugging Face writes it), through the
model class evaluated in numpy (tests/adapter_truth.py) -- never against the learner.  Skipped
without torch (the ``torch`` extra).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from exactlearn import learn                                      # noqa: E402
from exactlearn.adapters import torch as ta                       # noqa: E402
from exactlearn.errors import ModelError                          # noqa: E402
from exactlearn.strategies.real.learn import max_parameter_error  # noqa: E402

from adapter_truth import evaluate, random_tokens                  # noqa: E402

NOISE = dict(noise=2e-12, noise_rel=2e-13)    # torch's float64 MHA errs up to ~3e-12 (issue 22)


def mha(d, H, seed, bias=True, batch_first=True, dtype=torch.float64, std=0.5):
    torch.manual_seed(seed)
    m = torch.nn.MultiheadAttention(d, H, bias=bias, batch_first=batch_first, dtype=dtype).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, std)
    return m


def own_forward(m, X):
    """The module's own forward, every position, then the last one."""
    x = torch.from_numpy(X).unsqueeze(0 if m.batch_first else 1)
    with torch.no_grad():
        out, _ = m(x, x, x)
    return (out[0, -1] if m.batch_first else out[-1, 0]).numpy()


class BertLikeSelfAttention(torch.nn.Module):
    """Hugging Face's BertSelfAttention + BertSelfOutput.dense, without the residual and
    LayerNorm (transpose_for_scores, query @ key^T / sqrt(d_h), softmax, @ value)."""

    def __init__(self, d, heads, dtype=torch.float64, bias=True):
        super().__init__()
        self.num_attention_heads, self.attention_head_size = heads, d // heads
        self.query, self.key, self.value, self.dense = (
            torch.nn.Linear(d, d, bias=bias, dtype=dtype) for _ in range(4))

    def split(self, x):
        B, n, _ = x.shape
        return x.view(B, n, self.num_attention_heads, self.attention_head_size).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.attention_head_size)
        ctx = (torch.softmax(scores, dim=-1) @ v).permute(0, 2, 1, 3).flatten(2)
        return self.dense(ctx)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
def test_true_heads_reproduce_the_modules_own_forward(bias, batch_first):
    m = mha(6, 3, 0, bias=bias, batch_first=batch_first)
    rng = np.random.default_rng(0)
    r = rng.normal(size=6)
    t, tv = ta.true_heads(m, readout=r), ta.true_heads(m)
    box, boxv = ta.black_box(m, readout=r), ta.black_box(m)
    assert t.has_bias == bias
    for X in random_tokens(rng, 6):
        out = own_forward(m, X)
        assert abs(evaluate(t, X) - r @ out) < 1e-12
        assert np.max(np.abs(evaluate(tv, X) - out)) < 1e-12
        assert abs(box(X) - r @ out) < 1e-12 and isinstance(box(X), np.float64)
        assert np.max(np.abs(boxv(X) - out)) < 1e-12 and boxv(X).shape == (6,)


@pytest.mark.parametrize("bias", [True, False])
def test_bert_shaped_attention(bias):
    torch.manual_seed(1)
    layer = BertLikeSelfAttention(8, 2, bias=bias)
    parts = (layer.query, layer.key, layer.value, layer.dense, layer.num_attention_heads)
    rng = np.random.default_rng(1)
    r = rng.normal(size=8)
    t, tv = ta.true_heads_linear(*parts, readout=r), ta.true_heads_linear(*parts)
    box = ta.black_box_linear(*parts, readout=r)
    for X in random_tokens(rng, 8):
        with torch.no_grad():
            out = layer(torch.from_numpy(X)[None])[0, -1].numpy()
        assert abs(evaluate(t, X) - r @ out) < 1e-12
        assert np.max(np.abs(evaluate(tv, X) - out)) < 1e-12
        assert abs(box(X) - r @ out) < 1e-12
    with pytest.raises(ModelError, match="divisible by heads=3"):
        ta.black_box_linear(layer.query, layer.key, layer.value, layer.dense, 3)


def test_batch_groups_by_length_one_forward_each():
    m = mha(4, 2, 2)
    sizes = []
    m.register_forward_hook(lambda mod, inp, out: sizes.append(tuple(inp[1].shape)))
    rng = np.random.default_rng(2)
    qs = [rng.normal(size=(n, 4)) for n in (3, 5, 3, 2, 5, 3)]
    r = np.ones(4)
    got = ta.black_box(m, readout=r).batch(qs)
    assert sorted(sizes) == [(1, 2, 4), (2, 5, 4), (3, 3, 4)]
    for y, X in zip(got, qs):
        assert abs(y - r @ own_forward(m, X)) < 1e-12


def test_one_thread_during_calls_restored_after():
    m = mha(4, 2, 3)
    during = []
    m.register_forward_hook(lambda mod, inp, out: during.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    X = np.ones((3, 4))
    ta.black_box(m, readout=np.ones(4))(X)
    ta.black_box(m, readout=np.ones(4), threads=None)(X)
    assert during == [1, before] and torch.get_num_threads() == before
    with pytest.raises(ModelError, match="threads"):
        ta.black_box(m, threads=0)


def test_no_silent_casting():
    m32 = mha(4, 2, 4, dtype=torch.float32)
    X = np.random.default_rng(4).normal(size=(3, 4)).astype(np.float32)
    box = ta.black_box(m32)
    assert box(X).dtype == np.float32
    with pytest.raises(ModelError, match="takes float32 tokens, got float64"):
        box(X.astype(np.float64))
    conv = ta.black_box(m32, dtype="float64")          # asked for: converted, exactly
    assert np.array_equal(conv(X.astype(np.float64)), box(X))
    with pytest.raises(ModelError, match="not exactly a float32"):
        conv(np.full((2, 4), 0.1))
    with pytest.raises(ModelError, match="takes float64 tokens, got float32"):
        ta.black_box(mha(4, 2, 4))(X)


def test_refused_modules_and_arguments():
    with pytest.raises(ModelError, match="MultiheadAttention, got Linear"):
        ta.black_box(torch.nn.Linear(4, 4))
    with pytest.raises(ModelError, match="add_bias_kv"):
        ta.black_box(torch.nn.MultiheadAttention(4, 2, add_bias_kv=True))
    with pytest.raises(ModelError, match="add_zero_attn"):
        ta.true_heads(torch.nn.MultiheadAttention(4, 2, add_zero_attn=True))
    with pytest.raises(ModelError, match="module.eval"):
        ta.black_box(torch.nn.MultiheadAttention(4, 2, dropout=0.1))
    with pytest.raises(ModelError, match="length 4"):
        ta.black_box(mha(4, 2, 0), readout=[1.0, 2.0])
    with pytest.raises(ModelError, match="float32 or float64"):
        ta.black_box(torch.nn.MultiheadAttention(4, 2, dtype=torch.float16))
    biased = ta.true_heads(mha(4, 2, 0, bias=True), readout=np.ones(4)).heads()  # was refused
    assert biased.bias and biased.constant != 0


@pytest.mark.parametrize("make", ["mha", "linear"])
def test_a_bfloat16_layer_is_refused_in_one_line_and_its_true_heads_are_exact(make):
    """A bfloat16 layer (as many models ship): refused by the box with the float16 layer's
    ModelError, and true_heads converts its weights exactly -- both raised torch's raw
    "TypeError: Got unsupported ScalarType BFloat16" (numpy has no bfloat16)."""
    torch.manual_seed(0)
    if make == "mha":
        m = torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=torch.bfloat16).eval()
        box, truth = (lambda: ta.black_box(m)), (lambda: ta.true_heads(m))
        ref = ta.true_heads(copy.deepcopy(m).double())
    else:
        lins = [torch.nn.Linear(4, 4, dtype=torch.bfloat16) for _ in range(4)]
        box, truth = (lambda: ta.black_box_linear(*lins, 2)), (lambda: ta.true_heads_linear(*lins, 2))
        ref = ta.true_heads_linear(*(copy.deepcopy(lin).double() for lin in lins), 2)
    with pytest.raises(ModelError, match="computes in bfloat16: the adapters take float32 or float64"):
        box()
    t = truth()
    assert all(np.array_equal(a, b) for a, b in zip((t.W, t.u, t.v, t.c), (ref.W, ref.u, ref.v, ref.c)))


@pytest.mark.parametrize("batch_first", [True, False])
def test_learns_a_float64_mha_through_the_adapter(batch_first):
    m = mha(4, 2, 5, bias=False, batch_first=batch_first, std=0.4)
    answered = []
    m.register_forward_hook(lambda mod, inp, out: answered.append(inp[0].shape[0 if batch_first else 1]))
    r = np.array([1.0, -0.5, 0.25, 2.0])
    res = learn(ta.black_box(m, readout=r), d=4, heads=2, field="real", tokens="float64",
                seed=0, retries=2, **NOISE)
    assert res.certified, res.error
    err, _ = max_parameter_error(res.heads, ta.true_heads(m, readout=r).heads(), res.field)
    assert err <= res.error_bound and err <= 1e-9
    assert res.queries == sum(answered)                # every answered query counted


def test_a_biased_layer_is_not_certified_by_the_bias_free_learner():
    """Today's learn() has no bias terms: a biased MHA (PyTorch's default) fails explicitly,
    every answered query counted, rather than being certified with wrong heads."""
    m = mha(4, 2, 0, bias=True, std=0.4)
    answered = []
    m.register_forward_hook(lambda mod, inp, out: answered.append(inp[0].shape[0]))
    res = learn(ta.black_box(m, readout=np.ones(4)), d=4, heads=2, field="real",
                tokens="float64", seed=0, retries=2, **NOISE)
    assert not res.certified and res.status == "failed"
    assert "noisier than the declared eta" in res.error
    assert res.queries == sum(answered)


@pytest.mark.parametrize("d, H, seed", [(4, 2, 0), pytest.param(6, 3, 1, marks=pytest.mark.slow)])
def test_learns_a_float64_mha_with_all_four_biases(d, H, seed):
    """bias=True (PyTorch's default: query, key, value and output biases, here all nonzero)
    is certified by learn(bias=True) against true_heads computed apart from the learner."""
    m = mha(d, H, seed, bias=True, std=0.4)
    assert all(torch.count_nonzero(b) == b.numel() for b in (m.in_proj_bias, m.out_proj.bias))
    answered = []
    m.register_forward_hook(lambda mod, inp, out: answered.append(inp[0].shape[0]))
    r = np.random.default_rng(seed).normal(size=d)
    res = learn(ta.black_box(m, readout=r), d=d, heads=H, field="real", tokens="float64",
                bias=True, seed=seed, retries=2, **NOISE)
    assert res.certified, res.error
    truth = ta.true_heads(m, readout=r).heads()
    assert truth.constant != 0 and all(h.biased for h in truth)
    err, _ = max_parameter_error(res.heads, truth, res.field)
    assert err <= res.error_bound and err <= 1e-9
    assert res.queries == sum(answered)


def test_a_layer_of_mixed_dtypes_is_refused_before_any_query():
    """A float32 MultiheadAttention whose out_proj is float64 (or Linear maps of two dtypes) was
    accepted by black_box and failed inside the first query with torch's RuntimeError traceback
    (the flax adapter refuses a mixed layer); now a one-line ModelError at construction."""
    m = mha(4, 2, 0, dtype=torch.float32)
    m.out_proj.double()
    with pytest.raises(ModelError, match="mixes dtypes"):
        ta.black_box(m, readout=np.ones(4))
    q, k, v, o = (torch.nn.Linear(4, 4) for _ in range(4))
    v.double()
    with pytest.raises(ModelError, match="mixes dtypes"):
        ta.black_box_linear(q, k, v, o, 2, readout=np.ones(4))


def test_a_module_put_in_training_mode_after_black_box_is_refused_at_its_next_call():
    """Review (helper-71): the training-mode check ran only when the box was built; a module
    switched to ``train()`` afterwards answered with dropout (two answers for one query) and
    the run failed with a generic message.  Now every call checks, and learn() says why at once,
    with no query counted."""
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=torch.float64, dropout=0.1).eval()
    box = ta.black_box(m, readout=np.ones(4))
    X = np.eye(4)[:3]
    assert box(X) == box(X)                        # eval: deterministic
    m.train()
    with pytest.raises(ModelError, match="training mode with dropout > 0 after black_box"):
        box(X)
    res = learn(box, d=4, heads=2, field="real", tokens="float64", noise="auto", seed=0)
    assert res.status == "failed" and res.queries == 0
    assert "module.eval()" in res.error
