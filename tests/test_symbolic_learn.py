"""The learner over Q(T), the exact ground truth: on tiny models (d <= 2, H <= 2) it is
certified and its answer equals the modular field's (a reduction of Q(T)) and the
canonical form (issue 4)."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.cli.main import main, random_model
from exactlearn.fields import Modular
from exactlearn.fields.symbolic import QT, Symbolic

#: named tiny models: (name, model, H)
NAMED = [
    ("one head, d=1", MultiHeadAttention([([[2]], [3])]), 1),
    ("two heads, d=1", MultiHeadAttention([([[1]], [1]), ([["-1/2"]], [2])]), 2),
    ("merged pair", MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]),
                                        ([[1, 0], [0, -1]], ["1/2", -1])]), 2),
    ("cancelling pair", MultiHeadAttention([([[0, 1], [1, 0]], [1, 1]),
                                            ([[0, 1], [1, 0]], [-1, -1])]), 2),
    ("denominators", MultiHeadAttention([([["1/2", 0], [1, "-1/3"]], [1, "-2/3"]),
                                         ([[0, "1/2"], [-1, 1]], [2, 1])]), 2),
]


def _both(model, H, seed):
    sym = learn(Oracle(model, Symbolic()), d=model.d, heads=H, seed=seed, retries=5)
    mod = learn(Oracle(model, Modular()), d=model.d, heads=H, seed=seed, retries=5)
    return sym, mod


@pytest.mark.parametrize("name,model,H", NAMED, ids=[n for n, _, _ in NAMED])
def test_named_tiny_models(name, model, H):
    sym, mod = _both(model, H, seed=3)
    assert sym.certified, sym.error
    assert sym.heads == mod.heads == model.canonical_heads()
    assert sym.field.name == "symbolic"


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(st.integers(1, 2), st.integers(1, 2), st.integers(0, 10 ** 6), st.integers(0, 100))
def test_symbolic_equals_modular_on_random_tiny_models(d, H, model_seed, seed):
    model = random_model(d, H, seed=model_seed)
    sym, mod = _both(model, H, seed)
    assert sym.certified and mod.certified, (sym.error, mod.error)
    assert sym.heads == mod.heads == model.canonical_heads()


def test_degenerate_draws_are_detected_never_wrong():
    """Over a tiny range degenerate draws are common: each run is certified-correct or a
    reported failure, never a wrong answer."""
    model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], ["-1/2", 1])])
    outcomes = set()
    for seed in range(12):
        res = learn(Oracle(model, Symbolic()), d=2, heads=2, seed=seed, query_range=1)
        outcomes.add(res.status)
        if res.certified:
            assert res.heads == model.canonical_heads()
        else:
            assert res.heads == () and res.error
    assert "failed" in outcomes                     # the tiny range does produce them


def test_cli_symbolic_matches_cli_modular(tmp_path, capsys):
    model = random_model(2, 2, seed=12)
    path = tmp_path / "m.json"
    model.dump(path)
    outs = {}
    for field in ("symbolic", "modular"):
        # a fixed seed: unseeded, a rare draw fails explicitly (degenerate) at every retry and
        # the test failed once in CI (14:31 UTC, 2026-12-02); the property is the match
        code = main(["learn", "--model", str(path), "--field", field, "--heads", "2", "--json",
                     "--seed", "1"])
        outs[field] = json.loads(capsys.readouterr().out)
        assert code == 0 and outs[field]["status"] == "certified"
    key = lambda h: json.dumps(h, sort_keys=True)
    assert sorted(outs["symbolic"]["heads"], key=key) == sorted(outs["modular"]["heads"], key=key)


def test_demo_shows_f_of_q_k_as_a_function_of_k_and_T(capsys):
    assert main(["demo", "--symbolic"]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if "From the model: f(q_k) =" in ln)
    assert "k" in line.split("=", 1)[1] and "T" in line.split("=", 1)[1]
    assert "equal to the function of step 1 as rational functions of k and T: True" in text
    assert "equal to the modular field's answer: True" in text


def test_elements_pickle_and_hash_like_their_values():
    K = Symbolic(scale=3)
    T = K.T
    a = (2 * T ** 5 - 1) / (T ** 2 + 3)
    assert pickle.loads(pickle.dumps(a)) == a and isinstance(pickle.loads(pickle.dumps(a)), QT)
    assert hash(K(3)) == hash(3) and K("1/2") == K(1) / 2
    assert {a: 1}[(4 * T ** 5 - 2) / (2 * T ** 2 + 6)] == 1
