"""The learner over the real field: differential against the exact fields, the error bound,
noisy oracles, snapping, query scaling and the CLI's decimal-string JSON (docs: explanation/real-field.md)."""

from __future__ import annotations

import json
import math

import pytest
from gmpy2 import mpq

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.cli.main import main, random_model
from exactlearn.fields import Modular, Rational
from exactlearn.fields.base import as_mpq
from exactlearn.fields.real import Real
from exactlearn.strategies.real.learn import max_parameter_error
from exactlearn.noise import NoisyOracle
from exactlearn.strategies.real.snap import simplest_rational, snap_value

#: (d, H, model seed): named models run through every check below
MODELS = [(2, 2, 5), (3, 2, 1), (2, 3, 7), (3, 3, 11)]


def _model(d, H, seed):
    return random_model(d, H, seed=seed)


@pytest.mark.parametrize("d,H,seed", MODELS)
def test_real_agrees_with_the_exact_fields_within_its_bound(d, H, seed):
    """Differential: real heads == modular heads up to the learner's own error_bound."""
    m = _model(d, H, seed)
    exact = learn(Oracle(m, Modular()), d=d, heads=H, seed=seed, retries=3)
    assert exact.certified and exact.heads == m.canonical_heads()
    K = Real(dps=60)
    res = learn(Oracle(m, K), d=d, heads=H, seed=seed)
    assert res.certified, res.error
    # the paper's 4Hd^2 - 2H + 1 and the 2d - 2 single tokens (x) it computes from V
    assert res.queries == res.plan_queries + res.probe_queries \
        == 4 * H * d * d - 2 * H + 1 + 2 * (d - 1) + res.probe_queries
    assert res.probe_queries <= -(-6 // H) * (2 * H + 1)       # ceil(6/H) probe families
    err, _ = max_parameter_error(res.heads, exact.heads, K)
    assert err <= res.error_bound < K("1e-35")
    assert res.real_detail["certificate"].startswith("within tolerance")


@pytest.mark.slow
def test_error_bound_covers_the_true_error_with_and_without_noise():
    m = _model(3, 3, 11)
    K = Real(dps=60)
    for eta in (None, "1e-45", "1e-30", "1e-20"):
        o = Oracle(m, K) if eta is None else NoisyOracle(Oracle(m, K), eta, seed=4)
        res = learn(o, d=3, heads=3, seed=2)
        assert res.certified, (eta, res.error)
        err, _ = max_parameter_error(res.heads, m.canonical_heads(), K)
        assert 0 < err <= res.error_bound, eta
        if eta is not None:
            assert res.error_bound > K(eta)                # never below the noise itself


def test_noise_claim_ci_sized():
    """Error grows like eta (log-log slope in [0.7, 1.3]); the bound covers every run."""
    m = _model(2, 2, 5)
    K = Real(dps=60)
    etas, errs = [], []
    for e in (-40, -32, -24):
        res = learn(NoisyOracle(Oracle(m, K), f"1e{e}", seed=9), d=2, heads=2, seed=3)
        assert res.certified, res.error
        err, _ = max_parameter_error(res.heads, m.canonical_heads(), K)
        assert err <= res.error_bound
        etas.append(e)
        errs.append(float(K.ctx.log10(err)))
    slope = (errs[-1] - errs[0]) / (etas[-1] - etas[0])
    assert 0.7 <= slope <= 1.3, slope


def test_understated_noise_is_caught_not_certified():
    """The certificate's tolerance comes from the stated eta: outputs 1e10 times noisier
    than stated cannot be certified (the check can fail)."""
    m = _model(3, 3, 11)
    K = Real(dps=60)
    res = learn(NoisyOracle(Oracle(m, K), "1e-20", seed=1), d=3, heads=3, seed=2, noise="1e-30")
    assert not res.certified and res.heads == ()


def test_noisy_oracle():
    m = _model(2, 2, 5)
    K = Real(dps=40)
    base = Oracle(m, K)
    a = NoisyOracle(Oracle(m, K), "1e-20", seed=3)
    b = NoisyOracle(Oracle(m, K), "1e-20", seed=3)
    toks = [[[1, 0], [0, 1]], [[2, 1]], [[1, 1], [1, 1], [0, 1]]]
    ya, yb = [a(t) for t in toks], [b(t) for t in toks]
    assert ya == yb and a.queries == 3 and a.max_length == 3
    assert all(0 < abs(y - base(t)) <= K("1e-20") for y, t in zip(ya, toks))
    with pytest.raises(ValueError, match="real field"):
        NoisyOracle(Oracle(m, Rational()), "1e-20")
    with pytest.raises(ValueError):
        NoisyOracle(base, "-1e-20")


def test_snap_returns_the_exact_heads_and_certifies_them():
    m = _model(2, 2, 5)
    K = Real(dps=60)
    res = learn(NoisyOracle(Oracle(m, K), "1e-35", seed=2), d=2, heads=2, seed=3, snap=True)
    assert res.certified and res.snap["status"] == "certified" and not res.snap["exact"]
    snapped = MultiHeadAttention(res.snap["heads"], d=2)
    assert snapped.canonical_heads() == m.canonical_heads()
    exact = learn(Oracle(m, Rational()), d=2, heads=2, seed=3, snap=True, retries=3)
    assert exact.snap["status"] == "certified" and exact.snap["exact"]


def test_snap_refuses_when_no_rational_of_bounded_height_fits():
    m = MultiHeadAttention([([["0.2718281828459045235360287471352662497757"]],
                             ["0.987654321987654321987"])])
    K = Real(dps=60)
    res = learn(Oracle(m, K), d=1, heads=1, seed=1, snap=True)
    assert res.certified and res.snap["status"] == "not snapped"
    assert "W[1][1]" in res.snap["reason"]


def test_a_wrong_snap_fails_its_certificate():
    """W of height 10^31 above the height bound floor(1/sqrt(2B)) ~ 2e28: the one rational of
    bounded height within its bound B is not W, and the snapped model misses an observation
    beyond the noise alone -- "failed" (the error bound still covers the real heads)."""
    m = MultiHeadAttention([([["0.1234567890123456789012345678901"]], ["0.987654321987654321987"])])
    K = Real(dps=60)
    res = learn(Oracle(m, K), d=1, heads=1, seed=1, snap=True)
    assert res.certified and res.snap["status"] == "failed"
    assert MultiHeadAttention(res.snap["heads"], d=1).canonical_heads() != m.canonical_heads()
    assert float(res.snap["max_residual_over_tolerance"]) > 1
    err, _ = max_parameter_error(res.heads, m.canonical_heads(), K)
    assert err <= res.error_bound


def test_simplest_rational_and_height_bound():
    assert simplest_rational(mpq(3333, 10000), mpq(3334, 10000)) == mpq(1, 3)
    assert simplest_rational(mpq(-1, 2), mpq(1, 3)) == 0
    assert simplest_rational(mpq(-22, 7), mpq(-22, 7)) == mpq(-22, 7)
    K = Real(dps=50)
    x = K(mpq(355, 113)) + K("1e-30")
    assert snap_value(x, K("1e-20")) == mpq(355, 113)
    assert snap_value(x, K("1e-40")) is None                 # 1e-30 away: nothing of height 1e20


def test_explicit_query_scale_skips_the_probe():
    m = _model(2, 2, 5)
    res = learn(Oracle(m, Real(dps=50)), d=2, heads=2, seed=3, query_scale=mpq(1, 2))
    assert res.certified and res.probe_queries == 0 and res.queries == res.plan_queries
    assert res.real_detail["query_scale"] == "1/2"


def test_verify_over_the_real_field():
    m = _model(2, 2, 5)
    res = learn(NoisyOracle(Oracle(m, Real(dps=50)), "1e-30", seed=1), d=2, heads=2, seed=3,
                verify=5)
    assert res.certified and res.verified and res.verify_queries == 5


def test_cli_json_heads_are_full_precision_decimal_strings(tmp_path, capsys):
    m = _model(3, 2, 1)
    path = tmp_path / "m.json"
    m.dump(path)
    code = main(["learn", "--model", str(path), "--field", "real", "--dps", "60", "--heads", "2",
                 "--seed", "4", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["status"] == "certified"
    assert out["queries"] == out["plan_queries"] + out["probe_queries"]
    K = Real(dps=60)
    bound = K(out["error_bound"])
    assert K(out["model_error"]) <= bound
    for h in out["heads"]:
        for x in [x for row in h["W"] for x in row] + h["v"]:
            assert isinstance(x, str) and "/" not in x
            digits = x.lstrip("-").split("e")[0].replace(".", "").lstrip("0")
            assert len(digits) >= 50                       # full precision, not a float
            as_mpq(x)                                      # an exact decimal
    assert out["field_info"]["dps"] == 60


def test_cli_noise_and_snap(tmp_path, capsys):
    m = _model(2, 2, 5)
    path = tmp_path / "m.json"
    m.dump(path)
    code = main(["learn", "--model", str(path), "--field", "real", "--dps", "60", "--heads", "2",
                 "--seed", "3", "--noise", "1e-30", "--snap", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["snap"]["status"] == "certified"
    assert float(out["error_bound"]) > 1e-30
    assert main(["learn", "--model", str(path), "--heads", "2", "--noise", "1e-30"]) == 2
    assert "needs --field real" in capsys.readouterr().err
    code = main(["learn", "--model", str(path), "--field", "real", "--dps", "60", "--heads", "2",
                 "--seed", "3"])
    text = capsys.readouterr().out
    assert code == 0 and "error bound" in text and "largest difference" in text


def test_slope_of_error_against_noise_in_the_claim_form():
    from proofs_check.claim import Context
    from proofs_check.claims import approximate_oracle
    res = approximate_oracle.check(Context(quick=True, tiny=True))
    ev = res.evidence
    assert res.status == "verified", ev["problems"]
    assert 0.7 <= ev["slope"] <= 1.3 and ev["bound_covers_error"]
    s = ev["series"]
    assert len(s["eta"]) == len(s["error"]) == len(s["bound"]) >= 3
    assert all(e <= b for e, b in zip(s["error"], s["bound"]))
    assert math.isclose(s["error_vs_noise"]["slope"], ev["slope"])


# -- the one labelling traversal, with bounds ----------------------------------------------
def _toy_poles(plan, heads, K, shuffle_seed):
    """(rho_h, c_h) = (2^(e^T W_h x), -v_h.e) of every configuration, unlabelled."""
    import random
    rng = random.Random(shuffle_seed)
    out = {}
    for n, c in enumerate(plan.configs):
        d = range(plan.d)
        ps = [(K(2) ** sum(c.e[r] * W[r][q] * c.x[q] for r in d for q in d),
               -K(sum(a * b for a, b in zip(v, c.e)))) for W, v in heads]
        rng.shuffle(ps)
        out[n] = ps
    return out


@pytest.mark.parametrize("shuffle_seed", range(4))
def test_bounded_relation_labels_like_exact_equality(shuffle_seed):
    """label_heads with WithinBounds on real poles (and their bounds) gives the same labels
    as with exact equality on the same poles over Q; a bound too large for a relation to be
    decided fails as undecided, never a guess."""
    from exactlearn.errors import Undecided
    from exactlearn.fields import QQ
    from exactlearn.pipeline.match import Exact, WithinBounds, label_heads
    from exactlearn.pipeline.plan import paper_plan
    from exactlearn.strategies.real.sensitivity import LO
    plan = paper_plan([[2, 1, 0], [1, -1, 1], [0, 1, 1]], [[1, 0, 1], [0, 1, -1], [1, 1, 0]], H=2)
    heads = [([[1, 0, -1], [0, 1, 0], [1, 1, 0]], (1, 2, -1)),
             ([[0, 1, 0], [-1, 0, 1], [0, 0, 1]], (2, -1, 1))]
    K = Real(dps=30)
    exact = _toy_poles(plan, heads, QQ, shuffle_seed)
    real = {n: [(K(r), K(c), LO.mpf("1e-25") * LO.convert(r), LO.mpf("1e-25")) for r, c in ps]
            for n, ps in exact.items()}
    want = label_heads(plan, exact.__getitem__, Exact(QQ)).index
    rel = WithinBounds(10, 10 ** 5, size=LO.convert)
    assert label_heads(plan, real.__getitem__, rel).index == want
    loose = {n: [(r, c, br, LO.mpf("1e-3")) for r, c, br, _ in ps] for n, ps in real.items()}
    with pytest.raises(Undecided, match="matching undecided"):
        label_heads(plan, loose.__getitem__, rel)
