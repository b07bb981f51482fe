"""Query accounting (issue 10, part 4): every query the black box answers is counted.

Each run asks a black box wrapped in :class:`Tally`, a plain callable that
counts the calls it answers and the longest query itself (not exactlearn's
recorder or oracle counter); the learner's ``queries`` and ``max_length`` must
equal its count, for certified and failed runs, through the API and the CLI.
The query-count claim must be *refuted* when the learner miscounts in a way
only an independent count and ``attempts x 4Hd^2 - 2H + 1`` can see.
Budget: a few seconds.
"""

from __future__ import annotations

import json
import weakref

import pytest

import exactlearn.oracle as oracle_module
import exactlearn.strategies.paper as paper_strategy
import exactlearn.cli.transformer as cli_transformer
import exactlearn.strategies.transformer.certificate as transformer_certificate
from exactlearn import OneLayerTransformer
from exactlearn.cli.main import main
from exactlearn.fields import Rational
from exactlearn.oracle import TransformerOracle
from exactlearn.transformer_model import random_transformer
from exactlearn.strategies.transformer.learn import learn_transformer
from proofs_check.claim import Context, discover


class Tally:
    """The black box ``box``, counting the queries it answers and the longest one."""

    def __init__(self, box):
        self.box = box
        self.field = box.field
        self.calls = 0
        self.longest = 0

    def __call__(self, tokens):
        y = self.box(tokens)
        self.calls += 1
        self.longest = max(self.longest, len(tokens))
        return y


#: Two neurons on the hyperplane x_1 = 0 reading different heads (condition C2 violated):
#: learning succeeds, the certificate asks fresh queries and one of them disagrees.
C2_VIOLATION = OneLayerTransformer(
    [([[1, 0], [0, 1]], [[1, 0], [0, 0]]), ([[0, 1], [-1, 0]], [[0, 0], [2, 0]])],
    B=[[1, 0], [0, 1]], u=[1, -1])
#: beta = 0 (condition C1 violated): the learner itself fails, no certificate is run.
C1_VIOLATION = OneLayerTransformer(
    [([[1, 0], [0, 1]], [[1, 0], [0, 1]]), ([[0, 1], [-1, 0]], [[-1, 0], [0, -1]])],
    B=[[1, 0]], u=[1])


def learn_tallied(model, **kw):
    box = Tally(TransformerOracle(model, Rational()))
    return box, learn_transformer(box, d=model.d, heads=model.H, **kw)


def assert_counts_match(res, box):
    assert (res.queries, res.max_length) == (box.calls, box.longest)
    assert res.learning_queries + res.certificate_queries == res.queries
    assert max(res.learning_max_length, res.certificate_max_length) == res.max_length
    assert res.certificate_queries == len(res.fresh_queries)


# -- the one-layer Transformer ---------------------------------------------------------------
def test_certified_transformer_counts_the_certificate():
    box, res = learn_tallied(random_transformer(2, 1, 2, seed=1001), seed=1001)
    assert res.certified, res.error
    assert_counts_match(res, box)
    assert res.certificate_queries >= 200 and res.learning_queries > 0


def test_failed_transformer_runs_count_every_answered_query():
    box, res = learn_tallied(C2_VIOLATION, seed=0)          # fails in the certificate
    assert res.status == "failed" and res.certificate_ran and res.error.startswith("certificate")
    assert res.certificate_queries > 0
    assert_counts_match(res, box)
    box, res = learn_tallied(C1_VIOLATION, seed=0)          # fails before the certificate
    assert res.status == "failed" and not res.certificate_ran
    assert res.certificate_queries == 0
    assert_counts_match(res, box)


@pytest.mark.parametrize("model,heads,rc_want", [(random_transformer(2, 2, 3, seed=1022), 2, 0),
                                                 (C2_VIOLATION, 2, 1)], ids=["certified", "failed"])
def test_cli_json_counts_every_answered_query(model, heads, rc_want, tmp_path, capsys, monkeypatch):
    boxes = []

    def tallied_oracle(m, field):
        boxes.append(Tally(TransformerOracle(m, field)))
        return boxes[-1]

    monkeypatch.setattr(cli_transformer, "TransformerOracle", tallied_oracle)
    path = tmp_path / "T.json"
    model.dump(path)
    rc = main(["learn", "--model", str(path), "--heads", str(heads), "--seed", "4", "--json"])
    j = json.loads(capsys.readouterr().out)
    (box,) = boxes
    assert rc == rc_want
    assert (j["queries"], j["max_length"]) == (box.calls, box.longest)
    assert j["learning_queries"] + j["certificate_queries"] == j["queries"]
    assert j["certificate_queries"] == j["certificate"]["fresh_queries"] == len(j["certificate"]["queries"])


# -- the query-count claim can fail --------------------------------------------------------
def tiny_context(seed: int) -> Context:
    ctx = Context(quick=True, seed=seed)
    ctx.tiny = True
    return ctx


def test_query_count_refuted_by_an_extra_query_on_retries(monkeypatch):
    """A learner that asks (and counts) one query more on every retry: its total still
    equals the oracle's, but no longer attempts x 4Hd^2 - 2H + 1."""
    real, seen = paper_strategy.ask_plan, weakref.WeakSet()

    def ask_plan(plan, ask):
        root = ask
        while root.parent is not None:          # each attempt asks through a child recorder
            root = root.parent
        if root in seen:
            ask(plan.tokens(plan.queries[0]))
        seen.add(root)
        return real(plan, ask)

    monkeypatch.setattr(paper_strategy, "ask_plan", ask_plan)
    res = discover()["query-count"].run(tiny_context(0))
    assert res.status == "refuted"
    assert res.evidence["runs_with_retries"] >= 1
    assert all("attempt(s)" in m["problem"] for m in res.evidence["mismatch_examples"])


def test_query_count_refuted_by_an_unreported_long_query(monkeypatch):
    """A learner that reports its longest query as at most 2 tokens (it asks 3 to 7)."""
    real = oracle_module.Recorder._count

    real_many = oracle_module.Recorder._count_many

    def count(self, length, seconds):
        real(self, length, seconds)
        self.max_length = min(self.max_length, 2)

    def count_many(self, n, longest, seconds):       # a streamed plan's counts (Recorder.ask_all)
        real_many(self, n, longest, seconds)
        self.max_length = min(self.max_length, 2)

    monkeypatch.setattr(oracle_module.Recorder, "_count", count)
    monkeypatch.setattr(oracle_module.Recorder, "_count_many", count_many)
    res = discover()["query-count"].run(tiny_context(0))
    assert res.status == "refuted"
    assert any("longest" in m["problem"] for m in res.evidence["mismatch_examples"])


def test_transformer_equivalence_refuted_by_an_uncounted_certificate(monkeypatch):
    """The Transformer learner with its certificate asking the black box past the recorder."""
    calls = []

    def certificate(*args):
        rec = next(a for a in args if isinstance(a, oracle_module.Recorder))
        rec.oracle(rec.observations[0][0])          # the first query again, past the recorder
        calls.append(1)
        return real(*args)

    real = transformer_certificate.fresh_certificate
    monkeypatch.setattr(transformer_certificate, "fresh_certificate", certificate)
    res = discover()["transformer-equivalence"].run(tiny_context(0))
    assert calls, "the learner did not run the substituted certificate"
    assert res.status == "refuted" and res.evidence["count_mismatches"] == res.evidence["certified"] > 0
