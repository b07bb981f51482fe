"""Progress of a long learn (issue 23, section 5; docs: howto/progress.md).

``learn(progress=callback)`` sends throttled :class:`~exactlearn.progress.ProgressEvent`
values, and ``exactlearn learn`` shows them on stderr when it is a terminal.  Progress
never changes a result or a count: seeded runs give the same JSON (timings aside) with
and without a callback, on every route, and the learned heads are the raw model's
canonical form, computed apart.
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.cli.main import main
from exactlearn.cli.progress import progress_for, wanted
from exactlearn.fields import Modular, Rational
from exactlearn.fields.real import Real
from exactlearn.generate import random_model
from exactlearn.progress import PHASES, Progress, ProgressEvent, bar_callback

sys.path.insert(0, str(Path(__file__).parent))
from float_layers import NumpyAttention  # noqa: E402

MODEL = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, "1/3"])])


def _json(res) -> dict:
    out = res.to_json()
    out.pop("learner_seconds"), out.pop("oracle_seconds")
    return out


def _check_events(events) -> None:
    """Within each phase ``done`` never decreases and the last event has done == total."""
    assert events and all(isinstance(e, ProgressEvent) for e in events)
    assert all(e.phase in PHASES and 0 <= e.done <= e.total for e in events)
    runs: list = []                      # the events of one phase: it starts at done = 0
    for e in events:
        key = (e.phase, e.prime, e.attempt, e.detail)
        if not runs or runs[-1][0] != key or e.done == 0:
            runs.append((key, []))
        runs[-1][1].append(e)
    for _, run in runs:
        dones = [e.done for e in run]
        assert dones == sorted(dones)
        assert run[-1].done == run[-1].total


def _both(make_box, **kw):
    """The same seeded learn without and with a progress callback: (plain, tracked, events)."""
    events: list = []
    plain = learn(make_box(), **kw)
    tracked = learn(make_box(), progress=events.append, **kw)
    return plain, tracked, events


def test_rational_same_result_and_counts_with_progress():
    plain, tracked, events = _both(lambda: Oracle(MODEL, Rational()), d=2, heads=2, seed=1,
                                   verify=4)
    assert plain.certified and plain.heads == MODEL.canonical_heads()
    assert _json(plain) == _json(tracked) and plain.queries == tracked.queries == 33
    _check_events(events)
    assert [e.phase for e in events if e.done == 0] == ["ask", "analyse", "certify", "verify"]
    asked = [e for e in events if e.phase == "ask"][-1]
    assert (asked.done, asked.total, asked.unit) == (29, 29, "queries")


def test_modular_multimodular_same_result_and_counts_with_progress():
    model = random_model(4, 3, 5, den=2)
    plain, tracked, events = _both(lambda: Oracle(model, Modular()), d=4, heads=3, seed=2)
    assert plain.certified and plain.heads == model.canonical_heads()
    assert _json(plain) == _json(tracked)
    _check_events(events)
    primes = plain.multimodular["primes"]
    # one ask (or confirm) phase per prime asked, each ending at that prime's queries
    asks = [e for e in events if e.phase in ("ask", "confirm") and e.done == e.total]
    assert [(e.prime, e.detail, e.done) for e in asks] == [
        (n, r["role"], r["queries"]) for n, r in enumerate(primes, 1)]
    assert sum(e.done for e in asks) == plain.queries


def test_failed_attempts_same_result_and_counts_with_progress():
    """Two failed draws (a bound below the box's two heads): the same failure, the same
    counts, and the events name each attempt."""
    plain, tracked, events = _both(lambda: Oracle(MODEL, Rational()), d=2, heads=1, seed=1,
                                   retries=1)
    assert plain.status == "failed" and plain.attempts == 2
    assert _json(plain) == _json(tracked) and plain.queries == tracked.queries
    assert [e.attempt for e in events if e.phase == "ask" and e.done == 0] == [1, 2]
    assert sum(e.done for e in events if e.phase == "ask" and e.done == e.total) == plain.queries


def test_efficient_plan_same_result_with_progress():
    model = random_model(3, 2, 4, den=2)
    plain, tracked, events = _both(lambda: Oracle(model, Rational()), d=3, heads=2, seed=3,
                                   plan="efficient")
    assert plain.certified and plain.heads == model.canonical_heads()
    assert _json(plain) == _json(tracked)
    _check_events(events)


def test_real_paper_plan_same_result_with_progress():
    model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])])
    plain, tracked, events = _both(lambda: Oracle(model, Real(dps=40)), d=2, heads=1, seed=1)
    assert plain.certified
    assert _json(plain) == _json(tracked)
    _check_events(events)
    # the one pipeline at the paper's nodes: no polish below float64 rounding, then the certificate
    assert [e.phase for e in events if e.done == 0] == ["probe", "ask", "certify"]


def test_real_stable_plan_same_result_with_progress():
    def box():
        return NumpyAttention.from_seed(2, 1, 0)
    kw = dict(d=2, heads=1, field=Real(dps=30), tokens="float64", plan="stable", seed=0,
              noise=5e-14, noise_rel=1e-15)
    plain, tracked, events = _both(box, **kw)
    assert plain.certified
    assert _json(plain) == _json(tracked)
    _check_events(events)
    assert [e.phase for e in events if e.done == 0][:2] == ["probe", "ask"]
    # the certificate after the polish is its own phase: at d = 32, H = 4 it once ran for
    # minutes after a polish event said "0/1 steps" (review, helper-71)
    assert [e.phase for e in events if e.done == 0][-2:] == ["polish", "certify"]
    # the ask phase counts the run's own plan (the lean plan's nodes at float64 rounding)
    assert [e.total for e in events if e.phase == "ask"][0] == plain.plan_queries


def test_dask_executor_same_result_with_progress():
    distributed = pytest.importorskip("distributed")
    model = random_model(3, 2, 1, den=2)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        plain, tracked, events = _both(lambda: Oracle(model, Modular()), d=3, heads=2, seed=1,
                                       executor=c)
    assert plain.certified and plain.heads == model.canonical_heads()
    assert _json(plain) == _json(tracked)
    _check_events(events)
    asks = [e for e in events if e.phase in ("ask", "confirm") and e.done == e.total]
    assert sum(e.done for e in asks) == plain.queries


def test_events_are_throttled_not_one_call_per_query(monkeypatch):
    """The recorder looks at the tracker about a hundred times per phase, not per query."""
    looks = []
    real_asked = Progress.asked
    monkeypatch.setattr(Progress, "asked", lambda self, q: looks.append(q) or real_asked(self, q))
    model = random_model(6, 3, 2, den=1)
    events: list = []
    res = learn(Oracle(model, Modular()), d=6, heads=3, seed=1, progress=events.append)
    assert res.certified and res.heads == model.canonical_heads()
    phases = [e for e in events if e.unit == "queries" and e.done == 0]
    assert res.plan_queries == 4 * 3 * 36 - 6 + 1
    assert len(phases) == len(res.multimodular["primes"]) and res.queries == len(phases) * 427
    assert len(looks) <= len(phases) * (Progress(None).steps + 1) < res.queries / 3
    assert len(events) <= 2 * len(looks) + 40
    _check_events(events)


def test_a_tqdm_style_bar_follows_the_events():
    class FakeBar:                      # the part of tqdm.tqdm a callback uses
        def __init__(self):
            self.n, self.total, self.desc, self.finished = 0, None, "", []

        def update(self, k):
            assert k > 0
            self.n += k

        def reset(self, total=None):
            if self.total is not None:
                self.finished.append((self.desc, self.n, self.total))
            self.n, self.total = 0, total

        def set_description(self, desc):
            self.desc = desc

    bar = FakeBar()
    res = learn(Oracle(MODEL, Modular()), d=2, heads=2, seed=1, progress=bar_callback(bar))
    bar.reset()
    assert res.certified and res.heads == MODEL.canonical_heads()
    assert all(n == total for _, n, total in bar.finished)
    asked = [(desc, n) for desc, n, _ in bar.finished if desc.startswith(("ask", "confirm"))]
    assert [n for _, n in asked] == [r["queries"] for r in res.multimodular["primes"]]
    assert asked[-1][0] == "confirm · prime 2 (confirmation)"


def test_progress_must_be_callable():
    with pytest.raises(ValueError, match="progress must be a callable"):
        learn(Oracle(MODEL, Rational()), d=2, heads=2, seed=1, progress=3)


def test_progress_howto_runs(capsys):
    text = (Path(__file__).parent.parent / "docs" / "howto" / "progress.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2
    exec("\n".join(blocks), {})
    out = capsys.readouterr().out
    assert "confirm · prime 2 (confirmation) 29/29 queries" in out


# ---- the CLI ----------------------------------------------------------------------------

class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


class _Args:
    def __init__(self, quiet=False, json=False):
        self.quiet, self.json = quiet, json


def test_cli_progress_only_on_a_terminal_and_not_quiet():
    assert wanted(_Args(), _Stream(True), _Stream(False))
    assert not wanted(_Args(quiet=True), _Stream(True), _Stream(True))
    assert not wanted(_Args(), _Stream(False), _Stream(True))
    assert not wanted(_Args(json=True), _Stream(True), _Stream(False))    # --json to a pipe
    assert wanted(_Args(json=True), _Stream(True), _Stream(True))


def test_cli_bar_draws_on_a_terminal_and_nothing_without_rich(monkeypatch):
    pytest.importorskip("rich")
    err = _Stream(True)
    monkeypatch.setattr(sys, "stdout", _Stream(True))
    with progress_for(_Args(), err) as bar:
        assert bar is not None
        learn(Oracle(MODEL, Rational()), d=2, heads=2, seed=1, progress=bar)
    shown = err.getvalue()                  # each phase is drawn when it starts
    assert "ask" in shown and "/29" in shown and "analyse" in shown and "certify" in shown
    monkeypatch.setitem(sys.modules, "rich.progress", None)     # rich not installed
    with progress_for(_Args(), _Stream(True)) as bar:
        assert bar is None


def test_cli_output_is_the_same_with_quiet(tmp_path, capsys):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(MODEL.to_json()))
    outs = []
    for extra in ([], ["--quiet"], ["-q"]):
        code = main(["learn", "--model", str(path), "--heads", "2", "--seed", "1", "--json"] + extra)
        got = capsys.readouterr()
        assert code == 0 and got.err == ""          # stderr is not a terminal here: no progress
        out = json.loads(got.out)
        out.pop("learner_seconds"), out.pop("oracle_seconds")
        outs.append(out)
    assert outs[0] == outs[1] == outs[2] and outs[0]["queries"] == 29


def test_a_stage_already_open_is_not_started_again():
    """``stage`` twice (the certificate's own stage where the plan already named it) is one
    phase; after another phase, or on the next attempt, it starts again."""
    from exactlearn.progress import Progress
    events = []
    p = Progress(events.append, min_interval=0)
    p.stage("certify"); p.stage("certify")
    p.stage("verify"); p.stage("certify")
    p.at(attempt=2); p.stage("certify")
    p.finish()
    assert [(e.phase, e.attempt) for e in events if e.done == 0] == [
        ("certify", 1), ("verify", 1), ("certify", 1), ("certify", 2)]
