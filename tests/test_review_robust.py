"""Hostile review (robust): vector outputs' memory over the real field (F1), a black box that
raises (F3), and the messages for mis-shaped or non-finite vector answers (F4).  Each test
failed before its fix."""

from __future__ import annotations

import json
import time
import tracemalloc

import numpy as np
import pytest

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.cli.main import main
from exactlearn.fields import Rational, Real

MODEL = MultiHeadAttention([([[1, 0], [0, -1]], [[1, 2], [0, 0], [3, -1]]),
                            ([[0, 1], [2, 0]], [[0, 1], [1, 1], [-1, 0]])], outputs=3)
SCALAR = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [2, 0]], [0, 1])])


def never_asked(tokens):
    raise AssertionError("the box was asked")


# -- F1: the recorded answers of a vector box are budgeted at their true cost ---------------
@pytest.mark.parametrize("field, outputs, kw", [
    (Real(dps=30), 20000, dict(plan="stable", noise=1e-9)),   # base: 2.6 GB at 64 B a value
    (Real(dps=30), 65536, dict(plan="paper", noise=1e-9)),    # the review's d = 8, H = 4 case
    (Rational(), 60000, {})])
def test_vector_outputs_past_the_memory_budget_are_refused_at_once(field, outputs, kw):
    """d = 8, H = 4: the stable plan asks about twice its 2555 queries, every answer m mpf
    values of ~350 bytes; the old check counted 2 x 1017 queries at 64 bytes a value and let
    outputs up to 2^16 through (a MemoryError after ~100 GB).  Refused before any query or
    allocation, naming the sizes and the limit."""
    with pytest.raises(ValueError, match="MAX_PLAN_BYTES"):    # warm: the modules imported
        learn(never_asked, d=8, heads=4, field=field, seed=0, outputs=outputs, **kw)
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(ValueError) as info:
        learn(never_asked, d=8, heads=4, field=field, seed=0, outputs=outputs, **kw)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    msg = str(info.value)
    assert "\n" not in msg and f"outputs = {outputs}" in msg and "bytes a value" in msg
    assert "more than the limit 17179869184 (MAX_PLAN_BYTES" in msg
    assert seconds < 0.5 and peak < 2 ** 22, (seconds, peak)


def test_a_vector_run_that_outgrows_the_budget_stops_counted_without_a_redraw(monkeypatch):
    """The up-front count is an estimate; the view itself refuses the query that would pass
    the budget: the run fails ("too large"), every answered query counted, no redraw."""
    import exactlearn.api.run as run
    monkeypatch.setattr(run, "outputs_values_limit", lambda name: 3 * 10)   # 10 queries of 3
    oracle, asked = Oracle(MODEL, Real(dps=30)), []

    def box(tokens):
        asked.append(1)
        return [float(y) for y in oracle(tokens)]
    res = learn(box, d=2, heads=2, field=Real(dps=30), seed=0, outputs=3, noise=1e-9,
                plan="stable", retries=3)
    assert res.status == "failed" and res.error.startswith("too large: outputs=3"), res.error
    assert "MAX_PLAN_BYTES" in res.error and "[note" not in res.error
    assert res.queries == len(asked) == 10 and res.attempts == 1


def test_a_memory_error_in_the_outputs_step_is_a_failure_not_a_traceback(monkeypatch):
    import exactlearn.strategies.real.outputs as outputs

    def exhausted(*args, **kw):
        raise MemoryError
    monkeypatch.setattr(outputs, "learn_outputs_real", exhausted)
    oracle = Oracle(MODEL, Real(dps=30))
    res = learn(lambda t: [float(y) for y in oracle(t)], d=2, heads=2, field=Real(dps=30),
                seed=0, outputs=3, noise=1e-9, plan="stable", retries=2)
    assert res.status == "failed" and res.error.startswith("too large: out of memory")
    assert res.attempts == 1 and res.queries > 0


def test_the_cli_reports_a_memory_error_in_one_line(monkeypatch, tmp_path, capsys):
    import exactlearn.api as api

    def exhausted(*args, **kw):
        raise MemoryError
    monkeypatch.setattr(api, "learn", exhausted)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(MODEL.to_json()))
    rc = main(["learn", "--model", str(path), "--heads", "2", "--field", "real", "--seed", "0",
               "--declared-noise", "1e-9"])
    err = capsys.readouterr().err
    assert rc == 2 and "out of memory" in err and len(err.strip().splitlines()) == 1, err


# -- F3: a black box that raises --------------------------------------------------------------
class Raising:
    """MODEL's (or SCALAR's) oracle that raises RuntimeError on its query ``at``."""

    def __init__(self, model, field, at, batch=False):
        self.oracle, self.at, self.asked = Oracle(model, field), at, 0
        self.floats = not field.is_exact
        if batch:
            self.batch = lambda queries: [self(q) for q in queries]

    def __call__(self, tokens):
        self.asked += 1
        if self.asked == self.at:
            raise RuntimeError("the GPU fell over")
        ys = self.oracle(tokens)
        return [float(y) for y in ys] if isinstance(ys, list) and self.floats else ys


@pytest.mark.parametrize("model, kw", [
    (SCALAR, dict(field=Rational())),
    (MODEL, dict(field=Rational(), outputs=3)),
    (SCALAR, dict(field=Real(dps=30), noise=1e-9, plan="stable")),
    (MODEL, dict(field=Real(dps=30), noise=1e-9, plan="stable", outputs=3))])
@pytest.mark.parametrize("batch", [False, True])
def test_the_box_s_own_exception_propagates_unchanged_its_queries_counted(model, kw, batch):
    """learn() returns no result (no partial one): the box's RuntimeError itself propagates,
    with a note and ``exactlearn_queries`` counting the queries answered before it."""
    box = Raising(model, kw["field"], at=10, batch=batch)
    with pytest.raises(RuntimeError, match="the GPU fell over") as info:
        learn(box, d=2, heads=2, seed=0, **kw)
    exc = info.value
    answered = box.asked - 1 if not batch else exc.exactlearn_queries
    assert exc.exactlearn_queries == answered and answered <= 9
    assert not batch or answered < box.asked
    note = exc.__notes__[-1]
    b = getattr(exc, "exactlearn_batch", None)     # the plans that ask through batch()
    where = f"query {answered + 1}" if b is None else \
        f"its batch() of {b} queries from query {answered + 1} (none returned)"
    assert note.startswith(f"exactlearn: the black box Raising raised RuntimeError at {where} "
                           f"({answered} queries answered before it, counted)")
    assert b is None or (batch and answered + b >= box.asked)   # the batch it was in
    assert b is not None or answered == box.asked - 1
    assert "learn() returned no result" in note


def test_the_cli_reports_a_box_that_raises_in_one_line(monkeypatch, tmp_path, capsys):
    from exactlearn.oracle.counting import CountingOracle
    calls = []
    original = CountingOracle.__call__

    def flaky(self, tokens):
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("CUDA error: device-side assert\ntriggered")
        return original(self, tokens)
    monkeypatch.setattr(CountingOracle, "__call__", flaky)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(SCALAR.to_json()))
    rc = main(["learn", "--model", str(path), "--heads", "2", "--seed", "0"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert ("exactlearn: error: the black box Oracle raised RuntimeError at query 5 (4 queries "
            "answered before it, counted): CUDA error: device-side assert triggered") in err


# -- F4: mis-shaped and non-finite vector answers -----------------------------------------------
def test_a_row_array_for_outputs_m_names_the_shape_expected_and_got():
    oracle = Oracle(MODEL, Real(dps=30))
    res = learn(lambda t: np.array([[float(y) for y in oracle(t)]]), d=2, heads=2,
                field=Real(dps=30), seed=0, outputs=3, noise=1e-9)
    assert res.status == "failed" and res.queries == 1
    assert res.error.startswith("bad input: the black box ") and "\n" not in res.error
    assert res.error.endswith("<lambda> answered an array of shape (1, 3) per query, not "
                              "outputs=3 values (expected a list of 3 or an array of shape (3,))")


@pytest.mark.parametrize("plan", ["paper", "stable"])
@pytest.mark.parametrize("outputs", [None, 3])
def test_a_nan_answer_is_one_line_naming_the_query_and_output(plan, outputs):
    model = MODEL if outputs else SCALAR
    oracle, asked = Oracle(model, Real(dps=30)), []

    def box(tokens):
        asked.append(1)
        ys = oracle(tokens)
        if outputs:
            return [float(ys[0]), float("nan"), float(ys[2])]
        return float("nan")
    res = learn(box, d=2, heads=2, field=Real(dps=30), seed=0, noise=1e-9, plan=plan,
                **({"outputs": outputs} if outputs else {}))
    where = " (output 2 of 3)" if outputs else ""
    assert res.error.startswith("bad answer: the black box ") and "[note" not in res.error
    assert res.error.endswith(f".box answered nan at query 1{where}: not a finite real number, "
                              f"so not in the real field"), res.error
    assert res.queries == len(asked)


def test_refitting_the_paper_plan_with_exactly_h_heads_fails_explicitly():
    """Review helper-74 F3: over the real field, the paper plan with ``max_heads=2`` on two heads
    1e-4 apart refuted one head, then refitted a family with exactly 2 heads from its 4 observed
    samples and raised a bare ``ValueError`` ("need 2H+1 = 5 samples, got 5 points and 4
    values"; the CLI called it bad input, exit 2).  Now the run fails, naming the count tried,
    with every query counted."""
    from fractions import Fraction as F
    W1 = [[F(1, 2), F(1, 2)], [F(-1), F(0)]]
    W2 = [[F(5001, 10000), F(1, 2)], [F(-1), F(0)]]
    box = Oracle(MultiHeadAttention([(W1, [1, 1]), (W2, [2, 3])]), Real())
    res = learn(box, d=2, max_heads=2, seed=0, plan="paper", noise="1e-6")
    assert res.status == "failed" and "exactly 2 heads" in res.error
    assert res.queries == box.queries
