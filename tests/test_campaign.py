"""Campaigns at scale (docs: explanation/claims.md):
executors, progress, figures, report.

* a tiny campaign on a ``dask.distributed.LocalCluster`` (two worker processes,
  loopback only) gives the same statuses and evidence, timings aside, as the
  local executors;
* ``--plots`` writes real PNGs, ``--report`` a Markdown report linking them;
* ``--quiet`` (or a stderr that is not a terminal, or no rich) prints no progress;
* a bad or unreachable ``--scheduler`` exits 2 with one line on stderr.

The whole file takes about 30 s on a loaded 2-core machine.
"""

from __future__ import annotations

import io
import json
import math
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from proofs_check import cli
from proofs_check.claim import run_claims
from proofs_check.executors import ExecutorError, LocalExecutor, strip_timings, strided_chunks

ROOT = Path(__file__).resolve().parent.parent
CLAIMS = ["query-length", "canonical-form"]          # two cheap claims, three ctx.map calls


def verdicts(rows):
    return [(r["id"], r["status"], strip_timings(r["evidence"])) for r in rows]


# ---- executors --------------------------------------------------------------------

def test_strided_chunks_cover_every_item_once():
    for n, slots in ((0, 2), (1, 4), (7, 2), (100, 3)):
        idx = sorted(i for c in strided_chunks(n, slots) for i in c)
        assert idx == list(range(n))


def test_local_pool_keeps_order_counts_progress_and_raises():
    done = []
    with LocalExecutor(2) as ex:
        assert ex.map(math.factorial, range(30), progress=done.append) == [math.factorial(i) for i in range(30)]
        assert sum(done) == 30
        with pytest.raises(ValueError):                 # a trial's exception reaches the claim
            ex.map(math.sqrt, [4, 1, -1, 9])
        assert ex.map(abs, [-1, -2]) == [1, 2]          # the pool still works afterwards
        with pytest.raises(TypeError, match="top-level"):
            ex.map(lambda x: x, [1, 2])


def test_local_processes_match_in_process():
    one = run_claims(CLAIMS, tiny=True, seed=5, executor=LocalExecutor(1))
    with LocalExecutor(2) as ex:
        two = run_claims(CLAIMS, tiny=True, seed=5, executor=ex)
    assert verdicts(one) == verdicts(two)
    assert all(r["evidence"]["trials"] > 0 for r in one)


def test_dask_local_cluster_matches_local(capsys):
    distributed = pytest.importorskip(
        "distributed", reason="dask.distributed is not installed (pip install 'exactlearn[dask]')")
    from proofs_check.executors import DaskExecutor
    local = run_claims(CLAIMS, tiny=True, seed=2, executor=LocalExecutor(1))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address="127.0.0.1:0") as cluster:
        with DaskExecutor(cluster.scheduler_address) as ex:
            assert ex.describe()["workers"] == 2
            remote = run_claims(CLAIMS, tiny=True, seed=2, executor=ex)
        assert verdicts(remote) == verdicts(local)
        # workers that import other code than the client are refused
        import proofs_check.executors as executors
        real = executors.code_fingerprint
        executors.code_fingerprint = lambda: "not-the-workers-code"
        try:
            with pytest.raises(ExecutorError, match="different exactlearn/proofs_check code"):
                DaskExecutor(cluster.scheduler_address)
        finally:
            executors.code_fingerprint = real
        # the CLI on the same cluster: executor "dask", trials per claim
        capsys.readouterr()
        rc = cli.main(["--tiny", "--only", "query-length", "--json", "--quiet",
                       "--scheduler", cluster.scheduler_address])
        out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["executor"] == "dask" and out["run"]["workers"] == 2
    assert [c["status"] for c in out["claims"]] == ["verified"]
    assert out["claims"][0]["evidence"]["trials"] == local[0]["evidence"]["trials"]


# ---- figures and report -----------------------------------------------------------

def _pngs(folder: Path) -> list:
    files = sorted(folder.glob("*.png"))
    for f in files:
        data = f.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, f
    return files


def test_plots_and_report(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install 'exactlearn[campaign]')")
    figs, md = tmp_path / "figs", tmp_path / "out" / "report.md"
    rc = cli.main(["--tiny", "--only", "query-length", "--json", "--quiet",
                   "--plots", str(figs), "--report", str(md)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["executor"] == "local"
    assert out["claims"][0]["evidence"]["trials"] > 0
    names = {f.name for f in _pngs(figs)}
    assert {"queries_vs_d.png", "failure_vs_range.png", "time_vs_d.png"} <= names
    text = md.read_text()
    assert "| `query-length`" in text.replace("[`query-length`](#claim-query-length)", "`query-length`")
    assert "verified" in text and "seed" in text and "executor" in text
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) >= 3
    for link in links:                          # relative to the report, and they resolve
        assert not Path(link).is_absolute() and (md.parent / link).is_file(), link


def test_report_alone_puts_figures_beside_it(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install 'exactlearn[campaign]')")
    md = tmp_path / "run.md"
    assert cli.main(["--tiny", "--only", "canonical-form", "--quiet", "--report", str(md)]) == 0
    assert len(_pngs(tmp_path / "run_figures")) >= 3
    assert "](run_figures/queries_vs_d.png)" in md.read_text()


def test_figures_read_the_claims_series(tmp_path):
    """The evidence["series"] convention of proofs_check.claim, fed by hand-made claim rows
    (test data): every figure draws from it, and no own failure campaign is run."""
    pytest.importorskip("matplotlib", reason="matplotlib is not installed (pip install 'exactlearn[campaign]')")
    from proofs_check.figures import make_figures
    etas = [10.0 ** -k for k in (40, 35, 30, 25)]
    rows = [
        {"id": "efficient-plan", "evidence": {"series": {"queries_vs_d": {"points": [
            {"plan": "efficient", "d": d, "H": 1, "queries": d * d + d + 1} for d in (3, 4, 5)]}}}},
        {"id": "probability-one-rate", "evidence": {"series": {"failure_vs_range": {"points": [
            {"field": "modular", "range": R, "runs": 50, "failures": f, "wrong": 0, "bound": min(1, 60 / R)}
            for R, f in ((8, 20), (64, 3), (2 ** 16, 0))], "bound_formula": "60/R"}}}},
        {"id": "approximate-oracle", "evidence": {"series": {"error_vs_noise": {"points": [
            {"eta": e, "error": str(2 * e), "error_bound": 30 * e} for e in etas], "slope": 1.0, "constant": 2.0}}}},
    ]
    with LocalExecutor(1) as ex:
        figures, campaigns = make_figures(rows, tmp_path, ex, seed=0, level="tiny")
    assert [f.name for f in figures if f.path] == ["queries_vs_d", "failure_vs_range", "error_vs_noise",
                                                    "time_vs_d"]
    assert "failure_vs_range" not in campaigns and campaigns["timing"]["trials"] > 0
    assert len(_pngs(tmp_path)) == 4
    assert any("probability-one-rate" in src for src in figures[1].sources)


# ---- progress -------------------------------------------------------------------

class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def _stderr_of(monkeypatch, capsys, argv) -> str:
    fake = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", fake)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    assert cli.main(argv) == 0
    capsys.readouterr()
    return fake.getvalue()


def test_progress_on_a_terminal_and_quiet(monkeypatch, capsys):
    pytest.importorskip("rich", reason="rich is not installed (progress bars are optional)")
    argv = ["--tiny", "--only", "query-length"]
    shown = _stderr_of(monkeypatch, capsys, argv)
    assert "query-length" in shown and "verified" in shown
    assert _stderr_of(monkeypatch, capsys, argv + ["--quiet"]) == ""


def test_no_progress_when_not_a_terminal(capsys):
    assert cli.main(["--tiny", "--only", "query-length"]) == 0
    assert capsys.readouterr().err == ""


def test_without_rich_no_bars_no_crash(monkeypatch, capsys):
    for mod in ("rich", "rich.console", "rich.progress"):
        monkeypatch.setitem(sys.modules, mod, None)      # import rich -> ImportError
    assert _stderr_of(monkeypatch, capsys, ["--tiny", "--only", "query-length"]) == ""


# ---- bad schedulers -------------------------------------------------------------

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:{port}", "not-an-address"])
def test_bad_scheduler_exits_2_with_one_line(address):
    address = address.format(port=_closed_port())
    p = subprocess.run([sys.executable, "-m", "proofs_check.cli", "--tiny", "--only", "query-length",
                        "--scheduler", address, "--scheduler-timeout", "2"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("proofs-check: error: "), p.stderr
    assert p.stdout == ""


def test_executor_error_is_one_line():
    from proofs_check.executors import make_executor
    try:
        make_executor("bad address")
    except ExecutorError as exc:
        assert "\n" not in str(exc)
    else:  # pragma: no cover
        pytest.fail("a bad address must raise ExecutorError")
