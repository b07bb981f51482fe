"""The efficient plan (issue 6): counts, exact recovery per acceptance row, fallbacks, JSON.

Every row of the acceptance table runs on a few seeded random models over the
modular field; each must be certified, equal to the canonical heads (exact
rationals) and within its limit.  False rank promises must never be certified
wrong, and a hand-made one shows that the check configurations are what
catches a promise whose skeleton completion is exact.
"""

from __future__ import annotations

import json
import random

import pytest

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.cli.main import main
from exactlearn.fields import Modular, Rational
from exactlearn.strategies.efficient.learn import run_efficient
from exactlearn.oracle import Recorder
from exactlearn.pipeline.plan import paper_count
from exactlearn.strategies.efficient.plan import (RangeTooSmall, draw_efficient_plan, efficient_count,
                                                  efficient_plan, rank_checks)
from proofs_check.claim import Context, discover
from proofs_check.claims.efficient_plan import limit, row_model
from proofs_check.models import trial_rng

#: (row, d, H, rank promise): the acceptance table of issue 6
TABLE = [("H=1", 3, 1, None), ("H=1", 4, 1, None), ("H=1", 5, 1, None),
         ("generic", 3, 2, None), ("generic", 4, 3, None),
         ("equal v", 3, 2, None), ("rank 1", 6, 2, 1)]

#: every key the paper plan's JSON had before the efficient plan
OLD_KEYS = {"status", "field", "d", "heads_bound", "canonical_heads", "queries", "max_length",
            "heads", "error", "learner_seconds", "oracle_seconds", "plan", "plan_queries",
            "attempts", "extra_queries", "field_info", "verify_queries", "verified"}


def run_row(row, d, H, rank, n, field=None, true_rank=None):
    rng = trial_rng(n, "test-efficient", f"{row}:{d}:{H}")   # stable across processes (no hash())
    model = row_model(rng, row, d, H, true_rank)
    oracle = Oracle(model, field or Modular())
    res = learn(oracle, d=d, heads=H, seed=n, plan="efficient", rank=rank)
    assert res.queries == oracle.queries
    per_run = res.plan_queries + sum(f["queries"] for f in res.plan_fallbacks)
    if res.certified and res.multimodular:   # modular: the plan is asked once per prime
        assert [r["queries"] for r in res.multimodular["primes"]] == [per_run] * res.plan_runs
    assert res.queries == res.plan_runs * per_run or not res.certified
    return model, res


@pytest.mark.parametrize("row,d,H,rank", TABLE)
def test_acceptance_row(row, d, H, rank):
    for n in range(3):
        model, res = run_row(row, d, H, rank, n)
        assert res.certified, res.error
        assert res.heads == model.canonical_heads()
        assert res.queries <= res.plan_runs * limit(row, d, H)      # the count holds per prime
        assert res.max_length == 2 * H


def test_counts_read_off_the_plan():
    rng = random.Random(0)
    for d in range(1, 7):
        assert draw_efficient_plan(d, 1, rng, 2 ** 32).count == d * d + d + 1
        for H in range(2, 5):
            p = draw_efficient_plan(d, H, rng, 2 ** 32)
            assert p.count == efficient_count(d, H) <= efficient_count(d, H, lean=False) \
                == 2 * H * d * d + 2 * H * d - d * d                  # issue 23: lean sampling (< for d >= 2)
            assert d == 1 or p.count < efficient_count(d, H, lean=False)
            assert draw_efficient_plan(d, H, rng, 2 ** 32, lean=False).count == efficient_count(d, H, lean=False)
    p = draw_efficient_plan(6, 2, rng, 2 ** 32, rank=1)
    assert len(p.checks) == rank_checks(2, 2 ** 32) == 2
    assert p.count == efficient_count(6, 2, 1, 2) == 60 and 5 * p.count <= 2 * paper_count(6, 2)
    assert draw_efficient_plan(3, 2, rng, 2 ** 32, rank=3).name == "efficient"   # rank >= d: no promise


def test_paper_plan_stays_the_default():
    model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
    res = learn(Oracle(model, Modular()), d=2, heads=2, seed=1)
    assert res.plan == "paper" and res.plan_detail is None
    assert res.queries == res.plan_runs * paper_count(2, 2)


def test_equal_v_falls_back_to_matching():
    model, res = run_row("equal v", 4, 2, None, 7)
    assert res.certified and res.heads == model.canonical_heads()
    # H = 2: the lean plan's basis families have all their samples; only the matching is added
    assert [f["kind"] for f in res.plan_fallbacks] == ["matching"]
    assert "coincide" in res.plan_fallbacks[0]["reason"]
    assert res.queries <= res.plan_runs * paper_count(4, 2)


@pytest.mark.parametrize("true_rank", [2, None])
def test_false_rank_promise_never_certified_wrong(true_rank):
    for n in range(3):
        model, res = run_row("false", 4, 2, 1, n, true_rank=true_rank)
        assert not res.certified or res.heads == model.canonical_heads()
        assert res.certified and res.plan == "efficient"
        assert [f["kind"] for f in res.plan_fallbacks] == ["rank"]


def test_rank_promise_above_the_true_rank_falls_back_on_a_singular_core():
    model, res = run_row("rank 1", 4, 2, 2, 0)
    assert res.certified and res.heads == model.canonical_heads()
    assert res.plan_fallbacks[0]["kind"] == "rank" and "singular" in res.plan_fallbacks[0]["reason"]


@pytest.mark.parametrize("checks", [(), [((3, -2), (1, 4))]])
def test_check_configurations_catch_an_exact_false_completion(checks):
    """X = E = I and W = I (rank 2) under rank=1: the skeleton completes to
    diag(1, 0), exact in the field and reproducing every skeleton observation.
    Only a check configuration can tell: with one the promise is refuted; without
    any (and no range to draw them from) the learner refuses to certify (issue 20:
    it used to certify the wrong completion)."""
    model = MultiHeadAttention([([[1, 0], [0, 1]], [2, 3])], d=2)
    K = Modular().with_scale(1)
    plan = efficient_plan([[1, 0], [0, 1]], [[1, 0], [0, 1]], 1, rank=1, checks=checks)
    rec = Recorder(Oracle(model, K), K, False)
    if checks:
        heads, _ = run_efficient(plan, rec, K, lambda: rec.observations)
        assert heads == model.canonical_heads() and plan.fallbacks[0]["kind"] == "rank"
        assert "certificate rejects" in plan.fallbacks[0]["reason"]
        assert plan.certificate == "unique" and plan.miss_bound == 0   # the full plan, H = 1
    else:
        with pytest.raises(RangeTooSmall, match="miss bound"):
            run_efficient(plan, rec, K, lambda: rec.observations)


def test_rational_field_multimodular_path():
    for H, d in ((1, 3), (2, 3)):
        model, res = run_row("generic" if H > 1 else "H=1", d, H, None, 1, field=Rational())
        assert res.certified and res.heads == model.canonical_heads()


def test_understated_head_count_is_not_certified_wrong():
    rng = trial_rng(0, "test-efficient", 99)
    model = row_model(rng, "generic", 3, 3, None)
    for H in (1, 2):
        res = learn(Oracle(model, Modular()), d=3, heads=H, seed=2, plan="efficient")
        assert not res.certified


def test_bad_arguments():
    model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])])
    with pytest.raises(ValueError):
        learn(Oracle(model, Modular()), d=2, heads=1, plan="fast")
    with pytest.raises(ValueError):
        learn(Oracle(model, Modular()), d=2, heads=1, rank=1)


def test_json_keys_and_cli(tmp_path, capsys):
    path = tmp_path / "m.json"
    assert main(["random-model", "--d", "3", "--heads", "2", "--seed", "4", "--out", str(path)]) == 0
    assert main(["learn", "--model", str(path), "--heads", "2", "--field", "modular", "--json"]) == 0
    paper = json.loads(capsys.readouterr().out)
    assert main(["learn", "--model", str(path), "--heads", "2", "--field", "modular", "--json",
                 "--plan", "efficient", "--seed", "3"]) == 0
    eff = json.loads(capsys.readouterr().out)
    for obj in (paper, eff):
        assert OLD_KEYS | {"plan_fallbacks", "plan_detail"} <= set(obj)
    assert paper["plan"] == "paper" and paper["plan_fallbacks"] == [] and paper["plan_detail"] is None
    assert eff["plan"] == "efficient" and eff["plan_queries"] == 35      # 39 before lean sampling
    # per prime; 2 passes (analysis prime + confirmation) since issue 23, 3 before
    assert [r["queries"] for r in eff["multimodular"]["primes"]] == [35] * 2
    assert eff["queries"] == 2 * 35 and eff["exact_over_Q"] is True
    assert eff["plan_detail"]["paper_queries"] == 69 and eff["heads"] == paper["heads"]
    assert main(["learn", "--model", str(path), "--heads", "2", "--rank", "1"]) == 2
    assert "--plan efficient" in capsys.readouterr().err
    assert main(["learn", "--model", str(path), "--heads", "2", "--field", "modular",
                 "--plan", "efficient", "--rank", "1", "--seed", "1"]) == 0
    assert "rank fallback" in capsys.readouterr().out


def test_claim_verified_on_tiny_campaign():
    ctx = Context(quick=True, seed=0)
    ctx.tiny = True
    res = discover()["efficient-plan"].run(ctx)
    assert res.status == "verified", res.evidence
    s = res.evidence["series"]
    assert len(s["d"]) == len(s["efficient_queries"]) == len(s["paper_queries"]) > 0
    assert all(p["queries"] <= p["limit"] for p in s["queries_vs_d"]["points"])
