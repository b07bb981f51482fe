"""Vector outputs (docs: explanation/biases.md#vector-outputs): ``learn(..., outputs=m)``.

A box answers m numbers per query; each head's v is an m x d matrix.  Every exact answer is
compared with a canonical form computed here from the raw heads (equal (W, u) merged, their v
matrices summed, zero matrices dropped) -- not with the learner -- and every count with the
scalar plan's count and with a counter around the box.  Over the real field the truth is the
float64 weights of layers written here in numpy (and torch's MultiheadAttention).
"""

from __future__ import annotations

import json
import random
from fractions import Fraction

import numpy as np
import pytest

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.cli.main import main
from exactlearn.fields import Modular, Rational, Real, Symbolic
from exactlearn.pipeline.plan import bias_count, paper_count


def raw_model(rng, d, H, m, bias=False, zero_row=None, share=None):
    """Random small-integer heads (W, V m x d[, u]) and a constant; ``zero_row`` (h, j): head
    h's row j is 0; ``share`` (a, b): head b takes head a's W (and u) and minus its V."""
    heads = []
    for _ in range(H):
        W = [[Fraction(rng.randint(-2, 2), rng.randint(1, 2)) for _ in range(d)] for _ in range(d)]
        V = [[Fraction(rng.randint(-3, 3), rng.randint(1, 3)) for _ in range(d)] for _ in range(m)]
        u = [Fraction(rng.randint(-2, 2)) for _ in range(d)]
        heads.append([W, V, u])
    if zero_row is not None:
        h, j = zero_row
        heads[h][1][j] = [Fraction(0)] * d
    if share is not None:
        a, b = share
        heads[b][0], heads[b][2] = heads[a][0], heads[a][2]
        heads[b][1] = [[-x for x in row] for row in heads[a][1]]
    c = [Fraction(rng.randint(-3, 3), rng.randint(1, 2)) for _ in range(m)]
    return heads, c


def truth(heads, c, bias):
    """The canonical form computed apart from exactlearn: ``{(W, u): V}`` with equal keys
    summed and zero matrices dropped, and the constant."""
    groups: dict = {}
    for W, V, u in heads:
        key = (tuple(map(tuple, W)), tuple(u) if bias else None)
        acc = groups.get(key)
        groups[key] = [list(r) for r in V] if acc is None else \
            [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(acc, V)]
    out = {k: tuple(map(tuple, V)) for k, V in groups.items() if any(x for r in V for x in r)}
    return out, (tuple(c) if bias else None)


def learned(res, bias):
    out = {}
    for h in res.heads:
        key = (tuple(tuple(Fraction(int(x.numerator), int(x.denominator)) for x in row) for row in h.W),
               tuple(Fraction(int(x.numerator), int(x.denominator)) for x in h.u) if bias else None)
        out[key] = tuple(tuple(Fraction(int(x.numerator), int(x.denominator)) for x in row)
                         for row in h.v)
    const = tuple(Fraction(int(x.numerator), int(x.denominator)) for x in res.constant) if bias else None
    return out, const


def model_of(heads, c, d, m, bias):
    return MultiHeadAttention([(W, V, u) if bias else (W, V) for W, V, u in heads], d=d,
                              outputs=m, constant=c if bias else None, bias=bias)


class Counted:
    def __init__(self, box):
        self.box, self.asked = box, 0
        self.field = box.field
        self.over = getattr(box, "over", None)

    def __call__(self, tokens):
        self.asked += 1
        return self.box(tokens)


@pytest.mark.parametrize("field", ["rational", "modular"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_recovery_of_random_vector_models(field, bias, seed):
    rng = random.Random(100 + seed)
    d, H, m = 2 + seed % 2, 2, 3
    heads, c = raw_model(rng, d, H, m, bias)
    model = model_of(heads, c, d, m, bias)
    K = Rational() if field == "rational" else Modular()
    box = Oracle(model, K)
    res = learn(box, d=d, heads=H, seed=seed, outputs=m, bias=bias)
    assert res.certified, res.error
    assert learned(res, bias) == truth(heads, c, bias)
    count = bias_count(d, H) if bias else paper_count(d, H)
    assert res.plan_queries == count
    assert res.queries == box.queries == count * res.plan_runs       # the scalar plan's count
    js = res.to_json()
    assert js["outputs"] == m and all(len(h["v"]) == m for h in js["heads"])
    assert (js.get("constant") is not None) == bias
    # a scalar box is unchanged: no "outputs" key, the same count
    scalar = learn(Oracle(model.output(0), K), d=d, heads=H, seed=seed, bias=bias)
    assert "outputs" not in scalar.to_json() and scalar.plan_queries == count


def test_a_head_invisible_in_output_0_is_recovered():
    """Head 0's readout for output 0 is zero: learning output 0 alone misses it, the vector
    learner does not."""
    rng = random.Random(7)
    d, H, m = 2, 2, 2
    heads, c = raw_model(rng, d, H, m, zero_row=(0, 0))
    model = model_of(heads, c, d, m, False)
    res = learn(Oracle(model, Rational()), d=d, heads=H, seed=0, outputs=m)
    assert res.certified, res.error
    assert learned(res, False) == truth(heads, c, False) and len(res.heads) == 2
    alone = learn(Oracle(model.output(0), Rational()), d=d, heads=H, seed=0)
    assert alone.certified and len(alone.heads) == 1
    res = learn(Oracle(model, Modular()), d=d, heads=H, seed=0, outputs=m)
    assert res.certified and learned(res, False) == truth(heads, c, False)


def test_cancelling_heads_drop_and_symbolic_field():
    rng = random.Random(11)
    d, H, m = 2, 3, 2
    heads, c = raw_model(rng, d, H, m, share=(0, 2))
    model = model_of(heads, c, d, m, False)
    res = learn(Oracle(model, Rational()), d=d, max_heads=H, seed=0, outputs=m)
    assert res.certified and learned(res, False) == truth(heads, c, False)
    assert len(res.heads) == 1
    small = model_of(heads[:1], c, d, m, False)
    res = learn(Oracle(small, Symbolic()), d=d, heads=1, seed=0, outputs=m, query_range=4,
                verify=3)
    assert res.certified and learned(res, False) == truth(heads[:1], c, False)
    assert res.verified and res.verify_queries == 3


def test_tall_readouts_over_the_modular_field():
    """Readouts past one prime's reconstruction bound: joined by CRT over further primes and
    confirmed, exact over Q."""
    tall = [["1/" + str(2 ** 78 - 1), 1], [3, "1/" + str(2 ** 90 + 1)]]
    model = MultiHeadAttention([([[1, 0], [0, 1]], tall)], outputs=2)
    res = learn(Oracle(model, Modular()), d=2, heads=1, seed=0, outputs=2)
    assert res.certified and res.exact_over_Q
    assert [[str(x) for x in row] for row in res.heads[0].v] == \
        [["1/" + str(2 ** 78 - 1), "1"], ["3", "1/" + str(2 ** 90 + 1)]]


def test_bad_boxes_and_arguments():
    model = MultiHeadAttention([([[1, 0], [0, 1]], [[1, 2], [3, 4], [5, 6]])], outputs=3)
    for bad in (0, -1, True, 2.0, "3"):
        with pytest.raises(ValueError, match="outputs must be a positive integer"):
            learn(Oracle(model, Rational()), d=2, heads=1, outputs=bad)
    box = Counted(Oracle(model, Rational()))
    res = learn(box, d=2, heads=1, seed=0, outputs=2)
    assert res.status == "failed" and res.error.startswith("bad input")
    assert "answered 3 values per query, not outputs=2" in res.error and "Counted" in res.error
    assert res.queries == box.asked == 1                 # the answered query is counted
    scalar = Counted(Oracle(model.output(0), Rational()))
    res = learn(scalar, d=2, heads=1, seed=0, outputs=2)
    assert "answered one value, not a vector of outputs=2" in res.error
    assert res.queries == scalar.asked == 1

    class Batch:
        field = Rational()

        def __call__(self, tokens):
            return [1, 2]

        def batch(self, queries):
            return [[1, 2, 3] for _ in queries]
    res = learn(Batch(), d=2, max_heads=1, field=Real(dps=30), tokens="float64", seed=0,
                outputs=2, noise=1e-20)
    assert res.status == "failed" and "Batch" in res.error and "not outputs=2" in res.error
    with pytest.raises(ValueError, match="outputs= is not supported yet"):
        learn(Oracle(model, Real(dps=30)), d=2, heads=1, outputs=3, snap=True)
    with pytest.raises(ValueError, match="MAX_PLAN_BYTES"):
        learn(lambda t: 0, d=100, heads=8, field=Rational(), outputs=2 ** 16)
    with pytest.raises(ValueError, match="fixed to one prime"):
        learn(lambda tokens: [0, 0], d=2, heads=1, field=Modular(), outputs=2)


def test_a_head_invisible_in_the_combination_is_caught_and_redrawn(monkeypatch):
    """r . V_h = 0 for the first combination: the scalar run cannot see head 0, every output's
    certificate catches it, and the learner redraws (plan and r), every query counted."""
    import exactlearn.pipeline.outputs as po
    model = MultiHeadAttention([([[1, 0], [0, 1]], [[1, 2], [1, 2]]),
                                ([[0, 1], [-1, 0]], [[3, 0], [1, 1]])], outputs=2)
    draws = iter([[5, -5]])                     # r . V_0 = 0 on the first attempt
    real_draw = po.draw_combination
    monkeypatch.setattr(po, "draw_combination", lambda m, rng: next(draws, None) or real_draw(m, rng))
    box = Oracle(model, Rational())
    res = learn(box, d=2, heads=2, seed=0, outputs=2, retries=1)
    assert res.certified and res.attempts == 2, res.error
    assert res.heads == model.canonical_heads()
    assert [a["outcome"] for a in res.attempt_log] == ["failed", "certified"]
    assert res.queries == box.queries == 2 * paper_count(2, 2) and res.extra_queries == paper_count(2, 2)
    draws = iter([[5, -5]])
    monkeypatch.setattr(po, "draw_combination", lambda m, rng: next(draws, None) or real_draw(m, rng))
    res = learn(Oracle(model, Rational()), d=2, heads=2, seed=0, outputs=2)
    assert res.status == "failed" and "output" in res.error and res.heads == ()


def test_model_files_and_command_line(tmp_path, capsys):
    model = MultiHeadAttention([([[1, 0], [0, -1]], [[1, 2], [0, "1/2"]], [1, 0])], outputs=2,
                               constant=[3, "-1/3"], bias=True)
    path = tmp_path / "v.json"
    model.dump(path)
    obj = json.loads(path.read_text())
    assert obj["format"] == "exactlearn.mha/3" and obj["outputs"] == 2
    assert obj["heads"][0]["v"] == [["1", "2"], ["0", "1/2"]] and obj["constant"] == ["3", "-1/3"]
    assert MultiHeadAttention.from_file(path) == model
    assert main(["learn", "--model", str(path), "--heads", "1", "--bias", "--seed", "0",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "certified" and out["outputs"] == 2
    assert out["constant"] == ["3", "-1/3"] and out["heads"][0]["v"] == [["1", "2"], ["0", "1/2"]]
    assert main(["learn", "--model", str(path), "--heads", "1", "--bias", "--outputs", "3"]) == 2
    assert "the model file has 2 outputs" in capsys.readouterr().err
    scalar = tmp_path / "s.json"
    MultiHeadAttention([([[1]], [2])]).dump(scalar)
    assert main(["learn", "--model", str(scalar), "--heads", "1", "--outputs", "2"]) == 2
    assert "scalar model" in capsys.readouterr().err
    assert main(["learn", "--model", str(path), "--heads", "1", "--outputs", "0"]) == 2
    gen = tmp_path / "g.json"
    assert main(["random-model", "--d", "2", "--heads", "2", "--outputs", "3", "--seed", "1",
                 "--out", str(gen)]) == 0
    assert main(["random-model", "--d", "100", "--heads", "30", "--outputs", "60000"]) == 2
    assert "MAX_MODEL_ENTRIES" in capsys.readouterr().err      # refused before any draw
    g = MultiHeadAttention.from_file(gen)
    assert g.outputs == 3 and all(len(h.v) == 3 for h in g.heads)
    assert main(["learn", "--model", str(gen), "--heads", "2", "--seed", "2"]) == 0
    assert "equal to the model's canonical heads: True" in capsys.readouterr().out


class NumpyVectorLayer:
    """A float64 attention layer of m outputs written here: ``sum_h sum_i softmax_i(x_i^T W_h
    x_n) V_h x_i``; its float64 weights are the truth."""

    def __init__(self, d, H, m, seed, std=0.5):
        rng = np.random.default_rng(seed)
        self.W = rng.normal(0, std, (H, d, d))
        self.V = rng.normal(0, std, (H, m, d))
        self.calls = 0

    def __call__(self, X):
        self.calls += 1
        X = np.asarray(X, dtype=np.float64)
        s = np.einsum("ic,hcr,r->hi", X, self.W, X[-1])
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return np.einsum("hi,hmc,ic->m", p, self.V, X)


def worst_error(res, W, V):
    err = 0.0
    assert len(res.heads) == len(W)
    for h in res.heads:
        Wh = np.array([[float(a) for a in r] for r in h.W])
        Vh = np.array([[float(a) for a in r] for r in h.v])
        k = min(range(len(W)), key=lambda k: np.abs(W[k] - Wh).max())
        err = max(err, np.abs(W[k] - Wh).max(), np.abs(V[k] - Vh).max())
    return err


@pytest.mark.parametrize("noise", [dict(noise=1e-13), dict(noise=[1e-13, 2e-13, 1e-13, 3e-13]),
                                   dict(noise=5e-14, noise_rel=1e-14)])
def test_a_numpy_float64_vector_layer_over_the_real_field(noise):
    layer = NumpyVectorLayer(3, 2, 4, seed=3)
    res = learn(layer, d=3, heads=2, field=Real(dps=30), tokens="float64", seed=1, outputs=4,
                **noise)
    assert res.certified, res.error
    err = worst_error(res, layer.W, layer.V)
    assert err <= 1e-8 and err <= float(res.error_bound)
    assert res.queries == layer.calls
    assert res.real_detail["outputs"]["certified_values"] == res.certified_observations
    assert res.certified_observations == 4 * layer.calls          # every output of every answer
    with pytest.raises(ValueError, match="noise: not an exact rational"):  # a scalar box: as before
        learn(layer, d=3, heads=2, field=Real(dps=30), tokens="float64", noise=[1e-13] * 4)
    with pytest.raises(ValueError, match="one eta per output"):
        learn(layer, d=3, heads=2, field=Rational(), outputs=4, noise=[1e-13] * 4)


def test_an_output_noisier_than_declared_fails_even_when_r_hides_it(monkeypatch):
    """Output 3 errs by up to 1e-9 with eta = 1e-13 declared, and r weighs it by 2^-40, so the
    scalar view r . y stays within its eta: the per-output residual test fails the run, every
    answered query counted."""
    from gmpy2 import mpq
    import exactlearn.strategies.real.outputs as ro

    class Noisy(NumpyVectorLayer):
        def __init__(self, *a):
            super().__init__(*a)
            self.rng = np.random.default_rng(0)

        def __call__(self, X):
            y = super().__call__(X).copy()
            y[2] += self.rng.uniform(-1e-9, 1e-9)
            return y
    monkeypatch.setattr(ro, "draw_unit", lambda m, rng: [mpq(0.6), mpq(0.8), mpq(2.0 ** -40),
                                                          mpq(2.0 ** -40)])
    layer = Noisy(3, 2, 4, 0)
    res = learn(layer, d=3, heads=2, field=Real(dps=30), tokens="float64", noise=1e-13, seed=0,
                outputs=4)
    assert res.status == "failed" and "output 3 of 4" in res.error
    assert "noisier than the declared eta" in res.error and res.queries == layer.calls


def test_the_real_outputs_step_with_query_biases_and_a_constant():
    """The real field's per-output step on heads with u and a constant (the bounds of W and u
    given as a certified scalar run would give them): every readout and the constant within
    their bounds of the layer's float64 weights; u without bounds is refused."""
    from types import SimpleNamespace
    from gmpy2 import mpq
    from exactlearn.errors import DegenerateDraw
    from exactlearn.model import Head
    from exactlearn.strategies.real.outputs import learn_outputs_real
    rng = np.random.default_rng(5)
    d, H, m = 3, 2, 3
    W, u = rng.normal(0, 0.5, (H, d, d)), rng.normal(0, 0.5, (H, d))
    V, c = rng.normal(0, 0.5, (H, m, d)), rng.normal(0, 0.5, m)
    K = Real(dps=30)
    records = []
    for n in (1, 2, 3, 5, 8) * 12:
        X = rng.normal(size=(n, d))
        s = np.einsum("ic,hcr,r->hi", X, W, X[-1]) + np.einsum("hc,ic->hi", u, X)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        y = c + np.einsum("hi,hmc,ic->m", p, V, X)
        records.append(([tuple(mpq(float(a)) for a in t) for t in X], [K.from_output(a) for a in y]))
    heads = [Head(tuple(tuple(mpq(float(a)) for a in row) for row in W[h]),
                  tuple(tuple(mpq(0) for _ in range(d)) for _ in range(m)),
                  tuple(mpq(float(a)) for a in u[h])) for h in range(H)]
    bound = [[[1e-15] * d for _ in range(d)] for _ in range(H)]
    outcome = SimpleNamespace(W_bounds=bound, u_bounds=[[1e-15] * d] * H, detail={})
    got, n = learn_outputs_real(heads, d, records, K, m, 1e-13, outcome, bias=True)
    assert n == len(records) * m and len(got) == H
    err = 0.0
    for h in got:
        k = min(range(H), key=lambda k: abs(float(h.u[0]) - u[k][0]))
        err = max(err, np.abs(np.array([[float(a) for a in r] for r in h.v]) - V[k]).max())
    err = max(err, np.abs(np.array([float(a) for a in got.constant]) - c).max())
    assert err <= float(outcome.error_bound) and err <= 1e-9
    with pytest.raises(DegenerateDraw, match="no bounds"):
        learn_outputs_real(heads, d, records, K, m, 1e-13,
                           SimpleNamespace(W_bounds=bound, detail={}), bias=True)


@pytest.mark.slow
def test_torch_mha_without_a_readout_over_the_real_field():
    torch = pytest.importorskip("torch")
    from exactlearn.adapters import torch as ta
    from exactlearn.strategies.real.learn import max_parameter_error
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, bias=False, batch_first=True, dtype=torch.float64).eval()
    with torch.no_grad():
        for p in mha.parameters():
            p.normal_(0.0, 0.4)
    answered = []
    mha.register_forward_hook(lambda mod, inp, out: answered.append(inp[0].shape[0]))
    res = learn(ta.black_box(mha), d=8, heads=2, field="real", tokens="float64", seed=0,
                noise=2e-12, noise_rel=2e-13, outputs=8)
    assert res.certified, res.error
    truth_heads = ta.true_heads(mha).heads()
    assert all(len(h.v) == 8 for h in truth_heads)
    err, _ = max_parameter_error(res.heads, truth_heads, res.field)
    assert err <= 1e-8 and err <= res.error_bound
    assert res.queries == sum(answered)


def test_torch_mha_with_all_four_biases_and_no_readout_over_the_real_field():
    """bias=True and outputs=m together: the biased layer's whole output vector, against the
    module's own weights (true_heads: u per head, c a length-m vector)."""
    torch = pytest.importorskip("torch")
    from exactlearn.adapters import torch as ta
    from exactlearn.strategies.real.learn import max_parameter_error
    torch.manual_seed(1)
    mha = torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=torch.float64).eval()
    with torch.no_grad():
        mha.in_proj_bias.normal_(0.0, 0.5)
        mha.out_proj.bias.normal_(0.0, 0.5)
    answered = []
    mha.register_forward_hook(lambda mod, inp, out: answered.append(inp[0].shape[0]))
    res = learn(ta.black_box(mha), d=4, heads=2, field="real", tokens="float64", bias=True,
                outputs=4, noise=2e-12, noise_rel=2e-13, seed=0, retries=2)
    assert res.certified, res.error
    truth = ta.true_heads(mha).heads()
    assert truth.bias and len(truth.constant) == 4 and all(h.biased for h in truth)
    err, _ = max_parameter_error(res.heads, truth, res.field)
    assert err <= 1e-8 and err <= res.error_bound
    assert len(res.constant) == 4 and all(len(h.v) == 4 and len(h.u) == 4 for h in res.heads)
    assert res.queries == sum(answered)


def test_true_heads_without_a_readout_give_matrix_v():
    from exactlearn.adapters.common import canonical_parameters
    rng = np.random.default_rng(0)
    Q, K, V = (rng.normal(size=(2, 2, 3)) for _ in range(3))
    O = rng.normal(size=(4, 4))
    t = canonical_parameters(Q, None, K, None, V, None, O, None)
    heads = t.heads()
    assert [len(h.v) for h in heads] == [4, 4]
    OV = np.einsum("hmv,hvd->hmd", O.reshape(4, 2, 2).transpose(1, 0, 2), V)
    for h in heads:
        k = min(range(2), key=lambda k: abs(float(h.W[0][0]) - t.W[k][0][0]))
        assert np.allclose(np.array([[float(a) for a in r] for r in h.v]), OV[k], rtol=0, atol=1e-15)
    biased = canonical_parameters(Q, None, K, None, V, np.ones((2, 2)), O, None).heads()
    assert biased.bias and np.allclose([float(c) for c in biased.constant], O @ np.ones(4),
                                       rtol=0, atol=1e-14)      # c = O b_v, a length-m vector
