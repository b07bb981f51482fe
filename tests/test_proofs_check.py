"""The proofs-check claims (docs: explanation/claims.md):
each is verified on small seeded campaigns, and each reports ``refuted`` when handed a
counterexample.

The campaigns run at the "tiny" level (``ctx.tiny = True``), smaller than
``--quick``; the whole file takes well under a minute.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.fields import Rational
from exactlearn.model import Head

from proofs_check.claim import Context, LocalExecutor, discover
from proofs_check.claims import _learning, canonical_form, nonidentifiability, query_count, query_length
from proofs_check.claims import rational_function_form as rff
from proofs_check.models import KINDS, kinds_for, random_model, split_head, trial_rng

MY_CLAIMS = ["exact-recovery", "exact-recovery-upper-bound", "query-count", "query-length",
             "canonical-form", "rational-function-form", "nonidentifiability-resolved"]


def tiny_context(seed: int, executor=None) -> Context:
    ctx = Context(quick=True, seed=seed, executor=executor)
    ctx.tiny = True
    return ctx


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("cid", MY_CLAIMS)
def test_claim_verified_on_tiny_campaign(cid, seed):
    registry = discover()
    ctx = tiny_context(seed)
    res = registry[cid].run(ctx)
    assert res.status == "verified", (cid, res.evidence)
    assert ctx.trials > 0                      # trials go through ctx.map and are counted


def test_process_executor_gives_the_same_evidence():
    registry = discover()
    one = registry["query-length"].run(tiny_context(3))
    ex = LocalExecutor(2)
    try:
        two = registry["query-length"].run(tiny_context(3, ex))
    finally:
        ex.close()
    assert (one.status, one.evidence) == (two.status, two.evidence)


# ---- the models ------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_model_kinds(kind):
    for H in (2, 3, 4):
        if kind not in kinds_for(H):
            continue
        m = random_model(trial_rng(0, "t", H), 3, H, kind)
        n = len(m.canonical_heads())
        assert m.H == H
        expected = {"plain": H, "den": H, "merged": H - 1, "cancel": H - 2, "merged+cancel": H - 3}[kind]
        assert n == expected, (kind, H, n)
    if kind != "plain":
        assert any(x.denominator > 1 for h in random_model(trial_rng(1, "t", 0), 3, 3, kind).heads
                   for row in h.W for x in row)


def test_split_head_keeps_canonical_form():
    m = random_model(trial_rng(0, "t", 9), 2, 2, "den")
    s = split_head(random.Random(0), m, 1)
    assert s.H == 3 and s.heads != m.heads and s.canonical_heads() == m.canonical_heads()


# ---- counterexamples are reported as refuted ---------------------------------------

def _real_run(wrong: bool):
    model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
    res = learn(Oracle(model, Rational()), d=2, heads=2, seed=1)
    assert res.certified
    if wrong:   # a deliberately wrong learner answer: one v entry off by 1
        h = res.heads[0]
        bad = Head(h.W, (h.v[0] + 1,) + h.v[1:])
        res = dataclasses.replace(res, heads=(bad,) + res.heads[1:])
    row = {"trial": [0, "t", 0], "field": "rational", "d": 2, "H": 2, "bound": 2, "upper_bound": False,
           "kind": "plain", "range": 20, "expected_queries": 29, "expected_length": 5,
           "oracle_queries": 29, "oracle_max_length": 5}
    row.update(_learning.compare_with_canonical(res, model))
    return row


def test_exact_recovery_refuted_by_a_wrong_certified_answer():
    good = _real_run(wrong=False)
    assert _learning.judge_recovery(good) is True
    assert _learning.recovery_summary([good] * 3)[0] == "verified"
    bad = _real_run(wrong=True)
    assert _learning.judge_recovery(bad) is False
    status, ev = _learning.recovery_summary([good] * 5 + [bad])
    assert status == "refuted" and ev["wrong"] == 1 and ev["wrong_examples"][0]["learned"]


def test_exact_recovery_inconclusive_when_too_few_certified():
    good = _real_run(wrong=False)
    failed = dict(good, status="failed", equal=False, error="matching failed: x", reason="matching failed")
    status, ev = _learning.recovery_summary([good, failed, failed])
    assert status == "inconclusive" and ev["failed_by_reason"] == {"matching failed": 2}
    crash = dict(good, status="crash", reason="crash")
    assert _learning.recovery_summary([good] * 5 + [crash])[0] == "inconclusive"


def test_query_count_and_length_refuted_by_a_wrong_count():
    good = _real_run(wrong=False)
    plan_ok = [{"d": 2, "H": 2, "ok": True, "max_length": 5}]
    assert query_count.count_summary(plan_ok, [good] * 3, 3)[0] == "verified"
    assert query_length.length_summary(plan_ok, [good] * 3, 3)[0] == "verified"
    assert query_count.count_summary(plan_ok, [dict(good, queries=30, oracle_queries=30)] + [good] * 3, 3)[0] \
        == "refuted"
    assert query_count.count_summary(plan_ok, [dict(good, oracle_queries=31)] + [good] * 3, 3)[0] == "refuted"
    assert query_count.count_summary([{"d": 2, "H": 2, "ok": False}], [good] * 3, 3)[0] == "refuted"
    assert query_length.length_summary(plan_ok, [dict(good, max_length=6)] + [good] * 3, 3)[0] == "refuted"
    assert query_length.length_summary(plan_ok, [dict(good, oracle_max_length=7)] + [good] * 3, 3)[0] \
        == "refuted"
    assert query_length.length_summary([{"d": 2, "H": 2, "max_length": 4}], [good] * 3, 3)[0] == "refuted"


def test_canonical_form_refuted_by_a_mismatch():
    rows = [canonical_form.canonical_trial((0, i, 2, 2, "merged", 1, 2, 20)) for i in range(3)]
    assert canonical_form.canonical_summary(rows, 3)[0] == "verified"
    bad = dict(rows[0], mismatches=[{"field": "rational", "query": [[1, 2]]}])
    assert canonical_form.canonical_summary(rows + [bad], 3)[0] == "refuted"
    unwitnessed = dict(rows[0], witness_after=None)
    assert canonical_form.canonical_summary(rows + [unwitnessed], 3)[0] == "inconclusive"


def test_rational_function_form_detects_a_wrong_identity():
    f, rhs = rff.query_family_value(2, 2, "paper")
    assert rff.is_zero_rational(f - rhs)
    f, rhs = rff.query_family_value(2, 2, "sign")
    assert not rff.is_zero_rational(f - rhs)
    poles = [rff.poles_trial(2)]
    box = [rff.box_poles_trial((0, 2, 0, "paper")), rff.box_poles_trial((0, 2, 1, "control"))]
    ok = [{"H": 2, "d": 2, "variant": "paper", "zero": True},
          {"H": 2, "d": 2, "variant": "sign", "zero": False}]
    assert rff.form_summary(ok, poles, box)[0] == "verified"
    assert rff.form_summary([dict(ok[0], zero=False), ok[1]], poles, box)[0] == "refuted"
    assert rff.form_summary([ok[0], dict(ok[1], zero=True)], poles, box)[0] == "inconclusive"
    assert rff.form_summary(ok, [dict(poles[0], coefficients_ok=False)], box)[0] == "refuted"
    assert rff.form_summary(ok, poles, box[:1])[0] == "inconclusive"     # no control asked


def test_rational_function_form_poles_come_from_the_black_box(monkeypatch):
    """poles_ok compares the Q interpolated from a black box's answers with the poles of the
    model's weights: a perturbed box (the control) fails it, and so does an interpolation
    that returns a wrong Q -- the claim is then refuted (before, Q was built as
    prod(1 + k rho_h) and Q(-1/rho_h) = 0 could not fail)."""
    ok = [{"H": H, "d": 1, "variant": "paper", "zero": True} for H in (1, 2)] + [
        {"H": 1, "d": 1, "variant": "sign", "zero": False}]
    poles = [rff.poles_trial(H) for H in (1, 2)]
    rows = [rff.box_poles_trial((0, H, 0, v)) for H in (1, 2) for v in ("paper", "control")]
    assert [r["poles_ok"] for r in rows] == [True, False, True, False]
    assert all(r["answered"] == 2 * r["H"] + 1 for r in rows)
    assert rff.form_summary(ok, poles, rows)[0] == "verified"
    import exactlearn.pipeline.interpolate as interp
    real = interp.cauchy_interpolate

    def shifted(ks, ys, H, K):      # a wrong Q: Q(2k), every pole halved
        rf = real(ks, ys, H, K)
        return interp.RationalFunction(rf.P, [rf.Q[0]] + [2 * c for c in rf.Q[1:]])
    monkeypatch.setattr(interp, "cauchy_interpolate", shifted)
    bad = [rff.box_poles_trial((0, H, 0, "paper")) for H in (1, 2)]
    assert not any(r["poles_ok"] for r in bad)
    assert rff.form_summary(ok, poles, bad + rows[1::2])[0] == "refuted"


def test_nonidentifiability_refuted_by_a_counterexample():
    rows = [nonidentifiability.nonident_trial((0, i, 2, 2, "plain", 0, 2, "rational")) for i in range(3)]
    assert nonidentifiability.nonident_summary(rows)[0] == "verified"
    for bad in (dict(rows[0], output_mismatches=[{"field": "rational"}]),
                dict(rows[0], same_canonical=False),
                dict(rows[0], learner_equal=[True, False]),
                dict(rows[0], differing_queries=0),
                dict(rows[0], B_learned_A=True)):
        assert nonidentifiability.nonident_summary(rows + [bad])[0] == "refuted"


def test_every_claim_module_is_imported_and_registers_a_claim():
    """proofs_check.claims imports its modules by name (no importlib discovery, so that
    lint-imports sees the edges): a module missing from that list would silently drop its
    claims.  Each module file of the package registers at least one claim."""
    from pathlib import Path

    import proofs_check.claims as pkg
    files = {p.stem for p in Path(pkg.__file__).parent.glob("*.py") if not p.stem.startswith("_")}
    registering = {c.run.__module__.rsplit(".", 1)[1] for c in discover().values()}
    assert registering == files
    assert len(discover()) == 13
