"""Counts that add up, and options that apply (issue 20, sections 4 and 6).

Every count here is compared with the black box's own count, kept by a wrapper outside
exactlearn (:class:`Box`): the calls it answered, and the number it had answered when each
draw was checked (``check_plan`` runs once per attempt, before the attempt's first query),
so the queries of the earlier attempts are known without asking the learner.
Budget: a few seconds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.cli.main import main
from exactlearn.errors import ExactLearnError
from exactlearn.fields import Rational
from exactlearn.fields.real import Real
from exactlearn.oracle import TokenAdapter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from float_layers import BatchedAttention, NumpyAttention  # noqa: E402

MODEL = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])


class Box:
    """A black box's own count: ``calls`` answered, ``marks`` the count at each draw check."""

    def __init__(self, oracle, answer=None):
        self.oracle = oracle
        self.field = oracle.field
        self.answer = answer or oracle
        self.calls = 0
        self.marks = []

    def __call__(self, tokens):
        y = self.answer(tokens)
        self.calls += 1
        return y

    def check_plan(self, plan):
        self.marks.append(self.calls)
        return self.oracle.check_plan(plan)


# -- refused draws: not degenerate, and no negative extra queries ----------------------------
def test_refused_draws_are_named_and_spend_no_extra_queries(tmp_path, capsys):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(MODEL.to_json()))
    rc = main(["learn", "--model", str(path), "--heads", "2", "--range", str(10 ** 40),
               "--retries", "3", "--json", "--seed", "1"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and out["status"] == "failed"
    assert out["queries"] == 0 and out["attempts"] == 4
    assert out["extra_queries"] == 0 and out["refused_draws"] == 4
    assert f"range R = {10 ** 40}" in out["error"]            # the range ...
    assert "at most 1000000" in out["error"]                     # ... and the field's limit
    assert "refused before any query" in out["error"] and "not a degenerate draw" in out["error"]


def test_demo_says_the_draws_were_refused_not_degenerate(capsys):
    assert main(["demo", "--range", str(10 ** 17)]) == 1
    text = capsys.readouterr().out
    assert "-29" not in text and "spending 0 extra queries" in text
    assert "were refused before any query" in text and "were degenerate" not in text


# -- real field: the final attempt's probe is the final attempt's ----------------------------
def test_real_field_extra_queries_are_the_earlier_attempts():
    """Two heads learned with heads=3 over the real field: every attempt probes and fails
    (the probe's families never fit three heads), and is redrawn.  ``extra_queries`` is
    what the box had answered when the final draw was checked; before the fix the final
    attempt's probe was counted as a redraw."""
    two = MultiHeadAttention([([[1, "1/2"], ["-1/4", "3/4"]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
    box = Box(Oracle(two, Real(dps=30)))
    res = learn(box, d=2, heads=3, retries=2, seed=0, plan="paper")
    assert res.status == "failed" and res.attempts == 3 == len(box.marks)
    assert res.queries == box.calls
    assert res.extra_queries == box.marks[-1] > 0
    assert res.probe_queries > 0


def test_real_field_noisier_than_declared_is_not_redrawn_and_counted():
    """The same two heads learned with heads=1: the first attempt probes, asks the plan and
    finds the observations beyond the declared eta for one head.  That verdict is final
    (another draw cannot make it hold): one attempt, every answered call counted."""
    from exactlearn.errors import NoisierThanDeclared
    two = MultiHeadAttention([([[1, "1/2"], ["-1/4", "3/4"]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
    box = Box(Oracle(two, Real(dps=30)))
    res = learn(box, d=2, heads=1, retries=2, seed=0, plan="paper")
    assert res.status == "failed" and res.attempts == 1 == len(box.marks)
    assert isinstance(res.failure, NoisierThanDeclared) and "not retried (2 retries left)" in res.error
    assert res.queries == box.calls > res.probe_queries > 0
    assert res.extra_queries == 0


# -- a batch of the wrong length --------------------------------------------------------------
class OneTooMany(BatchedAttention):
    def batch(self, queries):
        ys = [self(X) for X in queries]
        return ys + [ys[-1]]


class OneTooFew(BatchedAttention):
    def batch(self, queries):
        return [self(X) for X in queries][:-1]


@pytest.mark.parametrize("cls,extra", [(OneTooMany, 0), (OneTooFew, -1)])
def test_a_batch_of_the_wrong_length_is_bad_input_naming_the_box(cls, extra):
    base = NumpyAttention.from_seed(2, 1, 0)
    box = cls(list(zip(base.W, base.v)))
    res = learn(box, d=2, heads=1, field=Real(dps=30), tokens="float64", plan="stable", seed=0,
                noise=5e-14, noise_rel=1e-15, retries=2)
    assert res.status == "failed" and res.heads == ()
    assert res.error.startswith("bad input:") and cls.__name__ in res.error
    assert res.attempts == 1                               # a broken box is not redrawn
    assert box.calls > 0 and res.queries == box.calls + extra   # every query it answered


def test_token_adapter_checks_the_batch_length():
    base = NumpyAttention.from_seed(2, 1, 0)
    box = OneTooMany(list(zip(base.W, base.v)))
    adapter = TokenAdapter(box, "float64")
    with pytest.raises(ExactLearnError, match="OneTooMany's batch") as info:
        adapter.batch([[(1, 0), (0, 1)], [(1, 1)]])
    assert info.value.kind == "bad input" and info.value.answered == 2


# -- verify is counted in queries ------------------------------------------------------------
def test_verify_queries_are_part_of_queries():
    box = Box(Oracle(MODEL, Rational()))
    res = learn(box, d=2, heads=2, seed=1, verify=7)
    assert res.certified and res.verified is True
    assert res.queries == box.calls == 36                   # 29 learning + 7 verification
    assert res.verify_queries == 7 and res.learning_queries == 29 == res.plan_queries
    assert res.extra_queries == 0
    out = res.to_json()
    assert (out["queries"], out["learning_queries"], out["verify_queries"]) == (36, 29, 7)
    plain = Box(Oracle(MODEL, Rational()))                  # verify=0: no count changes
    res = learn(plain, d=2, heads=2, seed=1)
    assert res.queries == res.learning_queries == plain.calls == 29 and res.verify_queries == 0


def test_verify_with_retries_keeps_extra_queries_right():
    """Redraws and a verification: extra_queries is the earlier attempts' queries (what the
    box had answered at the final draw), never the verification's."""
    box = Box(Oracle(MODEL, Rational()))
    res = learn(box, d=2, heads=2, seed=5, query_range=2, retries=8, verify=5)
    assert res.certified and res.attempts > 1
    assert res.queries == box.calls
    assert res.extra_queries == box.marks[-1]
    assert res.learning_queries == res.extra_queries + res.plan_queries
    assert res.verify_queries == 5


# -- a Transformer file: options that do not apply exit 2 ------------------------------------
@pytest.fixture(scope="module")
def transformer_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("t") / "t.json"
    assert main(["random-model", "--transformer", "--d", "2", "--heads", "1", "--seed", "1",
                 "--out", str(path)]) == 0
    return str(path)


@pytest.mark.parametrize("opts,word", [(["--workers", "2"], "--workers"),
                                       (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler"),
                                       (["--verify", "0"], "--verify 0")])
def test_transformer_refuses_options_that_do_not_apply(transformer_file, opts, word, capsys):
    rc = main(["learn", "--model", transformer_file, "--heads", "1", "--seed", "1"] + opts)
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and word in err


def test_transformer_verify_n_is_the_certificates_fresh_queries(transformer_file, capsys):
    """--verify N means N fresh random certificate queries; 0 is refused (above), never
    silently turned into the default 200."""
    for n in (3, 1):
        rc = main(["learn", "--model", transformer_file, "--heads", "1", "--seed", "1",
                   "--verify", str(n), "--json"])
        out = json.loads(capsys.readouterr().out)
        assert rc == 0 and out["certificate"]["fresh_kinds"]["random"] == n
    assert main(["learn", "--model", transformer_file, "--heads", "1", "--seed", "1",
                 "--verify", "0", "--json"]) == 2


# -- proofs-check query-count covers every route that asks ------------------------------------
def _tiny(seed=0):
    from proofs_check.claim import Context
    ctx = Context(quick=True, seed=seed)
    ctx.tiny = True
    return ctx


def test_query_count_claim_covers_every_route():
    from proofs_check.claim import discover
    res = discover()["query-count"].run(_tiny())
    assert res.status == "verified", res.evidence.get("why_not_verified")
    assert {"verify", "verify-modular", "real-paper", "real-stable-batch", "bad-batch", "redraws",
            "real-redraws", "refused"} <= set(res.evidence["routes"])
    assert res.evidence["route_mismatches"] == []


def test_query_count_claim_refuted_by_an_uncounted_verification(monkeypatch):
    """A verification that asks the black box past the recorder (as before, when
    verify_queries were left out of queries): the wrapper's count exceeds ``queries``."""
    import exactlearn.strategies.paper as paper
    real = paper.verify

    def verify(oracle, *args):
        return real(oracle.oracle, *args)            # the box itself, not the counting child
    monkeypatch.setattr(paper, "verify", verify)
    from proofs_check.claim import discover
    res = discover()["query-count"].run(_tiny())
    assert res.status == "refuted"
    assert any("route verify" in m for m in res.evidence["route_mismatches"])


def test_query_count_route_checks_can_fail():
    """The old extra_queries (the final attempt's probe counted as a redraw), a negative
    one, and a batch of the wrong length that was not refused are each a mismatch."""
    from proofs_check.claims import query_count as qc
    good = qc.route_trial((0, 0, "real-redraws"))
    assert good["attempts"] == 3 and qc.route_problems(good) == []
    assert qc.route_problems(dict(good, extra_queries=good["extra_queries"] + 10))
    refused = qc.route_trial((0, 0, "refused"))
    assert qc.route_problems(refused) == []
    assert qc.route_problems(dict(refused, extra_queries=-29))
    bad = qc.route_trial((0, 0, "bad-batch"))
    assert bad["queries"] == bad["answered"] > 0 and qc.route_problems(bad) == []
    assert qc.route_problems(dict(bad, status="failed", error="degenerate draw ..."))


def test_query_count_cluster_route_counts_as_serial():
    pytest.importorskip("distributed")
    from proofs_check.claims import query_count as qc
    rows = {r["route"]: r for r in qc.cluster_rows(0)}
    assert set(rows) == {"serial", "cluster", "cluster-workers"}
    assert all(qc.route_problems(r) == [] for r in rows.values())
    assert rows["cluster"]["queries"] == rows["serial"]["answered"] == rows["cluster-workers"]["queries"]
    assert qc.route_problems(dict(rows["cluster-workers"], queries=rows["serial"]["answered"] - 1))
