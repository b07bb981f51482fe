"""Real-field certificates (docs: explanation/real-field.md,
"Certificate"; docs: explanation/algorithm.md#what-a-failure-means).

* A real result is certified *within tolerance*, never exact: JSON ``"exact": false``
  (``true`` over the exact fields), and the human output says so.
* A black box noisier than the declared eta is not certified: an independent float32
  attention layer declared at eta = 1e-10 fails with "outputs noisier than the declared
  eta", while an honest NoisyOracle at the same eta still certifies.
* A probe that fails at every scale fails the run (no plan query is asked).
* ``probe_queries`` counts the probe queries asked, also on failed runs (an independent
  counting wrapper checks it); a float ``noise`` is accepted.
* proofs-check's time figure compares real runs with the canonical heads within the run's
  own error bound (no false WARNING), exactly over exact fields.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import struct
from fractions import Fraction

import pytest
from gmpy2 import mpq

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.cli.main import main, random_model
from exactlearn.fields import Modular, Rational, Symbolic
from exactlearn.fields.real import Real
from exactlearn.errors import NoisierThanDeclared
from exactlearn.strategies.real.learn import max_parameter_error
from exactlearn.strategies.real.ratio import fit_ratio_family, node_t
from exactlearn.model import Head
from exactlearn.noise import NoisyOracle

NOISIER = "outputs noisier than the declared eta"


# -- an independent float32 attention layer (no exactlearn code) ---------------------------
def f32(x: float) -> float:
    """Round a Python float to IEEE single precision."""
    return struct.unpack("f", struct.pack("f", x))[0]


def f32_sum(xs) -> float:
    acc = 0.0
    for x in xs:
        acc = f32(acc + x)
    return acc


class Float32Attention:
    """Two-head softmax attention evaluated in float32 arithmetic: every input, weight and
    intermediate result rounded to single precision.  Score ``s_{h,i} = x_i^T W_h x_n``,
    output ``sum_h sum_i softmax_i(s_h) v_h.x_i`` (the model of arXiv:2608.03294; docs: explanation/algorithm.md#the-model-and-its-sign-convention),
    returned as the exact value of
    the float32 result.  Its error is about 1e-7 relative to the outputs."""

    def __init__(self, heads):
        self.heads = [([[f32(a) for a in row] for row in W], [f32(a) for a in v]) for W, v in heads]
        self.calls = 0

    def __call__(self, tokens):
        self.calls += 1
        xs = [[f32(float(a)) for a in t] for t in tokens]
        xn = xs[-1]
        out = 0.0
        for W, v in self.heads:
            Wxn = [f32_sum(f32(w * b) for w, b in zip(row, xn)) for row in W]
            s = [f32_sum(f32(a * b) for a, b in zip(x, Wxn)) for x in xs]
            top = max(s)
            e = [f32(math.exp(f32(si - top))) for si in s]
            Z = f32_sum(e)
            u = [f32_sum(f32(a * b) for a, b in zip(v, x)) for x in xs]
            out = f32(out + f32_sum(f32(f32(ei / Z) * ui) for ei, ui in zip(e, u)))
        return Fraction(out)


def f32_heads(seed, d=2, H=2):
    rng = random.Random(seed)
    return [([[f32(rng.uniform(-1, 1)) for _ in range(d)] for _ in range(d)],
             [f32(rng.uniform(-1, 1)) for _ in range(d)]) for _ in range(H)]


def exact_model(heads):
    """The same heads as an exact model (float32 values are dyadic rationals)."""
    return MultiHeadAttention([([[Fraction(a) for a in r] for r in W], [Fraction(a) for a in v])
                               for W, v in heads])


class Counting:
    """Counts the calls of any black box (independently of the learner's counters)."""

    def __init__(self, box):
        self.box = box
        self.calls = 0
        self.field = getattr(box, "field", None)

    def __call__(self, tokens):
        self.calls += 1
        return self.box(tokens)


def paper_count(d, H):
    return 4 * H * d * d - 2 * H + 1


# -- exact or within tolerance -------------------------------------------------------------
EXACT_FIELDS = [Rational, Modular, Symbolic]


@pytest.mark.parametrize("make", EXACT_FIELDS, ids=lambda f: f.__name__)
def test_json_exact_true_over_exact_fields(make):
    m = MultiHeadAttention([([[1]], [2])])
    res = learn(Oracle(m, make()), d=1, heads=1, seed=1)
    out = res.to_json()
    assert out["status"] == "certified" and out["exact"] is True


def test_real_result_is_certified_within_tolerance_not_exact(tmp_path, capsys):
    m = random_model(2, 2, seed=5)
    res = learn(Oracle(m, Real(dps=40)), d=2, heads=2, seed=3)
    out = res.to_json()
    assert out["status"] == "certified" and out["exact"] is False      # status values unchanged
    path = tmp_path / "m.json"
    path.write_text(json.dumps(m.to_json()))
    assert main(["learn", "--model", str(path), "--field", "real", "--heads", "2", "--seed", "3",
                 "--dps", "40"]) == 0
    assert "status: certified within tolerance (real field: not exact)" in capsys.readouterr().out
    assert main(["learn", "--model", str(path), "--heads", "2", "--seed", "3", "--retries", "3"]) == 0
    text = capsys.readouterr().out
    assert "status: certified\n" in text and "within tolerance" not in text
    assert main(["learn", "--model", str(path), "--field", "real", "--heads", "2", "--seed", "3",
                 "--dps", "40", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exact"] is False


# -- a box noisier than declared -----------------------------------------------------------
def test_float32_layer_declared_at_1e_10_fails_as_noisier_than_declared():
    """The float32 layer errs by ~1e-7: at eta = 1e-10 it must not be certified; the
    overdetermined limit check sees residuals hundreds of first-order bounds out."""
    box = Float32Attention(f32_heads(seed=0))
    res = learn(box, d=2, heads=2, field=Real(dps=30), seed=0, noise="1e-10")
    assert res.status == "failed" and res.heads == () and res.error_bound is None
    assert NOISIER in res.error, res.error
    # and every scale the probe tries stays a failure for it (never a certificate)
    for scale in (mpq(1), mpq(1, 4), mpq(1, 16)):
        res = learn(Float32Attention(f32_heads(seed=0)), d=2, heads=2, field=Real(dps=30), seed=0,
                    noise="1e-10", query_scale=scale)
        assert res.status == "failed" and res.heads == (), scale


def test_honest_noisy_oracle_at_its_eta_still_certifies():
    """The same heads, exact, behind a NoisyOracle at eta = 1e-10 (a Python float): certified,
    with an error_bound covering the true error."""
    heads = f32_heads(seed=8)
    m = exact_model(heads)
    K = Real(dps=30)
    res = learn(NoisyOracle(Oracle(m, K), 1e-10, seed=8), d=2, heads=2, seed=0, retries=3)
    assert res.certified, res.error
    err, _ = max_parameter_error(res.heads, m.canonical_heads(), K)
    assert err <= res.error_bound
    assert res.to_json()["exact"] is False


def test_float_noise_is_accepted_or_refused_clearly():
    m = random_model(2, 2, seed=5)
    K = Real(dps=40)
    res = learn(Oracle(m, K), d=2, heads=2, seed=3, noise=1e-15)
    assert res.certified, res.error
    assert float(res.real_detail["eta"]) == 1e-15 and res.detail.eta == K(mpq(1e-15))
    for bad in (float("nan"), float("inf"), -1e-15):
        with pytest.raises(ValueError, match="noise"):
            learn(Oracle(m, K), d=2, heads=2, seed=3, noise=bad)


def test_least_squares_family_fit_checks_its_residual():
    """A family at the paper's nodes k = 0..4 fitted with m = 1 < 2 heads (least squares in
    the field's precision, strategies/real/fit.py): the Loewner start sees only k = 0..2, so a
    sample k = 4 off by 1e-12 >> eta = 1e-20 is caught by the residual."""
    K = Real(dps=40)
    ts = [node_t(k, 1) for k in range(5)]
    ys = [K(3) + K(2) / (1 + k * K("1.5")) for k in range(5)]
    fit = fit_ratio_family(K, ts, ys, [1e-20] * 5, 1, paper=True)
    assert len(fit.logs) == 1 and abs(K.ctx.exp(fit.logs[0]) - K("1.5")) < K("1e-30")
    assert fit.worst_residual < 1
    ys[4] += K("1e-12")
    with pytest.raises(NoisierThanDeclared, match=NOISIER):
        fit_ratio_family(K, ts, ys, [1e-20] * 5, 1, paper=True)


# -- the probe -----------------------------------------------------------------------------
class NotAttention:
    """1/n^3 plus the first coordinate of the final token: no rational function of type
    (2, 2) in k at any scale."""

    def __call__(self, tokens):
        return Fraction(1, len(tokens) ** 3) + Fraction(tokens[-1][0])


def test_a_probe_failing_at_every_scale_fails_the_run_and_counts_its_queries():
    box = Counting(NotAttention())
    res = learn(box, d=2, heads=2, field=Real(dps=30), seed=0)
    assert res.status == "failed" and "scale probe failed at every scale" in res.error
    assert box.calls == res.queries == res.probe_queries > 0      # no plan query was asked
    once = box.calls
    box = Counting(NotAttention())
    res = learn(box, d=2, heads=2, field=Real(dps=30), seed=0, retries=1)
    assert res.status == "failed" and res.attempts == 2
    assert box.calls == res.queries == res.probe_queries > once   # both attempts' probes


def test_probe_queries_counted_on_a_run_failing_after_the_plan():
    box = Counting(Float32Attention(f32_heads(seed=0)))
    res = learn(box, d=2, heads=2, field=Real(dps=30), seed=0, noise="1e-10")
    assert res.status == "failed" and NOISIER in res.error      # after the whole plan was asked
    assert res.probe_queries > 0
    # the paper's 4Hd^2 - 2H + 1 and the 2d - 2 single tokens (x) it computes from V, the
    # probe, and the families that failed asked again at other scales (rescues): every call
    assert res.plan_queries == paper_count(2, 2) + 2
    assert box.calls == res.queries > res.plan_queries + res.probe_queries


# -- proofs-check: no false warning --------------------------------------------------------
def test_time_figure_compares_real_runs_within_their_bound(tmp_path):
    from proofs_check.figures import agrees_with_canonical, timing_trial
    row = timing_trial((0, 33, "real", 2, 2))
    assert row["status"] == "certified" and row["equal"] is True
    # a real run whose heads are off by more than its own bound does not agree
    m = random_model(2, 2, seed=5)
    K = Real(dps=40)
    res = learn(Oracle(m, K), d=2, heads=2, seed=3)
    assert agrees_with_canonical(res, m)
    shift = 10 * res.error_bound
    off = tuple(Head(h.W, (h.v[0] + shift,) + tuple(h.v[1:])) for h in res.heads)
    assert not agrees_with_canonical(dataclasses.replace(res, heads=off), m)
    assert not agrees_with_canonical(dataclasses.replace(res, heads=res.heads[:1]), m)
    exact = learn(Oracle(m, Rational()), d=2, heads=2, seed=3, retries=3)
    assert agrees_with_canonical(exact, m)
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    from proofs_check.figures import draw_time
    ok = draw_time(str(tmp_path / "t.png"), [row], [])
    assert "WARNING" not in ok.caption
    bad = draw_time(str(tmp_path / "t2.png"), [row, dict(row, equal=False)], [])
    assert "WARNING: 1 certified run(s) differ" in bad.caption
