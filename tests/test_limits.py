"""Absurd inputs are refused at once (issue 20, section 5; docs/reference/cli.md, "Limits").

Each absurd input runs the command line in a subprocess under a 20 s timeout and a 2 GB
address-space limit, and must end with exit status 2, exactly one line on stderr naming
the problem, no traceback and nothing on stdout.  Before the limits, each of them hung,
exhausted memory or printed a traceback.  The subprocesses import the same ``exactlearn``
as this test (the package's parent directory is put on PYTHONPATH).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import exactlearn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(exactlearn.__file__)))
TIMEOUT = 20
MEMORY = 2 * 1024 ** 3


#: A launcher that sets a 2 GB address space (as the acceptance checks) and then becomes the
#: command: no ``preexec_fn``, which forks a copy of this (possibly multithreaded, e.g. JAX's)
#: test process and may deadlock in the child.
_LIMITED = ("import os, resource, sys; "
            f"resource.setrlimit(resource.RLIMIT_AS, ({MEMORY}, {MEMORY})); "
            "os.execv(sys.executable, [sys.executable] + sys.argv[1:])")


def limited(argv):
    """``argv`` (a Python command line without the interpreter) under the memory limit."""
    return [sys.executable, "-c", _LIMITED, *argv]


def run(args, cwd, module="exactlearn.cli"):
    """Run ``python -m module args`` under the time and memory limits: (rc, stdout, stderr);
    a run past the timeout is a failure of the test (the input was not refused at once)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        p = subprocess.run(limited(["-m", module, *args]), cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{module} {' '.join(args)}: still running after {TIMEOUT} s")
    return p.returncode, p.stdout, p.stderr


def assert_refused(rc, out, err, *words):
    assert rc == 2, (rc, err[-2000:])
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-2000:]
    assert "Traceback" not in err and "MemoryError" not in err
    assert "set_int_max_str_digits" not in err
    for w in words:
        assert w in err, (w, err)


def model_file(tmp_path, obj, name="m.json"):
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return str(path)


SMALL = {"format": "exactlearn.mha/1", "d": 2,
         "heads": [{"W": [["1/2", 0], [0, -1]], "v": [1, 2]},
                   {"W": [[0, 1], [1, 0]], "v": [-1, 1]}]}


def test_model_file_with_d_1e8_is_refused(tmp_path):
    path = model_file(tmp_path, {"format": "exactlearn.mha/1", "d": 100_000_000, "heads": []})
    assert_refused(*run(["learn", "--model", path, "--heads", "1"], tmp_path), "d = 100000000")


def test_model_file_with_d_3000_and_no_heads_is_refused(tmp_path):
    path = model_file(tmp_path, {"format": "exactlearn.mha/1", "d": 3000, "heads": []})
    assert_refused(*run(["learn", "--model", path, "--heads", "1"], tmp_path), "d = 3000")


def test_max_heads_1e9_over_the_modular_field_is_refused(tmp_path):
    path = model_file(tmp_path, SMALL)
    assert_refused(*run(["learn", "--model", path, "--max-heads", "1000000000",
                         "--field", "modular"], tmp_path), "--max-heads", "1000000000")


def test_heads_1e9_is_refused(tmp_path):
    path = model_file(tmp_path, SMALL)
    assert_refused(*run(["learn", "--model", path, "--heads", str(10 ** 9)], tmp_path),
                   "--heads", "1000000000")


def test_heads_within_the_head_limit_but_a_plan_beyond_the_token_limit_is_refused(tmp_path):
    """H = 20000 at d = 2: each check alone passes, the plan's cost does not (4e12 tokens)."""
    path = model_file(tmp_path, SMALL)
    assert_refused(*run(["learn", "--model", path, "--heads", "20000"], tmp_path),
                   "H = 20000", "tokens")


def test_dps_1e8_is_refused(tmp_path):
    path = model_file(tmp_path, SMALL)
    assert_refused(*run(["learn", "--model", path, "--heads", "2", "--field", "real",
                         "--dps", str(10 ** 8)], tmp_path), "--dps")


def test_random_model_with_d_100000_is_refused(tmp_path):
    assert_refused(*run(["random-model", "--d", "100000", "--heads", "1", "--seed", "0"],
                        tmp_path), "--d", "100000")


def test_model_dev_zero_is_refused(tmp_path):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    assert_refused(*run(["learn", "--model", "/dev/zero", "--heads", "1"], tmp_path),
                   "/dev/zero")


def test_demo_with_a_million_heads_is_refused(tmp_path):
    assert_refused(*run(["demo", "--heads", "1000000"], tmp_path), "--heads", "1000000")


def test_random_model_with_1e8_heads_is_refused(tmp_path):
    assert_refused(*run(["random-model", "--d", "2", "--heads", str(10 ** 8), "--seed", "0"],
                        tmp_path), "--heads", "100000000")


def test_a_w_entry_1e100000_is_refused_naming_the_entry(tmp_path):
    obj = {"format": "exactlearn.mha/1", "d": 2,
           "heads": [{"W": [[1, 0], [0, 1]], "v": [1, 1]},
                     {"W": [[1, 0], [0, "1e100000"]], "v": [1, 1]}]}
    path = model_file(tmp_path, obj)
    assert_refused(*run(["learn", "--model", path, "--heads", "2"], tmp_path),
                   "head 2: W row 2 entry 2", "1e100000", "digits")


def test_a_json_integer_of_5000_digits_is_refused_naming_the_limit(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{"format": "exactlearn.mha/1", "d": 1, "heads": [{"W": [[1]], "v": ['
                    + "7" * 5000 + "]}]}")
    assert_refused(*run(["learn", "--model", str(path), "--heads", "1"], tmp_path),
                   "5000 digits", "MAX_ENTRY_DIGITS")


def test_proofs_check_plots_into_a_file_is_refused_before_running(tmp_path):
    afile = tmp_path / "passwd"
    afile.write_text("not a directory\n")
    assert_refused(*run(["--plots", str(afile)], tmp_path, module="proofs_check.cli"),
                   "--plots", "not a directory")


def test_proofs_check_report_under_a_file_is_refused_before_running(tmp_path):
    (tmp_path / "afile").write_text("a file\n")
    assert_refused(*run(["--report", "afile/r.md"], tmp_path, module="proofs_check.cli"),
                   "--report", "not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]      # nothing written


def test_learn_api_refuses_an_impossible_plan_with_one_line_valueerror(tmp_path):
    """learn() itself: ValueError in one line before anything is drawn (d = 10^8 would draw
    a 10^8 x 10^8 matrix)."""
    code = ("from exactlearn import learn\n"
            "try:\n"
            "    learn(lambda tokens: 0, d=10 ** 8, heads=1, field='rational')\n"
            "except ValueError as exc:\n"
            "    print(type(exc).__name__, exc)\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        p = subprocess.run(limited(["-c", code]), cwd=tmp_path, env=env, text=True,
                           capture_output=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail("learn(d=10**8) still running after the timeout")
    assert p.returncode == 0 and p.stderr == "", p.stderr[-2000:]
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1 and "d = 100000000" in lines[0], p.stdout


@pytest.mark.parametrize("d, H", [(64, 32), (384, 12), (501, 1), (1, 23169)])
def test_legitimate_large_plans_are_not_refused(d, H):
    """The limits must not refuse real work: d = 64 with 32 heads, the all-MiniLM-L6-v2 layer
    at full width (d = 384, H = 12: 7,077,865 queries per prime), and the largest d and H."""
    from exactlearn.pipeline.plan import head_bound, paper_count
    assert head_bound(d, H, None) == H and head_bound(d, None, H) == H
    if (d, H) == (384, 12):
        assert paper_count(d, H) == 7_077_865


def test_the_limits_are_what_the_plan_costs():
    """The derived limits against the paper plan's own count and lengths, computed here."""
    from exactlearn import limits
    from exactlearn.pipeline.plan import paper_plan
    X = [[1 if i == j else 0 for i in range(3)] for j in range(3)]
    plan = paper_plan(X, X, 2)
    cost = limits.plan_cost(3, 2)
    assert cost.queries == plan.count
    assert cost.tokens == sum(q.k + 1 for q in plan.queries)
    # the largest d and H are the edges of the limits, and one more is refused
    for d, H in ((limits.MAX_DIMENSION, 1), (1, limits.MAX_HEADS)):
        assert limits.plan_size_problem(d, H) is None
    assert limits.plan_size_problem(limits.MAX_DIMENSION + 1, 1) is not None
    assert limits.plan_size_problem(1, limits.MAX_HEADS + 1) is not None


# -- hostile review (h10): limits the first round left out ---------------------------------

def test_verify_beyond_limit_is_refused_at_once(tmp_path):
    """--verify 10^9 ran 10^9 fresh queries (past any timeout); it is bounded like a plan."""
    path = model_file(tmp_path, SMALL)
    assert_refused(*run(["learn", "--model", path, "--heads", "2", "--verify", str(10 ** 9)],
                        tmp_path), "--verify", "MAX_VERIFY_QUERIES")


def test_retries_beyond_limit_is_refused_at_once(tmp_path):
    """--retries 10^30 with every draw refused (--range 10^40) looped 10^30 times."""
    path = model_file(tmp_path, SMALL)
    assert_refused(*run(["learn", "--model", path, "--heads", "2", "--retries", str(10 ** 30),
                         "--range", str(10 ** 40)], tmp_path), "--retries", "MAX_RETRIES")


@pytest.mark.parametrize("R", [10 ** 5, 10 ** 100])
def test_symbolic_range_past_degree_limit_is_refused_before_any_query(tmp_path, R):
    """The symbolic field had no exponent limit: --range 10^5 built T^(10^10) (MemoryError),
    10^100 an OverflowError traceback, 10^3 ran past 20 s.  Now the draw is refused before
    any query, like the rational field's, naming the limit (exit 1, a failed run)."""
    path = model_file(tmp_path, SMALL)
    rc, out, err = run(["learn", "--model", path, "--heads", "2", "--field", "symbolic",
                        "--range", str(R), "--json"], tmp_path)
    assert rc == 1 and err == "", err[-2000:]
    res = json.loads(out)
    assert res["status"] == "failed" and res["queries"] == 0 and res["refused_draws"] == res["attempts"]
    assert "MAX_SYMBOLIC_EXPONENT" in res["error"]


def test_symbolic_power_past_degree_limit_raises_exactness_error():
    from exactlearn.errors import ExactnessError
    from exactlearn.fields import Symbolic
    from exactlearn.limits import MAX_SYMBOLIC_EXPONENT
    K = Symbolic()
    assert K.power(MAX_SYMBOLIC_EXPONENT) == K.T ** MAX_SYMBOLIC_EXPONENT
    with pytest.raises(ExactnessError, match="MAX_SYMBOLIC_EXPONENT"):
        K.power(-(MAX_SYMBOLIC_EXPONENT + 1))


@pytest.mark.parametrize("kw, words", [
    ({"verify": -1}, "verify must be an integer >= 0"),
    ({"verify": 2.5}, "verify must be an integer >= 0"),
    ({"verify": 10 ** 12}, "MAX_VERIFY_QUERIES"),
    ({"retries": 2.5}, "retries must be an integer >= 0"),
    ({"retries": 10 ** 30, "query_range": 10 ** 40}, "MAX_RETRIES"),
    ({"query_range": 2.5}, "query_range must be an integer >= 1"),
    ({"e_range": 0}, "e_range must be an integer >= 1"),
    ({"plan": "efficient", "rank": 0}, "rank must be an integer >= 1"),
    ({"plan": "efficient", "rank": -1}, "rank must be an integer >= 1"),
])
def test_learn_refuses_absurd_counts_with_a_value_error(kw, words):
    """learn() silently took verify=-1 and rank=0 (certified), raised TypeError for
    verify=2.5, ran verify=10^12 and retries=10^30 past any timeout: each is now a
    ValueError naming the argument, before any query (the box is never asked)."""
    from exactlearn import MultiHeadAttention, Oracle, learn
    from exactlearn.fields import Rational
    model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])])
    box = Oracle(model, Rational())
    import signal

    def too_long(*_):
        raise TimeoutError("learn() still running after 10 s: not refused at once")
    previous = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(10)
    try:
        with pytest.raises(ValueError, match=words.replace("(", r"\(")):
            learn(box, 2, heads=1, seed=1, **kw)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert box.queries == 0


def test_real_field_refuses_dps_past_limit_at_construction():
    """Real(dps=10^8) was accepted by the Python API and learn() then ran past 20 s; the CLI's
    MAX_DPS now holds for the field itself."""
    from exactlearn.fields import Real
    with pytest.raises(ValueError, match="MAX_DPS"):
        Real(dps=10 ** 8)
    assert Real(dps=3000).dps == 3000


def test_workers_beyond_limit_are_refused_at_once(tmp_path):
    """``--workers 1000000`` started processes until the machine gave out (hostile review):
    refused in one line before any cluster starts."""
    from exactlearn import limits
    model = tmp_path / "m.json"
    model.write_text('{"format": "exactlearn.mha/1", "d": 2, "heads": [{"W": [[1, 0], [0, 1]], "v": [1, 2]}]}')
    r = subprocess.run([sys.executable, "-m", "exactlearn.cli", "learn", "--model", str(model), "--heads", "1",
                        "--field", "modular", "--workers", str(limits.MAX_LOCAL_WORKERS + 1)],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "--workers" in r.stderr, r.stderr


def test_a_model_file_with_more_heads_than_any_plan_is_refused(tmp_path):
    """A model file within the size limits but with more heads than any plan can learn (the
    hostile review's 3,000,000-head file took 53 s and 1.8 GB): one line, exit 2, at once."""
    from exactlearn import limits
    n = limits.MAX_HEADS + 1
    model = tmp_path / "many.json"
    model.write_text('{"format": "exactlearn.mha/1", "d": 1, "heads": ['
                     + ",".join(['{"W": [[1]], "v": [1]}'] * n) + "]}")
    r = subprocess.run([sys.executable, "-m", "exactlearn.cli", "learn", "--model", str(model), "--heads", "1"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "MAX_HEADS" in r.stderr, r.stderr
