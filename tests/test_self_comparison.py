"""Checks that can fail (STYLE): each check compares two independently computed things.

Pinned from the generator audit (``python benchmarks/audit_generators.py`` prints
the counts before and after):

* the random-model generators deliver the structure they promise -- a "merged"
  model really merges two nonzero v into a nonzero sum, a "cancel" model really
  drops a group -- so that a check of the canonical form never compares a model
  with itself.  Each generator is checked here with counts computed apart, by
  tests/reference.py, not by the generator's own filter;
* ``canonicalize``, which both the learner's output and ``model.canonical_heads()``
  pass through, agrees with the canonical form computed apart;
* the claims refuse to verify on evidence made of self-comparisons.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactlearn.cli.main import random_model as cli_random_model
from proofs_check.claims import _learning, canonical_form, nonidentifiability
from proofs_check.models import canonical_model, expected_canonical_heads, kinds_for, random_model, trial_rng

from reference import as_set, reference_canonical
from strategies import any_models, models, random_models, scaled, seeded_model


def groups(model) -> list:
    """The raw heads' v grouped by equal W (as reference.py compares them)."""
    out: dict = {}
    for h in model.heads:
        out.setdefault(tuple(map(tuple, h.W)), []).append(h.v)
    return list(out.values())


def merges(model) -> int:
    """W groups with two or more nonzero v and a nonzero sum."""
    return sum(1 for vs in groups(model)
               if sum(1 for v in vs if any(v)) >= 2 and any(sum(col) for col in zip(*vs)))


def drops(model) -> int:
    """W groups with two or more nonzero v summing to 0 (dropped by the canonical form)."""
    return sum(1 for vs in groups(model)
               if sum(1 for v in vs if any(v)) >= 2 and not any(sum(col) for col in zip(*vs)))


# -- canonicalize against the reference ------------------------------------------------------
@settings(max_examples=scaled(60))
@given(model=st.one_of(any_models(max_heads=4), any_models(merged=True, max_heads=4),
                       any_models(cancelling=True, max_heads=4),
                       any_models(merged=True, cancelling=True, heads=5)))
def test_canonicalize_agrees_with_the_reference(model):
    canon = model.canonical_heads()
    assert as_set(canon) == reference_canonical(model)
    assert list(canon) == sorted(canon)                  # a value: one order


# -- proofs_check.models: the kinds are exact ---------------------------------------------------
@pytest.mark.parametrize("kind", ["merged", "cancel", "merged+cancel"])
def test_structured_kinds_are_never_canonical(kind):
    """d = 1 (W one of 13 numbers) is where random W collide; before the fix 7 of
    300 "cancel" models dropped no group (their W was another head's)."""
    for d in (1, 2):
        for H in range(2, 6):
            if kind not in kinds_for(H):
                continue
            for i in range(30):
                m = random_model(trial_rng(0, "self-comparison", i), d, H, kind)
                assert len(reference_canonical(m)) == expected_canonical_heads(H, kind) < H
                want_merge = kind == "merged" or (kind == "merged+cancel" and H >= 4)
                want_drop = kind != "merged"
                assert (merges(m) == 1) == want_merge and (drops(m) == 1) == want_drop, (kind, d, H, i)


def test_a_kind_needs_enough_heads():
    with pytest.raises(ValueError, match="more than H"):
        random_model(trial_rng(0, "x", 0), 2, 1, "merged")


# -- tests/strategies.py ------------------------------------------------------------------------
@settings(max_examples=scaled(30))
@given(model=st.one_of(models(merged=True, max_heads=4), random_models(merged=True, max_heads=4)))
def test_merged_models_merge(model):
    assert merges(model) >= 1 and len(reference_canonical(model)) < model.H


@settings(max_examples=scaled(30))
@given(model=st.one_of(models(cancelling=True, max_heads=4), random_models(cancelling=True, max_heads=4)))
def test_cancelling_models_drop_a_group(model):
    assert drops(model) >= 1 and len(reference_canonical(model)) < model.H


def test_seeded_models_have_their_structure():
    """Before the fix: 41 of 300 seeded "merged" models merged nothing, 15 of 300
    "cancelling" ones dropped nothing."""
    for s in range(150):
        d, H = 1 + s % 3, 2 + s % 3
        assert merges(seeded_model(s, d, H, merged=True)) >= 1, s
        assert drops(seeded_model(s, d, H, cancelling=True)) >= 1, s
        both = seeded_model(s, d, 4, merged=True, cancelling=True)
        assert merges(both) >= 1 and drops(both) >= 1, s


# -- exactlearn random-model --merge / --cancel -----------------------------------------------------
def test_cli_random_model_has_the_structure_asked_for():
    """Before the fix: 41 of 300 ``--merge`` models merged nothing (a v of 0, or
    v summing to 0) and 33 of 300 ``--cancel`` models dropped nothing."""
    for s in range(150):
        d, H = 1 + s % 3, 2 + s % 3
        assert merges(cli_random_model(d, H, seed=s, merge=True)) >= 1, s
        assert drops(cli_random_model(d, H, seed=s, cancel=True)) >= 1, s
        both = cli_random_model(d, 4, seed=s, merge=True, cancel=True)
        assert merges(both) >= 1 and drops(both) >= 1, s


# -- nonidentifiability: the added cancelling pair is a group that drops ----------------------------
def test_nonidentifiability_cancelling_pair_drops_a_group():
    """Before the fix its W was drawn without looking at the model's: 12 of 300
    pairs merged into an existing head instead of forming a dropped group."""
    for i in range(150):
        rng = trial_rng(0, "self-comparison-nonident", i)
        A = canonical_model(random_model(rng, 1 + i % 2, 1 + i % 3, "den"))
        if A.H == 0:
            continue
        A2 = nonidentifiability.reparameterise(rng, A, "cancelling pair")
        assert drops(A2) == 1 and reference_canonical(A2) == reference_canonical(A), i


# -- the claims refuse to verify on self-comparisons --------------------------------------------------
def test_canonical_form_is_inconclusive_on_self_comparisons():
    rows = [canonical_form.canonical_trial((0, i, 2, 3, "cancel", 1, 2, 20)) for i in range(3)]
    assert all(r["non_canonical"] and r["permuted"] for r in rows)
    assert canonical_form.canonical_summary(rows, 3)[0] == "verified"
    for bad in ([dict(rows[0], structure_as_kind=False)] + rows[1:],
                [dict(r, non_canonical=False) for r in rows],
                [dict(r, permuted=False) for r in rows]):
        status, ev = canonical_form.canonical_summary(bad, 3)
        assert status == "inconclusive", ev


def test_nonidentifiability_is_inconclusive_on_self_comparisons():
    rows = [nonidentifiability.nonident_trial((0, i, 2, 2, "plain", 0, 2, "rational")) for i in range(3)]
    assert nonidentifiability.nonident_summary(rows)[0] == "verified"
    for bad in (dict(rows[0], A_canonical=False), dict(rows[0], A2_structure=[0, 0, 0])):
        assert nonidentifiability.nonident_summary(rows[1:] + [bad])[0] == "inconclusive"


def test_exact_recovery_is_inconclusive_on_self_comparisons():
    row = _learning.learning_trial((0, "self-comparison", 0, "rational", 2, 2, None, "cancel", 20))
    assert row["structure_ok"] and row["canonical_heads"] == 0 and row["status"] == "certified"
    assert _learning.recovery_summary([row] * 3)[0] == "verified"
    status, ev = _learning.recovery_summary([row] * 3 + [dict(row, structure_ok=False)])
    assert status == "inconclusive" and ev["structured_runs_missing_structure"] == 1
