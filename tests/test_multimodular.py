"""Tall rationals over the modular field: the multi-modular method (exactlearn.pipeline.multimodular).

Pinned regression: one prime's rational reconstruction certified
``-30786325577728/30786325577729`` for ``v = 1/(2**78 - 1)``; the certificate,
modulo the same prime, could not tell the two apart.  Expected heads are always
the canonical form of the raw model, computed here apart (``canonicalize``).
"""

from __future__ import annotations

import json
import random
import struct
from itertools import islice

import pytest
from gmpy2 import mpq

import exactlearn.pipeline.multimodular as mm
import exactlearn.pipeline.over_primes as over_primes
from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.cli.main import main
from exactlearn.fields import Modular
from exactlearn.model import Head, canonicalize
from exactlearn.pipeline.plan import paper_count

TALL = MultiHeadAttention([([[1, 0], [0, 1]], ["1/" + str(2 ** 78 - 1), 1])])


def expected(model):
    return canonicalize(Head(h.W, h.v) for h in model.heads)


def test_issue_example_is_exact_over_q():
    oracle = Oracle(TALL, Modular())
    res = learn(oracle, d=2, heads=1, seed=0, verify=20)
    assert res.status == "certified" and res.verified is True
    assert res.heads == expected(TALL)
    assert res.exact_over_Q and res.to_json()["exact_over_Q"] is True
    runs = res.multimodular["primes"]
    assert [r["role"] for r in runs][-1] == "confirmation" and len(runs) >= 3
    assert all(r["queries"] == paper_count(2, 1) for r in runs)       # the count holds per prime
    assert res.learning_queries == sum(r["queries"] for r in runs)
    assert res.queries == res.learning_queries + res.verify_queries == oracle.queries  # views count too
    assert len({r["p"] for r in runs}) == len(runs)                    # distinct primes
    assert res.multimodular["log2_wrong_reconstruction_bound"] < -64


def _f32(rng, sigma):
    x = struct.unpack("f", struct.pack("f", rng.gauss(0, sigma)))[0]
    return mpq(*x.as_integer_ratio())


def float32_model(rng, d, H):
    """W float32 ~ N(0, 0.5^2); v = W_V^T W_O^T r with float32 factors, read exactly
    (dyadic rationals of heights 2^70 to 2^85)."""
    heads = []
    for _ in range(H):
        W = [[_f32(rng, 0.5) for _ in range(d)] for _ in range(d)]
        WV = [[_f32(rng, 0.5) for _ in range(d)] for _ in range(d)]
        WO = [[_f32(rng, 0.5) for _ in range(d)] for _ in range(d)]
        r = [_f32(rng, 1.0) for _ in range(d)]
        Or = [sum(WO[i][j] * r[j] for j in range(d)) for i in range(d)]
        heads.append((W, [sum(WV[j][i] * Or[j] for j in range(d)) for i in range(d)]))
    return MultiHeadAttention(heads, d=d)


@pytest.mark.parametrize("d,H", [(2, 1), (2, 3), (3, 2), (4, 1), (4, 3)])
def test_float32_exact_models_are_learned_exactly(d, H):
    for s in range(2):
        model = float32_model(random.Random(f"f32:{d}:{H}:{s}"), d, H)
        assert max(x.denominator for h in model.heads for x in h.v) > 2 ** 45   # past one prime
        res = learn(Oracle(model, Modular()), d=d, heads=H, seed=s)
        assert res.certified, res.error
        assert res.heads == expected(model)


def _tall_rational(rng, bits):
    kind = rng.choice(("random", "mersenne", "dyadic"))
    if kind == "random":
        return mpq(rng.getrandbits(bits) - 2 ** (bits - 1), rng.getrandbits(bits) | 1)
    if kind == "mersenne":
        return mpq(rng.choice((1, -3, 5)), 2 ** rng.randint(bits // 2, bits) - 1)
    return mpq(rng.getrandbits(bits), 2 ** rng.randint(1, bits))


def test_no_certified_wrong_answer_on_tall_rationals():
    rng = random.Random(2)
    certified = 0
    for n in range(24):
        d, H, bits = rng.choice((1, 2)), rng.choice((1, 2)), rng.choice((60, 78, 150, 400))
        model = MultiHeadAttention(
            [([[rng.randint(-2, 2) for _ in range(d)] for _ in range(d)],
              [_tall_rational(rng, bits) for _ in range(d)]) for _ in range(H)], d=d)
        res = learn(Oracle(model, Modular()), d=d, heads=H, seed=n, max_primes=4)
        if res.certified:
            certified += 1
            assert res.heads == expected(model)
        else:       # 4 primes reconstruct about 2^226: the 400-bit models fail, and say why
            assert res.error.startswith("reconstruction failed: rational height exceeds what 4 "
                                        "primes reconstruct"), res.error
    assert certified >= 12


def test_a_wrong_reconstruction_is_caught_by_the_confirmation_prime(monkeypatch):
    """Mutation: make the stable reconstruction wrong; the independent prime refutes it."""
    real = over_primes.reconstruct_heads

    def off_by_one(W_set, residues, moduli):
        got = real(W_set, residues, moduli)
        return None if got is None else tuple(Head(h.W, (h.v[0] + 1,) + h.v[1:]) for h in got)

    monkeypatch.setattr(over_primes, "reconstruct_heads", off_by_one)
    res = learn(Oracle(TALL, Modular()), d=2, heads=1, seed=0, max_primes=5)
    assert res.status == "failed" and res.error.startswith("reconstruction failed")
    assert "refuted by the confirmation prime" in res.error
    assert res.multimodular["refuted_confirmations"] >= 1                    # reported on failure
    assert res.queries == sum(r["queries"] or 0 for r in res.multimodular["primes"])


def test_values_congruent_over_the_first_primes_are_learned():
    """v = 1 + p1 p2 reconstructs 'stably' as 1 over the first two primes; the confirmation
    prime refutes that, and more primes are asked (found by review)."""
    p1, p2 = list(islice(mm.analysis_primes(), 2))
    model = MultiHeadAttention([([[1, 0], [0, 1]], [1 + p1 * p2, 1])])
    oracle = Oracle(model, Modular())
    res = learn(oracle, d=2, heads=1, seed=0)
    assert res.certified and res.heads == expected(model)
    assert res.multimodular["refuted_confirmations"] == 1
    assert res.queries == oracle.queries == sum(r["queries"] for r in res.multimodular["primes"])


def test_a_bad_reduction_skips_the_prime():
    """A softmax denominator vanishing modulo the first prime (p = 257): that prime is
    skipped and the next analysis prime analyses.  (Only the first prime is an analysis
    prime c*2^120 + 1 now; the later ones are random.)"""
    model = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2]), ([[0, 1], [1, 0]], [2, -1])])
    oracle = Oracle(model, Modular(p=257))
    res = learn(oracle, d=2, heads=2, seed=3, query_range=8)
    assert res.certified and res.heads == expected(model)
    runs = res.multimodular["primes"]
    assert [r["role"] for r in runs][:2] == ["skipped", "analysis"]
    assert res.queries == oracle.queries == sum(r["queries"] for r in runs)


def test_a_small_prime_with_vanishing_softmax_denominators_never_crashes():
    model = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2]), ([[0, 1], [1, 0]], [2, -1])])
    for seed in range(3):
        res = learn(Oracle(model, Modular(p=257)), d=2, heads=2, seed=seed, retries=2)
        assert not res.certified or res.heads == expected(model)


def test_a_box_fixed_to_one_prime_is_certified_modulo_p_only():
    """A plain callable answering in F_p: v is certified as residues, never as rationals."""
    K = Modular(scale=1)
    oracle = Oracle(TALL, K)
    res = learn(lambda tokens: oracle(tokens), d=2, heads=1, field=K, seed=0)
    assert res.status == "certified" and not res.exact_over_Q
    out = res.to_json()
    assert out["exact_over_Q"] is False and out["multimodular"]["modulus"] == str(K.p)
    (h,) = res.heads
    (true,) = expected(TALL)
    assert h.W == true.W
    assert [K(x) for x in h.v] == [K(x) for x in true.v]          # residues agree modulo p
    assert out["multimodular"]["v_residues"] == [[str(int(K(x))) for x in true.v]]
    guess = out["multimodular"]["rational_guess"][0]
    assert guess[0] != str(true.v[0])          # one prime's guess is wrong here -- and labelled
    assert "guess" in out["multimodular"]["note"]


def test_cli_reports_primes_and_exactness(tmp_path, capsys):
    path = tmp_path / "tall.json"
    TALL.dump(path)
    assert main(["learn", "--model", str(path), "--heads", "1", "--field", "modular", "--json",
                 "--seed", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "certified" and out["exact_over_Q"] is True
    assert out["heads"][0]["v"] == ["1/" + str(2 ** 78 - 1), "1"]
    assert out["queries"] == sum(r["queries"] for r in out["multimodular"]["primes"])
    # the analysis prime and one refuted confirmation reconstruct 2^-78-ish values: 2 primes
    # combined now suffice (the old protocol needed 3 analysis primes and failed with 2)
    assert main(["learn", "--model", str(path), "--heads", "1", "--field", "modular",
                 "--max-primes", "2", "--seed", "1"]) == 0
    text = capsys.readouterr().out
    assert "residues of 2 prime(s) combined" in text, text
    tall2 = MultiHeadAttention([([[1, 0], [0, 1]], ["1/" + str(2 ** 150 - 1), 1])])
    tall2.dump(path)
    assert main(["learn", "--model", str(path), "--heads", "1", "--field", "modular",
                 "--max-primes", "2"]) == 1
    text = capsys.readouterr().out
    assert "rational height exceeds what 2 primes reconstruct" in text
    assert main(["learn", "--model", str(path), "--heads", "1", "--max-primes", "3"]) == 2


# ---- issue 23: two passes for ordinary heights, one with a declared height bound ----------

def _small_model(rng, d, H):
    return MultiHeadAttention(
        [([[rng.randint(-3, 3) for _ in range(d)] for _ in range(d)],
          [mpq(rng.randint(-9, 9), rng.randint(1, 9)) for _ in range(d)]) for _ in range(H)], d=d)


@pytest.mark.parametrize("d,H,seed", [(2, 1, 0), (3, 2, 1), (4, 3, 2)])
def test_ordinary_heights_take_two_passes(d, H, seed):
    """The analysis prime, then one confirmation: 2 passes of the plan (3 before)."""
    model = _small_model(random.Random(f"two:{seed}"), d, H)
    oracle = Oracle(model, Modular())
    res = learn(oracle, d=d, heads=H, seed=seed)
    assert res.certified and res.heads == expected(model)
    runs = res.multimodular["primes"]
    assert [r["role"] for r in runs] == ["analysis", "confirmation"]
    assert res.queries == oracle.queries == 2 * paper_count(d, H) and res.plan_runs == 2
    assert res.multimodular["route"] == "confirmation"
    assert res.multimodular["log2_wrong_reconstruction_bound"] < -64


@pytest.mark.parametrize("d,H,seed", [(2, 1, 0), (3, 2, 1), (4, 3, 2)])
def test_a_height_bound_takes_one_pass(d, H, seed):
    model = _small_model(random.Random(f"two:{seed}"), d, H)
    oracle = Oracle(model, Modular())
    res = learn(oracle, d=d, heads=H, seed=seed, max_height=9)
    assert res.certified and res.heads == expected(model)
    mm_ = res.multimodular
    assert [r["role"] for r in mm_["primes"]] == ["analysis"] and mm_["route"] == "height bound"
    assert res.queries == oracle.queries == paper_count(d, H)
    assert mm_["max_height"] == "9" and mm_["exact_over_Q"] is True
    assert -64 < mm_["log2_wrong_reconstruction_bound"] <= mm.MAX_LOG2_BOUNDED   # stated, weaker
    assert res.to_json()["exact_over_Q"] is True


def test_a_box_past_the_height_bound_never_certifies():
    """v or W taller than the declared B: an explicit failure naming the bound, every query
    counted -- never certified (a residue of a random tall value reconstructs within B with
    probability about 2B^2/p)."""
    rng = random.Random(5)
    checked = 0
    for n in range(12):
        d, H = rng.choice((1, 2, 3)), rng.choice((1, 2))
        tall_v = n % 3 != 0
        heads = []
        for _ in range(H):
            W = [[rng.randint(-3, 3) for _ in range(d)] for _ in range(d)]
            v = [mpq(rng.randint(-9, 9), rng.randint(1, 9)) for _ in range(d)]
            if tall_v:
                v[0] = _tall_rational(rng, rng.choice((20, 60, 78)))
            else:
                W[0][0] = rng.choice((-1, 1)) * rng.randint(2 ** 12, 2 ** 20)
            heads.append((W, v))
        model = MultiHeadAttention(heads, d=d)
        B = 2 ** 10
        if all(max(abs(x.numerator), x.denominator) <= B for h in model.canonical_heads()
               for x in list(h.v) + [y for row in h.W for y in row]):
            continue
        oracle = Oracle(model, Modular())
        res = learn(oracle, d=d, heads=H, seed=n, max_height=B, query_range=2 ** 20)
        assert not res.certified, (n, model.canonical_heads())
        assert "height bound" in res.error, res.error
        assert res.queries == oracle.queries == sum(r["queries"] for r in res.multimodular["primes"])
        checked += 1
    assert checked >= 8
    res = learn(Oracle(TALL, Modular()), d=2, heads=1, seed=0, max_height=2 ** 40)
    assert res.status == "failed" and "declared height bound" in res.error
    assert res.multimodular["route"] == "height bound" and not res.multimodular["exact_over_Q"]


def test_a_tall_height_bound_joins_primes_past_two_b_squared():
    """B = 2^80 > sqrt(p/2): a random prime joins the CRT (v from its answers, W exact),
    then the reconstruction within B is unique.  A small query range makes the plan's
    degeneracy bound weak (above 2^-20), so a confirmation prime is added."""
    oracle = Oracle(TALL, Modular())
    res = learn(oracle, d=2, heads=1, seed=0, max_height=2 ** 80, query_range=2 ** 8)
    assert res.certified and res.heads == expected(TALL)
    runs = res.multimodular["primes"]
    assert [r["role"] for r in runs] == ["analysis", "analysis", "confirmation"]
    assert runs[1]["joined"] is True and res.multimodular["stable_after"] == 2
    assert res.queries == oracle.queries == 3 * paper_count(2, 1)
    # exponents past (p - 1)/3 under the bound: refused before any query
    oracle = Oracle(TALL, Modular())
    res = learn(oracle, d=2, heads=1, seed=0, max_height=2 ** 80)
    assert res.status == "failed" and "--range" in res.error and res.queries == oracle.queries == 0


def test_a_refuted_confirmation_joins_the_crt():
    """1/(2^78 - 1): the analysis prime reconstructs a wrong small value, the confirmation
    refutes it, its residues join, and the next confirmation certifies: 3 passes (4 before)."""
    oracle = Oracle(TALL, Modular())
    res = learn(oracle, d=2, heads=1, seed=0)
    assert res.certified and res.heads == expected(TALL)
    runs = res.multimodular["primes"]
    assert [(r["role"], "refuted" in r, r.get("joined", False)) for r in runs] == [
        ("analysis", False, False), ("confirmation", True, True), ("confirmation", False, False)]
    assert res.multimodular["stable_after"] == 2 and res.multimodular["refuted_confirmations"] == 1
    assert res.queries == oracle.queries == 3 * paper_count(2, 1)


def test_a_refuted_confirmation_joins_on_the_efficient_plan():
    """The recorded route (efficient plan): v modulo the refuting prime from all its answers."""
    oracle = Oracle(TALL, Modular())
    res = learn(oracle, d=2, heads=1, seed=0, plan="efficient")
    assert res.certified and res.heads == expected(TALL)
    runs = res.multimodular["primes"]
    assert any(r.get("joined") for r in runs) and runs[-1]["role"] == "confirmation"
    assert res.queries == oracle.queries == sum(r["queries"] for r in runs)


def test_max_height_input_is_checked(tmp_path, capsys):
    model = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2])])
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_height"):
            learn(Oracle(model, Modular()), d=2, heads=1, max_height=bad)
    with pytest.raises(ValueError, match="max_height"):
        learn(Oracle(model, Modular()), d=2, heads=1, max_height=4, plan="efficient")
    path = tmp_path / "m.json"
    model.dump(path)
    assert main(["learn", "--model", str(path), "--heads", "1", "--max-height", "4"]) == 2
    assert "--max-height" in capsys.readouterr().err
    assert main(["learn", "--model", str(path), "--heads", "1", "--field", "modular",
                 "--max-height", "0"]) == 2
    assert main(["learn", "--model", str(path), "--heads", "1", "--field", "modular",
                 "--max-height", "4", "--json", "--seed", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "certified" and out["multimodular"]["route"] == "height bound"
    assert out["queries"] == paper_count(2, 1) and out["heads"][0]["v"] == ["1", "2"]


def test_a_box_fixed_to_one_prime_with_a_height_bound_is_exact():
    """One prime is all a fixed-prime box offers; with p > 2B^2 it is enough."""
    model = MultiHeadAttention([([[1, 0], [0, 1]], ["-7/3", 1]), ([[0, 1], [1, 0]], [2, "1/5"])])
    K = Modular(scale=1)
    inner = Oracle(model, K)
    res = learn(lambda tokens: inner(tokens), d=2, heads=2, field=K, seed=0, max_height=7)
    assert res.certified and res.exact_over_Q and res.heads == expected(model)
    assert res.multimodular["route"] == "height bound"
    res = learn(lambda tokens: inner(tokens), d=2, heads=2, field=K, seed=0, max_height=2)
    assert res.status == "failed" and "height bound" in res.error


def test_an_over_view_shares_the_integer_form_and_answers_as_a_fresh_oracle():
    """``Oracle.over`` builds its evaluator from the parent's field-independent parts (the
    integer D W_h, the heads in the parameter domain: about 100 MB a view for a MiniLM layer
    at d = 384), and answers every query as an oracle built afresh over that field."""
    from exactlearn.generate import random_model
    model = random_model(4, 3, seed=5)
    parent = Oracle(model, Modular())
    other = Modular(p=1000003)
    view, fresh = parent.over(other), Oracle(model, other.with_scale(parent.field.D))
    assert view._eval._ints is parent._eval._ints and view._eval.heads is parent._eval.heads
    assert fresh._eval._ints is not parent._eval._ints
    rng = random.Random(5)
    for _ in range(50):
        toks = [tuple(rng.randint(-9, 9) for _ in range(4)) for _ in range(rng.randint(1, 5))]
        assert view(toks) == fresh(toks)
    assert parent.queries == 50 and view.queries == 50
