"""The one-layer Transformer (arXiv:2608.03294, its one-layer Transformer extension;
docs: howto/transformer.md): model file, exact evaluation, learning up to
functional equivalence, explicit failures, CLI.

Named examples (``*_EXAMPLES``) pin the cases found while building the learner;
the property test draws models from the acceptance distribution.  Budget: well
under a minute on one core.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from gmpy2 import mpq
from hypothesis import given, settings
from hypothesis import strategies as st

from exactlearn import OneLayerTransformer
from exactlearn.cli.main import main
from exactlearn.fields import Rational
from exactlearn.fields.real import Real
from exactlearn.fields.symbolic import Symbolic
from exactlearn.oracle import TransformerOracle
from exactlearn.transformer_model import NotOrdered, TransformerEvaluator, random_transformer
from exactlearn.strategies.transformer.learn import CONDITIONS, learn_transformer

JSON_KEYS = {"status", "field", "d", "heads_bound", "canonical_heads", "queries", "max_length",
             "learning_queries", "learning_max_length", "certificate_queries",
             "certificate_max_length", "heads", "error", "learner_seconds", "oracle_seconds", "model",
             "certificate"}
RATIONAL = re.compile(r"^-?\d+(/\d+)?$")


def fresh_queries(d, n, seed, R=4):
    rng = random.Random(seed)
    return [[tuple(rng.randint(-R, R) for _ in range(d)) for _ in range(rng.randint(1, 6))]
            for _ in range(n)]


def equivalent_on(a, b, field, queries) -> bool:
    ea, eb = TransformerEvaluator(a, field), TransformerEvaluator(b, field)
    return all(ea(q) == eb(q) for q in queries)


def learn(model, field=None, **kw):
    oracle = TransformerOracle(model, field or Rational())
    return oracle, learn_transformer(oracle, d=model.d, heads=model.H, **kw)


# -- the model ---------------------------------------------------------------------------
def test_evaluation_by_hand():
    # one head, W = I: on (x_1, x_2) = ((2, 0), (0, 1)) the scores are 0 and 1 (key left,
    # query right), so the softmax at base 2 weighs them 1/3 and 2/3
    T = OneLayerTransformer([([[1, 0], [0, 1]], [[1, 0], [0, 1]])], B=[[1, 0], [0, -1]],
                            u=[1, "1/2"])
    K = Rational()
    assert T.evaluate([[2, 0], [0, 1]], K) == mpq(2, 3)            # ReLU(2/3) + 0
    assert T.evaluate([[1, -2]], K) == mpq(2)                       # 1 + (1/2) * 2
    assert T.evaluate([[-1, 2]], K) == 0                            # both neurons off


def test_file_round_trip(tmp_path):
    T = random_transformer(3, 2, 4, seed=7)
    path = tmp_path / "T.json"
    T.dump(path)
    back = OneLayerTransformer.from_file(path)
    assert back == T
    assert json.loads(path.read_text())["format"] == "exactlearn.transformer/1"


@pytest.mark.parametrize("field", [Symbolic(scale=1)], ids=["symbolic"])
def test_unordered_fields_are_refused(field):
    T = random_transformer(2, 1, 2, seed=1)
    with pytest.raises(NotOrdered, match="sign decision"):
        T.evaluate([[1, 2]], field)
    with pytest.raises(NotOrdered):
        TransformerOracle(T, field)


# -- learning ------------------------------------------------------------------------------
#: (d, H, neurons, seed) of ``random_transformer``, from the acceptance distribution; each
#: once failed or was slow: 1001 rank-1 O (two antiparallel neurons leave a linear term),
#: 1027 two kinks 0.003 apart (once merged by the kink search), 1022 a path end on a
#: hyperplane (once missed), 19002 a pure linear term (opposite neurons whose kinks
#: cancel), 17004 and 1161930246 thin cones (margin escalation of M).
ROUND_TRIP_EXAMPLES = [(3, 2, 3, 5), (3, 2, 4, 1005), (2, 1, 2, 1001), (2, 1, 2, 1027),
                       (2, 2, 4, 1022), (2, 1, 4, 19002), (3, 2, 3, 17004), (3, 2, 4, 1161930246)]


@pytest.mark.parametrize("d,H,r,seed", ROUND_TRIP_EXAMPLES)
def test_round_trip_equivalent_on_fresh_queries(d, H, r, seed):
    T = random_transformer(d, H, r, seed=seed)
    oracle, res = learn(T, seed=seed)
    assert res.certified, res.error
    assert (res.queries, res.max_length) == (oracle.queries, oracle.max_length)   # certificate included
    assert equivalent_on(T, res.model, oracle.field, fresh_queries(d, 300, seed))


@pytest.mark.slow
@settings(max_examples=6)
@given(st.integers(0, 10 ** 6))
def test_never_certified_wrong(seed):
    rng = random.Random(seed)
    d, H, r = rng.choice((2, 3)), rng.choice((1, 2)), rng.randint(2, 4)
    T = random_transformer(d, H, r, seed=seed)
    oracle, res = learn(T, seed=seed)
    if res.certified:
        assert equivalent_on(T, res.model, oracle.field, fresh_queries(d, 200, seed + 1))
    else:
        assert res.model is None and res.error


def test_real_field_within_tolerance():
    T = random_transformer(3, 2, 3, seed=1003)
    oracle, res = learn(T, field=Real(dps=50), seed=3)
    assert res.certified, res.error
    K = oracle.field
    a, b = TransformerEvaluator(T, K), TransformerEvaluator(res.model, K)
    for q in fresh_queries(3, 50, 9):
        q = [tuple(mpq(x, 4) for x in t) for t in q]
        assert abs(a(q) - b(q)) < K(mpq(1, 10 ** 30))


#: Models that violate the stated conditions: each must fail explicitly, never certify.
VIOLATION_EXAMPLES = {
    # C1: beta = gamma_1 + gamma_2 = 0, so no single token ever switches the neuron
    "C1 beta = 0": OneLayerTransformer(
        [([[1, 0], [0, 1]], [[1, 0], [0, 1]]), ([[0, 1], [-1, 0]], [[-1, 0], [0, -1]])],
        B=[[1, 0]], u=[1]),
    # C2: two neurons on the hyperplane x_1 = 0 reading different heads
    "C2 parallel beta": OneLayerTransformer(
        [([[1, 0], [0, 1]], [[1, 0], [0, 0]]), ([[0, 1], [-1, 0]], [[0, 0], [2, 0]])],
        B=[[1, 0], [0, 1]], u=[1, -1]),
}


@pytest.mark.parametrize("name", sorted(VIOLATION_EXAMPLES))
def test_condition_violations_fail_explicitly(name):
    T = VIOLATION_EXAMPLES[name]
    _, res = learn(T, seed=0)
    assert res.status == "failed" and res.model is None
    assert res.error
    assert res.to_json()["model"] is None


# -- the command line ----------------------------------------------------------------------
def run(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_json_keys_and_certificate(tmp_path, capsys):
    T = random_transformer(2, 2, 3, seed=1022)
    path = tmp_path / "T.json"
    T.dump(path)
    rc, out, err = run(capsys, ["learn", "--model", str(path), "--heads", "2", "--seed", "4",
                                "--verify", "50", "--json"])
    j = json.loads(out)
    assert rc == 0 and err == ""
    assert JSON_KEYS <= set(j)
    assert j["status"] == "certified" and j["error"] is None and j["field"] == "rational"
    cert = j["certificate"]
    assert cert["fresh_queries"] == len(cert["queries"]) == 50 + cert["fresh_kinds"]["boundary"]
    assert cert["fresh_kinds"]["random"] == 50 and cert["agreed"] is True
    assert j["conditions"] == CONDITIONS
    model = j["model"]
    assert model["format"] == "exactlearn.transformer/1"
    assert all(RATIONAL.match(x) for h in model["heads"] for M in (h["W"], h["O"])
               for row in M for x in row)
    back = OneLayerTransformer.from_json(model)
    assert equivalent_on(T, back, Rational(scale=1), fresh_queries(2, 200, 5))


def test_cli_violation_exits_1(tmp_path, capsys):
    path = tmp_path / "T.json"
    VIOLATION_EXAMPLES["C2 parallel beta"].dump(path)
    rc, out, err = run(capsys, ["learn", "--model", str(path), "--heads", "2", "--json"])
    j = json.loads(out)
    assert rc == 1 and j["status"] == "failed" and j["model"] is None and j["error"]


GOOD = random_transformer(2, 1, 2, seed=1).to_json()


def _bad(**changes):
    obj = json.loads(json.dumps(GOOD))
    for k, v in changes.items():
        if k == "ffn_B":
            obj["ffn"]["B"] = v
        elif k == "ffn_u":
            obj["ffn"]["u"] = v
        elif v is None:
            del obj[k]
        else:
            obj[k] = v
    return json.dumps(obj)


BAD_FILES = {
    "not json": "{\"format\": ",
    "not an object": "[1, 2]",
    "missing ffn": _bad(ffn=None),
    "ffn not an object": _bad(ffn=[1]),
    "m not positive": _bad(m=0),
    "W wrong shape": _bad(heads=[{"W": [[1, 0]], "O": [[1, 0], [0, 1]]}]),
    "O wrong shape": _bad(heads=[{"W": [[1, 0], [0, 1]], "O": [[1, 0, 0], [0, 1, 0]]}]),
    "head without O": _bad(heads=[{"W": [[1, 0], [0, 1]]}]),
    "B row too short": _bad(ffn_B=[[1], [2, 3]]),
    "u length": _bad(ffn_u=[1]),
    "not a number": _bad(ffn_u=["x", 1]),
    "float NaN": _bad(ffn_u=[1, "NaN"]).replace('"NaN"', "NaN"),
    "zero denominator": _bad(ffn_u=["1/0", 1]),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_files_exit_2_with_one_line(name, tmp_path, capsys):
    path = tmp_path / "T.json"
    path.write_text(BAD_FILES[name])
    rc, out, err = run(capsys, ["learn", "--model", str(path), "--heads", "1"])
    assert rc == 2 and out == ""
    assert err.startswith("exactlearn: error:") and err.count("\n") == 1
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--field", "symbolic"], ["--range", "5"],
                                  ["--field", "nonsense"]])
def test_bad_options_exit_2(argv, tmp_path, capsys):
    path = tmp_path / "T.json"
    path.write_text(json.dumps(GOOD))
    rc, out, err = run(capsys, ["learn", "--model", str(path), "--heads", "1"] + argv)
    assert rc == 2 and out == "" and err.count("\n") == 1


def test_the_package_and_its_driver_export_the_same_learner():
    """``exactlearn.strategies.transformer`` and its ``learn`` module name the same objects."""
    import exactlearn
    import exactlearn.strategies.transformer as package
    import exactlearn.strategies.transformer.learn as driver
    for name in ("learn_transformer", "CONDITIONS", "hyperplane_point", "TransformerLearnResult"):
        assert getattr(package, name) is getattr(driver, name)
    assert exactlearn.learn_transformer is learn_transformer
    assert exactlearn.TransformerLearnResult is package.TransformerLearnResult
