"""The API you can hold in your head (issue 21): the typed failure, one spelling of
exact-over-Q, the CLI's --tokens and --inject-noise, one retry default
(docs/reference/api.md, docs/reference/cli.md)."""

from __future__ import annotations

import json
import random
import warnings
from fractions import Fraction

import numpy as np
import pytest

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.cli.main import main
from exactlearn.errors import DegenerateDraw, ExactLearnError
from exactlearn.fields import Modular, Rational, Real, Symbolic
from exactlearn.generate import random_model

MODEL = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "m.json"
    MODEL.dump(path)
    return str(path)


def run(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


# -- 1. a failure keeps its typed exception ---------------------------------------------------
def test_a_failure_is_its_typed_exception_and_a_success_has_none():
    bad = learn(Oracle(MODEL, Rational()), d=2, heads=1, seed=1)     # two heads, bound 1
    assert bad.status == "failed"
    assert isinstance(bad.failure, DegenerateDraw)
    assert bad.error.startswith(f"{bad.failure.kind}: {bad.failure}")
    assert "failure" not in bad.to_json()                           # the JSON is unchanged
    good = learn(Oracle(MODEL, Rational()), d=2, heads=2, seed=1)
    assert good.certified and good.failure is None and good.heads == MODEL.canonical_heads()


def test_a_failed_verification_is_a_typed_failure():
    exact = Oracle(MODEL, Rational())

    class ChangesAfterLearning:          # the model while learning, then off by one
        field = exact.field
        asked = 0

        def __call__(self, tokens):
            self.asked += 1
            y = exact(tokens)
            return y if self.asked <= 29 else y + 1

    res = learn(ChangesAfterLearning(), d=2, heads=2, seed=1, verify=3)
    from exactlearn.errors import VerificationFailed
    assert res.status == "failed" and res.heads == ()
    assert isinstance(res.failure, VerificationFailed) and isinstance(res.failure, ExactLearnError)
    assert res.error == str(res.failure) and res.error.startswith("verification failed")


# -- 2. one spelling for exact over Q -----------------------------------------------------------
@pytest.mark.parametrize("field, expected", [(Rational(), True), (Modular(), True),
                                             (Modular(p=2 ** 61 - 1), True)])
def test_exact_over_Q_is_the_json_key_and_the_old_spelling_warns(field, expected):
    res = learn(Oracle(MODEL, field), d=2, heads=2, seed=1)
    assert res.certified and res.heads == MODEL.canonical_heads()
    assert res.exact_over_Q is expected and res.to_json()["exact_over_Q"] is expected
    with pytest.warns(DeprecationWarning, match="exact_over_Q"):
        assert res.exact_over_q is expected


def test_exact_over_Q_is_false_over_the_real_field_and_on_failure():
    real = learn(Oracle(MODEL, Real(dps=30)), d=2, heads=2, seed=1)
    failed = learn(Oracle(MODEL, Rational()), d=2, heads=1, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                       # the new spelling never warns
        assert real.exact_over_Q is False and failed.exact_over_Q is False


# -- 3. the float box of a model file, --tokens, --inject-noise ---------------------------------
def _dyadic_tokens(rng, n, d):
    return [[rng.randint(-64, 64) / 16 for _ in range(d)] for _ in range(n)]


@pytest.mark.parametrize("bias", [False, True])
def test_float_box_agrees_with_the_exact_model(bias):
    """The numpy evaluation against the exact model (the model as given, rational weights,
    evaluated in 60 digits): float64 to ~1e-15 relative, float32 to ~1e-6."""
    from exactlearn.floatbox import FloatAttention
    rng = random.Random(7)
    for seed in range(4):
        model = random_model(3, 2, seed, False, False, 3, 4, bias=bias)
        K = Real(dps=60)
        boxes = {"float64": (FloatAttention(model, "float64"), 1e-13),
                 "float32": (FloatAttention(model, "float32"), 1e-4)}
        for _ in range(5):
            X = _dyadic_tokens(rng, rng.randint(1, 5), 3)
            truth = float(model.evaluate([[Fraction(a) for a in t] for t in X], K))
            for name, (box, tol) in boxes.items():
                y = box(np.array(X, dtype=name))
                assert y.dtype.name == name
                assert abs(float(y) - truth) <= tol * max(1.0, abs(truth)), (seed, name, X)


def test_cli_tokens_float64_learns_the_file_within_its_bound(model_file, capsys):
    rc, out, err = run(capsys, ["learn", "--model", model_file, "--heads", "2", "--field", "real",
                                "--dps", "30", "--seed", "1", "--tokens", "float64", "--json"])
    obj = json.loads(out)
    assert rc == 0 and obj["status"] == "certified" and obj["plan"] == "stable", obj["error"]
    assert obj["noise_estimated"] is not None and obj["noise_queries"] > 0   # measured eta
    truth = MODEL.canonical_heads()            # exact, and exactly float64 numbers
    assert len(obj["heads"]) == len(truth)
    err_max = max(abs(Fraction(a) - Fraction(str(b)))
                  for h, t in zip(obj["heads"], truth)
                  for a, b in [*zip((x for r in h["W"] for x in r), (x for r in t.W for x in r)),
                               *zip(h["v"], t.v)])
    assert err_max <= Fraction(obj["error_bound"]) and err_max < Fraction(1, 10 ** 12)


@pytest.mark.parametrize("argv, named", [
    (["--tokens", "float64"], "--tokens float64 needs --field real"),
    (["--field", "real", "--tokens", "float32", "--inject-noise", "1e-9"],
     "--inject-noise needs --tokens exact"),
    (["--inject-noise", "1e-9"], "--inject-noise needs --field real"),
    (["--field", "real", "--tokens", "float64", "--plan", "paper"], "--tokens float64 needs --plan stable"),
])
def test_cli_token_and_noise_options_are_checked(model_file, capsys, argv, named):
    rc, out, err = run(capsys, ["learn", "--model", model_file, "--heads", "2", *argv])
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and named in err, err


def test_cli_noise_is_the_deprecated_spelling_of_inject_noise(model_file, capsys):
    base = ["learn", "--model", model_file, "--heads", "2", "--field", "real", "--dps", "30",
            "--seed", "3", "--json"]
    rc_new, out_new, err_new = run(capsys, base + ["--inject-noise", "1e-20"])
    rc_old, out_old, err_old = run(capsys, base + ["--noise", "1e-20"])
    new, old = json.loads(out_new), json.loads(out_old)
    for obj in (new, old):
        for key in ("learner_seconds", "oracle_seconds"):
            obj.pop(key)
    assert rc_new == rc_old == 0 and new == old and new["noise_seed"] == 3
    assert err_new == ""
    lines = err_old.strip().splitlines()
    assert len(lines) == 1 and "--noise is deprecated" in lines[0] and "--inject-noise" in lines[0]
    rc, out, err = run(capsys, ["learn", "--model", model_file, "--heads", "2", "--noise", "1e-9"])
    assert rc == 2 and out == "" and err.strip() == (           # bad input names the spelling given
        "exactlearn: error: --noise needs --field real; it does not apply to --field rational")


# -- 4. one retry default -----------------------------------------------------------------------
def test_learn_and_the_cli_share_one_retry_default(model_file, capsys):
    """Over Q(T) at range 2 the first draw of seed 0 is degenerate: learn() without
    retries= redraws like the CLI (DEFAULT_RETRIES), and --retries 0 means 0."""
    K = Symbolic()
    once = learn(Oracle(MODEL, K), d=2, heads=2, seed=0, query_range=2, retries=0)
    assert once.status == "failed" and once.attempts == 1
    default = learn(Oracle(MODEL, K), d=2, heads=2, seed=0, query_range=2)
    three = learn(Oracle(MODEL, K), d=2, heads=2, seed=0, query_range=2, retries=3)
    assert default.attempts == three.attempts > 1
    assert (default.status, default.queries, default.heads) == (three.status, three.queries,
                                                                three.heads)
    if default.certified:
        assert default.heads == MODEL.canonical_heads()
    cli = ["learn", "--model", model_file, "--heads", "2", "--field", "symbolic", "--range", "2",
           "--seed", "0", "--json"]
    _, out, _ = run(capsys, cli + ["--retries", "0"])
    assert json.loads(out)["attempts"] == 1
    _, out, _ = run(capsys, cli)
    assert json.loads(out)["attempts"] == default.attempts


def test_retries_n_means_n_redraws_for_a_transformer_file_too(tmp_path, capsys):
    """A d = 1 Transformer fails every path (the kink path needs a plane): without --retries
    the learner's default 2 redraws (3 attempts, as learn_transformer()), and --retries N
    allows N, as for an attention file (before: 2 + N)."""
    from exactlearn import learn_transformer
    from exactlearn import TransformerOracle, random_transformer
    path = tmp_path / "t.json"
    model = random_transformer(1, 1, 1, seed=0)
    path.write_text(json.dumps(model.to_json()))
    assert learn_transformer(TransformerOracle(model, Rational()), d=1, heads=1, seed=0).attempts == 3
    for extra, attempts in (([], 3), (["--retries", "0"], 1), (["--retries", "1"], 2)):
        rc, out, _ = run(capsys, ["learn", "--model", str(path), "--heads", "1", "--seed", "0",
                                  "--json", *extra])
        obj = json.loads(out)
        assert rc == 1 and obj["status"] == "failed" and obj["attempts"] == attempts, extra
