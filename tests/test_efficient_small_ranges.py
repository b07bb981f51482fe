"""The efficient plan at small query ranges (issue 20, section 1): no certified wrong answer,
and every certificate states a miss bound <= 2^-40.

At R = 1 the second head of the issue's model hides in every configuration of many
draws; the plan's single check configuration used to draw x' = (0, 0) and certify a
one-head answer with ``check_miss_bound`` 1.0.  The truth every test compares with is the
raw model's ``canonical_heads()`` (merge equal W, sum v, drop zeros), computed from the
model, never from the learner.
"""

from __future__ import annotations

import itertools
import json
import random

import pytest

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.cli.main import main
from exactlearn.fields import Modular, Rational
from exactlearn.strategies.efficient.plan import check_miss_bound, rank_checks
from proofs_check.models import kinds_for, random_model

ISSUE_20 = {"format": "exactlearn.mha/1", "d": 2, "heads": [
    {"W": [[-1, "1/2"], [0, 1]], "v": ["2/3", "-1/3"]},
    {"W": [[-1, "1/2"], [-2, -1]], "v": ["-3/2", "-3/2"]}]}

FIELDS = {"rational": Rational, "modular": Modular}
BOUND = 2.0 ** -40


def check_run(model, oracle, res):
    """The contract of every run: counted; certified means right and bounded."""
    assert res.queries == oracle.queries
    if res.certified:
        assert res.heads == model.canonical_heads()
        assert res.plan_detail["check_miss_bound"] <= BOUND
        assert res.plan_detail["certificate"] in ("unique", "checks")
        per_run = res.plan_queries + sum(f["queries"] for f in res.plan_fallbacks)
        assert res.queries == res.plan_runs * per_run
    else:
        assert res.exact_over_Q is False


@pytest.mark.parametrize("fname", FIELDS)
def test_issue_20_case_is_not_certified_wrong(fname):
    """``--range 1 --seed 29``: certified with one wrong head before; now an explicit
    failure saying why, with the smallest range that works in Python-API terms."""
    model = MultiHeadAttention.from_json(ISSUE_20)
    oracle = Oracle(model, FIELDS[fname]())
    res = learn(oracle, d=2, heads=2, seed=29, plan="efficient", query_range=1)
    check_run(model, oracle, res)
    assert not res.certified and not res.exact_over_Q
    assert "query range" in res.error and "query_range >= " in res.error
    assert "more than 2 canonical heads" not in res.error          # not the head-bound hint


@pytest.mark.parametrize("fname", FIELDS)
def test_issue_20_model_at_small_ranges(fname):
    """Seeds 0..39 and the seeds that were certified wrong on 43b826e (R = 1: 56, 94, 107,
    161, 198; R = 2: 37, 88)."""
    model = MultiHeadAttention.from_json(ISSUE_20)
    certified = 0
    for R, extra in ((1, (56, 94, 107, 161, 198)), (2, (37, 88)), (3, ())):
        for seed in itertools.chain(range(40), extra):
            oracle = Oracle(model, FIELDS[fname]())
            res = learn(oracle, d=2, heads=2, seed=seed, plan="efficient", query_range=R)
            check_run(model, oracle, res)
            certified += res.certified
    assert certified > 0                     # the contract was exercised on certified runs


@pytest.mark.parametrize("fname", FIELDS)
def test_seeded_fuzz_small_ranges(fname):
    """R in 1..3, d <= 3, H <= 3, plain, merged and cancelling heads, the exact count or a
    bound H + 1: no certified answer differs from the canonical heads, every certified
    answer reports a miss bound <= 2^-40, every query is counted."""
    rng = random.Random(f"issue-20-fuzz:{fname}")
    outcomes = {"certified": 0, "failed": 0, "by_checks": 0}
    for trial in range(90):
        R = 1 + trial % 3
        d, H = rng.randint(1, 3), rng.randint(1, 3)
        model = random_model(rng, d, H, rng.choice(kinds_for(H)))
        heads, bound = (H, None) if rng.random() < 0.5 else (None, H + 1)
        oracle = Oracle(model, FIELDS[fname]())
        res = learn(oracle, d=d, heads=heads, max_heads=bound, seed=rng.randrange(2 ** 32),
                    plan="efficient", query_range=R)
        check_run(model, oracle, res)
        outcomes["certified" if res.certified else "failed"] += 1
        outcomes["by_checks"] += res.certified and res.plan_detail["certificate"] == "checks"
    assert outcomes["certified"] > 0 and outcomes["failed"] > 0, outcomes


def test_further_checks_are_asked_counted_and_reported():
    """A bound H0 = 2 above a one-head model: no 'unique' certificate, so the single check
    of the plan (miss bound about 2^-30 at the default range) is not enough; the learner
    asks one more, per prime, reported as a 'checks' fallback."""
    model = MultiHeadAttention([([[1, 2], [0, -1]], [1, 3])])
    oracle = Oracle(model, Modular())
    res = learn(oracle, d=2, max_heads=2, seed=5, plan="efficient")
    check_run(model, oracle, res)
    assert res.certified and res.plan_detail["certificate"] == "checks"
    extra = [f for f in res.plan_fallbacks if f["kind"] == "checks"]
    assert len(extra) == 1 and extra[0]["configs"] == 1 and extra[0]["queries"] == 3
    assert res.plan_detail["check_configs"] == 2
    assert res.exact_over_Q


def test_generic_run_keeps_its_count_with_a_unique_certificate():
    """H heads recovered with every label tied: certified 'unique' (bound 0), no extra query."""
    model = MultiHeadAttention([([[1, 0, 2], [0, -1, 1], [1, 1, 0]], [1, 2, 0]),
                                ([[0, 1, 0], [1, 0, -2], [2, 0, 1]], [-1, 1, 3])])
    oracle = Oracle(model, Modular())
    res = learn(oracle, d=3, heads=2, seed=1, plan="efficient")
    check_run(model, oracle, res)
    assert res.plan_detail["certificate"] == "unique" and res.plan_detail["check_miss_bound"] == 0
    assert res.plan_fallbacks == [] and res.queries == 2 * 35     # two passes: analysis, confirmation


def test_miss_bound_is_a_bound_by_enumeration():
    """Every check configuration on the R = 1 grid (d = 2): the fraction on which a wrong
    one-head model agrees with the true one on the whole check family (k = 1) never exceeds
    check_miss_bound(1, 1); the values come from the models' own evaluators."""
    from exactlearn.strategies.efficient.plan import checks_needed
    K = Rational()
    truth = MultiHeadAttention([([[1, 0], [2, -1]], [1, 2])])
    grid = list(itertools.product(range(-1, 2), repeat=2))
    for wrong in ([([[0, 0], [2, -1]], [1, 2])], [([[1, 0], [2, 1]], [1, 2])],
                  [([[1, 1], [2, -1]], [1, 2])]):
        other = MultiHeadAttention(wrong)
        missed = 0
        for x, e in itertools.product(grid, grid):
            a = tuple(p + q for p, q in zip(x, e))
            same = truth.evaluate([a, x], K) == other.evaluate([a, x], K)
            missed += same
        assert missed / len(grid) ** 2 <= check_miss_bound(1, 1)
    assert check_miss_bound(1, 1) == 1 / 3 + 5 / 9
    assert check_miss_bound(2, 1) == 1.0 and check_miss_bound(2, 3) > 0.5
    assert checks_needed(check_miss_bound(3, 2 ** 32)) == 2


def test_rank_plan_refuses_or_certifies_with_a_small_bound():
    """rank_checks refuses above 1/2; at R = 2 a rank promise is dropped, and the run is
    either certified right with a bound <= 2^-40 or an explicit failure."""
    with pytest.raises(ValueError, match="query range"):
        rank_checks(2, 3)
    assert 2 * check_miss_bound(2, 2 ** 32) ** rank_checks(2, 2 ** 32) <= BOUND
    model = MultiHeadAttention([([[1, 2, 0], [2, 4, 0], [0, 0, 0]], [1, 0, 1]),
                                ([[0, 0, 0], [1, 0, 1], [0, 0, 0]], [0, 1, 1])])
    for seed in range(6):
        oracle = Oracle(model, Modular())
        res = learn(oracle, d=3, heads=2, seed=seed, plan="efficient", rank=1, query_range=2)
        check_run(model, oracle, res)
        assert res.plan_detail["rank"] is None and "query_range >= 7" in res.plan_detail["rank_dropped"]
        assert not res.certified or any(f["kind"] == "rank" and "not used" in f["reason"]
                                        for f in res.plan_fallbacks)


def test_cli_json_states_the_bound(tmp_path, capsys):
    path = tmp_path / "eff.json"
    path.write_text(json.dumps(ISSUE_20))
    for field in ("rational", "modular"):
        code = main(["learn", "--model", str(path), "--heads", "2", "--plan", "efficient", "--range", "1",
                     "--seed", "29", "--field", field, "--json"])
        out = json.loads(capsys.readouterr().out)
        assert code == 1 and out["status"] == "failed" and out["exact_over_Q"] is False
        assert out["plan_detail"]["check_miss_bound"] == 1.0 and out["heads"] == []


def test_unique_certificate_is_refused_where_two_models_fit():
    """Why a bound above the true head count needs the checks: with X = E = I and H = 2, the
    one-head model A and the two-head model B (a second head differing from A's only in the
    score e_1^T W x_2, with v orthogonal to e_1) answer every query of the efficient plan
    alike -- evaluated here on both raw models -- yet differ.  ``unique_on_plan`` must not
    call either unique; with H = 1 it calls A unique."""
    from exactlearn.strategies.efficient.learn import unique_on_plan
    from exactlearn.strategies.efficient.plan import efficient_plan
    K = Rational()
    A = MultiHeadAttention([([[1, 2], [0, -1]], [1, 3])])
    B = MultiHeadAttention([([[1, 2], [0, -1]], [1, 2]), ([[1, 5], [0, -1]], [0, 1])])
    plan = efficient_plan([[1, 0], [0, 1]], [[1, 0], [0, 1]], 2)
    for q in plan.queries:
        tokens = plan.tokens(q)
        assert A.evaluate(tokens, K) == B.evaluate(tokens, K)
    probe = [(1, 2), (1, 2), (2, 1)]
    assert A.evaluate(probe, K) != B.evaluate(probe, K)
    assert A.canonical_heads() != B.canonical_heads()
    assert not unique_on_plan(A.canonical_heads(), plan, K)
    assert not unique_on_plan(B.canonical_heads(), plan, K)
    assert unique_on_plan(A.canonical_heads(), efficient_plan([[1, 0], [0, 1]], [[1, 0], [0, 1]], 1), K)
    for box in (A, B):                        # either box: never certified as the other
        for seed in range(4):
            oracle = Oracle(box, Modular())
            res = learn(oracle, d=2, max_heads=2, seed=seed, plan="efficient")
            check_run(box, oracle, res)
