"""The command line: bad input exits 2 cleanly; good runs print what they promise.

Bad input (docs: explanation/algorithm.md#what-a-failure-means): exit status 2, exactly one line on stderr, no
"Traceback", nothing on stdout.  The CLI runs in-process through
``exactlearn.cli.main.main([...])`` (fast); one test runs the installed
``exactlearn`` script in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from exactlearn import MultiHeadAttention
from exactlearn.cli.main import main
from exactlearn.fields.base import format_rational
from exactlearn.pipeline.plan import paper_count

GOOD_MODEL = {"format": "exactlearn.mha/1", "d": 2,
              "heads": [{"W": [["1/2", 0], [0, -1]], "v": [1, "2"]},
                        {"W": [[0, 1], [1, "0.5"]], "v": ["-1/2", 1]}]}

JSON_KEYS = {"status", "field", "d", "heads_bound", "canonical_heads", "queries", "max_length",
             "heads", "error", "learner_seconds", "oracle_seconds"}
RATIONAL = re.compile(r"^-?\d+(/\d+)?$")


def run(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def assert_bad_input(rc, out, err):
    assert rc == 2, (rc, out, err)
    assert out == ""
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1 and err.strip(), repr(err)


def model_text(**changes):
    m = json.loads(json.dumps(GOOD_MODEL))
    m.update(changes)
    return json.dumps(m)


def head_text(W, v, d=2):
    return json.dumps({"d": d, "heads": [{"W": W, "v": v}]})


# name -> file contents (the run is `learn --model FILE --heads 1`)
BAD_FILES = {
    "not JSON": "this is not json {",
    "empty file": "",
    "top level a list": "[1, 2]",
    "missing key d": json.dumps({"heads": GOOD_MODEL["heads"]}),
    "missing key heads": json.dumps({"d": 2}),
    "head missing v": json.dumps({"d": 2, "heads": [{"W": [[1, 0], [0, 1]]}]}),
    "heads not a list": model_text(heads={"W": 1}),
    "head not a pair": model_text(heads=[7]),
    "W wrong shape": head_text([[1, 2]], [1, 2]),
    "W ragged": head_text([[1, 2], [3]], [1, 2]),
    "W not a list": head_text("W", [1, 2]),
    "v wrong length": head_text([[1, 0], [0, 1]], [1, 2, 3]),
    "non-number string": head_text([[1, "x"], [0, 1]], [1, 2]),
    "non-number null": head_text([[1, None], [0, 1]], [1, 2]),
    "non-number bool": head_text([[1, 0], [0, 1]], [True, 2]),
    "non-number list": head_text([[1, 0], [0, 1]], [[1], 2]),
    "1/0": head_text([[1, "1/0"], [0, 1]], [1, 2]),
    "NaN literal": '{"d": 2, "heads": [{"W": [[1, NaN], [0, 1]], "v": [1, 2]}]}',
    "Infinity literal": '{"d": 2, "heads": [{"W": [[1, 0], [0, 1]], "v": [Infinity, 2]}]}',
    "NaN string": head_text([[1, "NaN"], [0, 1]], [1, 2]),
    "inf string": head_text([[1, 0], [0, 1]], ["-inf", 2]),
    "d zero": model_text(d=0),
    "d negative": model_text(d=-3),
    "d not an integer": model_text(d=1.5),
    "d a string": model_text(d="2"),
    "unknown format": model_text(format="exactlearn.mha/99"),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_model_file_exits_2(name, tmp_path, capsys):
    path = tmp_path / "m.json"
    path.write_text(BAD_FILES[name])
    assert_bad_input(*run(capsys, ["learn", "--model", str(path), "--heads", "1"]))


def test_non_utf8_file_exits_2(tmp_path, capsys):
    path = tmp_path / "m.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert_bad_input(*run(capsys, ["learn", "--model", str(path), "--heads", "1"]))


def test_directory_as_model_exits_2(tmp_path, capsys):
    assert_bad_input(*run(capsys, ["learn", "--model", str(tmp_path), "--heads", "1"]))


def test_deeply_nested_json_exits_2(tmp_path, capsys):
    """json.loads raises RecursionError here (pinned: it escaped as a traceback before b4765a3)."""
    path = tmp_path / "m.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert_bad_input(*run(capsys, ["learn", "--model", str(path), "--heads", "1"]))


@pytest.fixture
def good_file(tmp_path):
    path = tmp_path / "good.json"
    path.write_text(json.dumps(GOOD_MODEL))
    return str(path)


BAD_ARGS = {
    "unknown field": ["--heads", "2", "--field", "nonsense"],
    "--heads 0": ["--heads", "0"],
    "--heads negative": ["--heads", "-2"],
    "--heads not a number": ["--heads", "two"],
    "--max-heads 0": ["--max-heads", "0"],
    "--heads and --max-heads": ["--heads", "2", "--max-heads", "3"],
    "neither --heads nor --max-heads": [],
    "--range 0": ["--heads", "2", "--range", "0"],
    "--retries negative": ["--heads", "2", "--retries", "-1"],
    "--seed not a number": ["--heads", "2", "--seed", "abc"],
    "unknown option": ["--heads", "2", "--bogus"],
}


@pytest.mark.parametrize("name", list(BAD_ARGS))
def test_bad_arguments_exit_2(name, good_file, capsys):
    assert_bad_input(*run(capsys, ["learn", "--model", good_file] + BAD_ARGS[name]))


@pytest.mark.parametrize("argv", [
    ["learn", "--model", "/nonexistent/dir/m.json", "--heads", "1"],
    ["learn", "--heads", "1"],
    [],
    ["frobnicate"],
    ["random-model", "--d", "0", "--heads", "1"],
    ["random-model", "--d", "2", "--heads", "0"],
    ["random-model", "--d", "2"],
    ["demo", "--model", "/nonexistent/m.json"],
], ids=["missing file", "no --model", "no command", "unknown command",
        "random-model d 0", "random-model heads 0", "random-model no heads", "demo missing file"])
def test_bad_invocations_exit_2(argv, capsys):
    assert_bad_input(*run(capsys, argv))


# -- good runs -------------------------------------------------------------------------------
def test_learn_json(good_file, capsys):
    rc, out, err = run(capsys, ["learn", "--model", good_file, "--heads", "2", "--seed", "3", "--json"])
    assert rc == 0, (out, err)
    assert out.count("\n") == 1                      # one object
    obj = json.loads(out)
    assert JSON_KEYS <= set(obj)
    assert obj["status"] == "certified" and obj["error"] is None
    assert obj["field"] == "rational" and obj["d"] == 2 and obj["heads_bound"] == 2
    assert obj["queries"] == paper_count(2, 2) and obj["max_length"] == 5
    model = MultiHeadAttention.from_json(GOOD_MODEL)
    canon = model.canonical_heads()
    assert obj["canonical_heads"] == len(canon) == len(obj["heads"])
    for h in obj["heads"]:
        assert set(h) == {"W", "v"}
        assert all(RATIONAL.match(x) for row in h["W"] for x in row)
        assert all(RATIONAL.match(x) for x in h["v"])
    expected = [{"W": [[format_rational(x) for x in row] for row in h.W],
                 "v": [format_rational(x) for x in h.v]} for h in canon]
    assert sorted(map(json.dumps, obj["heads"])) == sorted(map(json.dumps, expected))
    assert isinstance(obj["learner_seconds"], (int, float)) and obj["learner_seconds"] >= 0
    assert isinstance(obj["oracle_seconds"], (int, float)) and obj["oracle_seconds"] >= 0


def test_learn_summary(good_file, capsys):
    rc, out, err = run(capsys, ["learn", "--model", good_file, "--max-heads", "3", "--seed", "1"])
    assert rc == 0 and err == ""
    assert "status: certified" in out
    assert "equal to the model's canonical heads: True" in out
    assert str(paper_count(2, 3)) in out


def test_learn_flagged_failure_exits_1(tmp_path, capsys):
    """Two canonical heads learned with --heads 1: an explicit failure, exit 1."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps(GOOD_MODEL))
    rc, out, err = run(capsys, ["learn", "--model", str(path), "--heads", "1", "--json"])
    assert rc == 1
    obj = json.loads(out)
    assert obj["status"] == "failed" and obj["error"] and obj["heads"] == []


def test_learn_retries_reports_extra_queries(good_file, capsys):
    """Seeds at --range 1 until one needs a redraw: the JSON reports its queries."""
    for seed in range(50):
        rc, out, _ = run(capsys, ["learn", "--model", good_file, "--heads", "2", "--range", "1",
                                  "--seed", str(seed), "--retries", "6", "--json"])
        obj = json.loads(out)
        if obj["attempts"] > 1:
            break
    else:
        pytest.fail("no seed needed a redraw at --range 1")
    count = paper_count(2, 2)
    assert obj["queries"] == obj["attempts"] * count
    assert obj["extra_queries"] == (obj["attempts"] - 1) * count
    assert rc == (0 if obj["status"] == "certified" else 1)


def test_random_model_stdout(capsys):
    rc, out, err = run(capsys, ["random-model", "--d", "3", "--heads", "2", "--seed", "4"])
    assert rc == 0 and err == ""
    m = MultiHeadAttention.from_json(json.loads(out))
    assert (m.d, m.H) == (3, 2)
    rc2, out2, _ = run(capsys, ["random-model", "--d", "3", "--heads", "2", "--seed", "4"])
    assert out2 == out                               # seeded


@pytest.mark.parametrize("flag,fewer", [("--merge", 1), ("--cancel", 2)])
def test_random_model_merge_cancel(flag, fewer, tmp_path, capsys):
    path = tmp_path / "m.json"
    rc, out, err = run(capsys, ["random-model", "--d", "2", "--heads", "3", "--seed", "2",
                                flag, "--out", str(path)])
    assert rc == 0 and out == "" and err == ""
    m = MultiHeadAttention.from_file(path)
    assert m.H == 3
    assert len(m.canonical_heads()) <= m.H - fewer
    rc, out, err = run(capsys, ["learn", "--model", str(path), "--heads", "3", "--json",
                                "--retries", "2"])
    obj = json.loads(out)
    assert rc == 0 and obj["canonical_heads"] == len(m.canonical_heads())


def test_demo(capsys):
    rc, out, err = run(capsys, ["demo"])
    assert rc == 0, err
    for step in ("Query family", "Samples", "Cauchy interpolation", "Poles", "Matching",
                 "Solve", "Certificate", "Equal to the model's canonical heads: True"):
        assert step in out, step


def test_demo_on_a_model_file(good_file, capsys):
    rc, out, err = run(capsys, ["demo", "--model", good_file])
    assert rc == 0, err
    assert "Equal to the model's canonical heads: True" in out


# -- the installed script --------------------------------------------------------------------
def _script():
    exe = shutil.which("exactlearn", path=os.path.dirname(sys.executable)) or shutil.which("exactlearn")
    if exe is None:
        pytest.skip("the exactlearn console script is not installed (pip install -e .)")
    return exe


def test_installed_script(good_file, tmp_path):
    exe = _script()
    good = subprocess.run([exe, "learn", "--model", good_file, "--heads", "2", "--seed", "3", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["status"] == "certified"
    bad_path = tmp_path / "bad.json"
    bad_path.write_text(head_text([[1, "1/0"], [0, 1]], [1, 2]))
    bad = subprocess.run([exe, "learn", "--model", str(bad_path), "--heads", "1"],
                         capture_output=True, text=True, timeout=120)
    assert_bad_input(bad.returncode, bad.stdout, bad.stderr)


def test_huge_decimal_exponent_is_bad_input(tmp_path, capsys):
    """'1e999999999' would build a 10^9-digit integer: refused in one line, exit 2."""
    p = tmp_path / "m.json"
    p.write_text('{"format": "exactlearn.mha/1", "d": 1, "heads": [{"W": [["1e999999999"]], "v": [1]}]}')
    from exactlearn.cli.main import main
    assert main(["learn", "--model", str(p), "--heads", "1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "exponent out of range" in err


def test_python_dash_m_exactlearn_is_the_command(tmp_path):
    """``python -m exactlearn`` runs the ``exactlearn`` command: a model learned to exit 0,
    and bad input to exit 2 with one line on stderr (no ``__main__`` failed before)."""
    path = tmp_path / "m.json"
    MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])]).dump(path)
    run = lambda *argv: subprocess.run([sys.executable, "-m", "exactlearn", *argv],  # noqa: E731
                                       capture_output=True, text=True, timeout=120)
    ok = run("learn", "--model", str(path), "--heads", "1", "--seed", "1", "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["status"] == "certified", ok.stderr
    bad = run("learn", "--model", str(tmp_path / "missing.json"), "--heads", "1")
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.splitlines()) == 1
