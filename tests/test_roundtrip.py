"""Round trip (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works and docs: explanation/algorithm.md#what-a-failure-means):
learn(Oracle(model)) is the model's canonical form.

Whenever the learner certifies, its heads must *equal* ``model.canonical_heads()``
(exact rationals) and the canonical form computed apart (tests/reference.py), with exactly ``4Hd^2 - 2H + 1`` queries
per plan (the modular field asks the plan once per prime), the longest of
``2H + 1`` tokens (H the head count given, or the bound H0).  A failure must
be explicit: status "failed", a reason, no heads.  A certified wrong answer
fails every test here.
"""

from __future__ import annotations

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.fields import Rational
from exactlearn.pipeline.plan import paper_count

from field_table import USER_FIELDS, over
from reference import as_set, reference_canonical
from strategies import any_models, bounded_models, models, random_models, scaled, seeded_model, seeds


def check_round_trip(res, model, H):
    """The round-trip contract for one run with head count or bound H."""
    event(res.status)
    if res.certified:
        assert res.heads == model.canonical_heads(), "certified a wrong answer"
        assert as_set(res.heads) == reference_canonical(model)      # computed apart from canonicalize
        assert res.error is None
        assert res.plan_queries == 4 * H * model.d ** 2 - 2 * H + 1 == paper_count(model.d, H)
        primes = res.multimodular["primes"] if res.multimodular else None    # the modular field
        if primes is None:        # a field whose default redraws (limits.DEFAULT_RETRIES: the
            # symbolic field) may have spent whole plans on earlier, degenerate draws
            assert res.queries == res.attempts * res.plan_queries
            assert res.extra_queries == (res.attempts - 1) * res.plan_queries
        else:                                  # asks the whole plan once per prime, each counted
            assert [p["queries"] for p in primes] == [res.plan_queries] * len(primes)
            assert res.queries == len(primes) * res.plan_queries
        assert res.max_length == 2 * H + 1
        assert res.heads_bound == H
    else:
        assert res.status == "failed"
        assert isinstance(res.error, str) and res.error
        assert res.heads == ()


# -- properties ---------------------------------------------------------------------
#: every size of the acceptance range d <= 3, H <= 3, and each kind of model
KINDS = {"plain": {}, "merged": {"merged": True}, "cancelling": {"cancelling": True}}
GRID = [(d, H, kind) for d in (1, 2, 3) for H in (1, 2, 3) for kind in KINDS
        if H >= 2 or kind == "plain"] + [(2, 4, "merged+cancelling")]
KINDS["merged+cancelling"] = {"merged": True, "cancelling": True}

#: pinned edge cases: every head cancels (f = 0, no canonical heads); all W = 0
#: (rho = 1 everywhere: one merged head); heads that all have v = 0
EMPTY_BY_CANCELLING = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2]), ([[1, 0], [0, 1]], [-1, -2])])
ZERO_W = MultiHeadAttention([([[0, 0], [0, 0]], [1, 2]), ([[0, 0], [0, 0]], [3, -2])])


@over(USER_FIELDS)
@given(model=st.one_of(models(d=2, heads=2), random_models(d=2, heads=2)), seed=seeds)
@example(model=EMPTY_BY_CANCELLING, seed=0)
@example(model=ZERO_W, seed=0)
@example(model=MultiHeadAttention([([[0, 0], [0, 0]], [0, 0]), ([[1, 0], [0, 1]], [0, 0])]), seed=1)
@settings(max_examples=scaled(10))
def test_round_trip_edge_cases(F, model, seed):
    """In every exact field a user asks in (tests/field_table.py), at that field's own range."""
    res = learn(Oracle(model, F()), d=model.d, heads=model.H, seed=seed, query_range=F.ranges[-1])
    check_round_trip(res, model, model.H)


@pytest.mark.parametrize("d,H,kind", GRID, ids=[f"d{d}-H{H}-{k}" for d, H, k in GRID])
@settings(max_examples=scaled(15))
@given(data=st.data(), seed=seeds)
def test_round_trip_known_heads(d, H, kind, data, seed):
    """heads=H (the raw head count): certified => canonical heads, paper count.

    Half the models come from hypothesis' draws (zeros, repeats: merged and
    vanishing heads), half from random.Random (generic models)."""
    model = data.draw(any_models(d=d, heads=H, **KINDS[kind]))
    res = learn(Oracle(model, Rational()), d=d, heads=H, seed=seed)
    check_round_trip(res, model, H)


@settings(max_examples=scaled(60))
@given(problem=st.one_of(bounded_models(max_d=3, max_heads=2),
                         bounded_models(max_d=2, max_heads=3, merged=True),
                         bounded_models(max_d=2, cancelling=True, max_extra=1)),
       seed=seeds)
def test_round_trip_head_bound(problem, seed):
    """max_heads=H0 > H: the interpolation finds the true count; H0 sets the count."""
    model, H0 = problem
    res = learn(Oracle(model, Rational()), d=model.d, max_heads=H0, seed=seed)
    check_round_trip(res, model, H0)


@settings(max_examples=scaled(60))
@given(model=st.one_of(any_models(), any_models(cancelling=True)), seed=seeds, retries=st.integers(1, 3),
       R=st.sampled_from([1, 2, 30]))
def test_round_trip_with_retries(model, seed, retries, R):
    """retries=N: every attempt costs one plan, all of it reported in queries.

    Small ranges (1, 2) make degenerate draws, and so retries, common."""
    res = learn(Oracle(model, Rational()), d=model.d, heads=model.H, seed=seed, retries=retries,
                query_range=R)
    event(f"attempts={res.attempts}")
    count = paper_count(model.d, model.H)
    assert 1 <= res.attempts <= retries + 1
    assert res.queries == res.attempts * count
    assert res.extra_queries == (res.attempts - 1) * count
    if res.certified:
        assert res.heads == model.canonical_heads()
        assert res.max_length == 2 * model.H + 1
    else:
        assert res.attempts == retries + 1 and res.error and res.heads == ()


# -- the certified rate over a fixed seeded batch ----------------------------------------
def batch(per_cell, bound_extra):
    """d = 1..3, H = 1..3, plain / merged / cancelling models, ``per_cell`` seeds each."""
    for d in (1, 2, 3):
        for H in (1, 2, 3):
            for kind in ("plain", "merged", "cancelling"):
                if kind != "plain" and H < 2:
                    continue
                for s in range(per_cell):
                    model = seeded_model(1000 * d + 100 * H + s, d, H, **({kind: True} if kind != "plain" else {}))
                    yield model, H + bound_extra, s


#: Measured on this batch at the default range (R = 30, DEFAULT_RANGES["rational"]):
#: 83 of 84 runs certified (0.988) with heads=H, and 83 of 84 with max_heads=H+1
#: (the failures are detected degenerate draws).  Before the learner's range moved
#: from 20 to 30 it was 82 of 84 for both.  The issue's acceptance bound is 2/3; we
#: assert 0.9, the measured rate less a margin for changes in the learner's draws
#: (at p = 0.976, n = 84, a rate below 0.9 has probability < 0.1%).
MIN_CERTIFIED_RATE = 0.9


@pytest.mark.parametrize("bound_extra,per_cell", [(0, 4), (1, 4)], ids=["heads=H", "max_heads=H+1"])
def test_certified_rate_default_range(bound_extra, per_cell):
    runs = certified = 0
    for model, H0, s in batch(per_cell, bound_extra):
        kw = {"heads": H0} if bound_extra == 0 else {"max_heads": H0}
        res = learn(Oracle(model, Rational()), d=model.d, seed=s, **kw)
        runs += 1
        if res.certified:
            certified += 1
            assert res.heads == model.canonical_heads(), f"certified a wrong answer (seed {s})"
            assert res.queries == paper_count(model.d, H0) and res.max_length == 2 * H0 + 1
        else:
            assert res.status == "failed" and res.error
    rate = certified / runs
    assert rate >= 2 / 3, f"certified rate {certified}/{runs} below the acceptance bound 2/3"
    assert rate >= MIN_CERTIFIED_RATE, f"certified rate {certified}/{runs} = {rate:.3f} < {MIN_CERTIFIED_RATE}"


def test_never_silently_wrong_small_range():
    """Acceptance: at --range 2 degenerate draws are common, yet no certified answer is wrong.

    Measured on this batch (400 models, d <= 3, H <= 3, H0 = H or H + 1): 329
    certified, 71 failed; we require both kinds to occur (at least 200 and 20) so
    the test exercises detection and is not vacuous."""
    import random
    certified = failed = 0
    for s in range(400):
        rng = random.Random(s)
        d, H = rng.randint(1, 3), rng.randint(1, 3)
        kind = rng.choice(["plain", "merged", "cancelling"]) if H >= 2 else "plain"
        model = seeded_model(s, d, H, **({kind: True} if kind != "plain" else {}))
        H0 = H + rng.randint(0, 1)
        res = learn(Oracle(model, Rational()), d=d, max_heads=H0, seed=s, query_range=2)
        if res.certified:
            certified += 1
            assert res.heads == model.canonical_heads(), f"certified a wrong answer (seed {s})"
            assert res.queries == paper_count(d, H0)
        else:
            failed += 1
            assert res.status == "failed" and res.error and res.heads == ()
    assert certified >= 200 and failed >= 20, (certified, failed)


def test_default_range_adapts_to_the_rational_size_limit():
    """D = 2520 makes 2^(D s) too large at the default range: the learner halves the
    range before any query (the plan check is free) and still certifies; an explicit
    --range is respected and fails before any query with a reason."""
    m = MultiHeadAttention([([["7/9", "5/8"], ["-9/7", 3]], [1, 2]),
                            ([["10/3", 1], [2, "-1/5"]], [1, -1])])
    res = learn(Oracle(m, Rational()), d=2, heads=2, seed=0)
    assert res.certified and res.heads == m.canonical_heads()
    assert res.query_range < 30 and res.queries == 4 * 2 * 4 - 2 * 2 + 1
    fixed = learn(Oracle(m, Rational()), d=2, heads=2, seed=0, query_range=30)
    assert fixed.status == "failed" and fixed.queries == 0 and "realise" in fixed.error
