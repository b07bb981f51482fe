"""Biases learned exactly (docs: explanation/biases.md): ``learn(..., bias=True)``.

Scores ``x_i^T W_h x_n + u_h^T x_i`` and an additive constant c, over the rational,
modular (multi-modular and a box fixed to one prime) and symbolic fields.  Every
learned answer is compared with the raw model's own canonical form
(``model.canonical_heads()``: equal (W, u) merged, v summed, zero sums dropped, the
constant carried along), and every count with an independent counter around the box.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.cli.main import main
from exactlearn.errors import ModelError
from exactlearn.fields import Modular, Rational, Real, Symbolic
from exactlearn.generate import random_model
from exactlearn.pipeline.plan import bias_count, draw_bias_plan
from tests.strategies import biased_models, scaled, seeds

FIELDS = {"rational": Rational, "modular": Modular, "symbolic": Symbolic}
RANGES = {"rational": None, "modular": None, "symbolic": 4}


class Counted:
    """The box's own count of the queries it answered and the longest (outside exactlearn)."""

    def __init__(self, box):
        self.box, self.asked, self.longest = box, 0, 0

    def __call__(self, tokens):
        y = self.box(tokens)
        self.asked += 1
        self.longest = max(self.longest, len(tokens))
        return y

    def __getattr__(self, name):
        attr = getattr(self.box, name)
        if name == "over":
            return lambda field: _Sub(attr(field), self)
        return attr


class _Sub(Counted):
    def __init__(self, box, parent):
        super().__init__(box)
        self.parent = parent

    def __call__(self, tokens):
        y = super().__call__(tokens)
        self.parent.asked += 1
        self.parent.longest = max(self.parent.longest, len(tokens))
        return y


def truth_value(model, tokens, base=2):
    """f(X) of a biased model at softmax base ``base`` (the rational field's b^(D s), D = the
    lcm of the W and u denominators), in Fractions, written out from the definition."""
    F = lambda x: Fraction(str(x))
    D = 1
    for h in model.heads:
        for x in [a for row in h.W for a in row] + list(h.u):
            D = D * F(x).denominator // math.gcd(D, F(x).denominator)
    xn = tokens[-1]
    total = F(model.constant)
    for h in model.heads:
        W = [[F(a) for a in row] for row in h.W]
        u, v = [F(a) for a in h.u], [F(a) for a in h.v]
        s = [sum(x[r] * W[r][c] * xn[c] for r in range(len(xn)) for c in range(len(xn)))
             + sum(a * b for a, b in zip(u, x)) for x in tokens]
        w = [Fraction(base) ** int(D * t - D * s[-1]) for t in s]
        total += sum(wi * sum(a * b for a, b in zip(v, x)) for wi, x in zip(w, tokens)) / sum(w)
    return total


def check_run(model, field_name, res, box, bound):
    """A certified answer is the model's canonical form; the counts are the box's own."""
    canonical = model.canonical_heads()
    if res.certified:
        assert res.heads == canonical and res.constant == canonical.constant
        assert [h.u for h in res.heads] == [h.u for h in canonical]
        assert box.longest == res.max_length == 2 * bound + 1
    assert res.queries == box.asked and res.max_length == box.longest
    one = bias_count(res.d, bound)
    if field_name == "modular":
        assert not res.certified or res.queries % one == 0
    else:
        assert res.queries == res.attempts * one


# -- the model and its files ---------------------------------------------------------
def test_biased_model_evaluates_as_its_definition():
    m = MultiHeadAttention([([[1, 0], ["1/2", 1]], [1, 2], ["1/2", -1]), ([[0, 1], [1, 0]], [3, 1])],
                           constant="2/3")
    for X in ([[1, 2], [3, -1], [0, 1]], [[2, 2]], [[1, 0], [1, 0], [-2, 3]]):
        assert m.evaluate(X, Rational()) == truth_value(m, X)


def test_biased_model_evaluates_over_the_real_field():
    m = MultiHeadAttention([([[1, 0], ["1/2", 1]], [1, 2], ["1/2", -1]), ([[0, 1], [1, 0]], [3, 1])],
                           constant="2/3")
    X = [[1, 2], [3, -1], [0, 1]]
    total = 2 / 3
    for h in m.heads:                       # e^s in floats, from the definition
        W = [[float(a) for a in row] for row in h.W]
        u, v = [float(a) for a in h.u], [float(a) for a in h.v]
        s = [sum(x[r] * W[r][c] * X[-1][c] for r in range(2) for c in range(2))
             + sum(a * b for a, b in zip(u, x)) for x in X]
        w = [math.exp(t) for t in s]
        total += sum(wi * sum(a * b for a, b in zip(v, x)) for wi, x in zip(w, X)) / sum(w)
    assert abs(float(m.evaluate(X, Real())) - total) < 1e-12


def test_same_W_different_u_is_not_merged():
    W = [[1, 0], [0, 1]]
    apart = MultiHeadAttention([(W, [1, 0], [1, 0]), (W, [0, 1], [0, 1])])
    merged = MultiHeadAttention([(W, [1, 0], [1, 0]), (W, [0, 1], [1, 0])])
    assert len(apart.canonical_heads()) == 2 and len(merged.canonical_heads()) == 1
    for name, K in FIELDS.items():
        for model, n in ((apart, 2), (merged, 1)):
            res = learn(Oracle(model, K()), d=2, heads=2, seed=3, bias=True, query_range=RANGES[name],
                        retries=2)
            assert res.certified, res.error
            assert len(res.heads) == n and res.heads == model.canonical_heads()


def test_mha2_round_trip_and_mha1_still_reads(tmp_path):
    m = random_model(2, 3, seed=4, merge=True, bias=True)
    path = tmp_path / "m.json"
    m.dump(path)
    obj = json.loads(path.read_text())
    assert obj["format"] == "exactlearn.mha/2" and "constant" in obj and all("u" in h for h in obj["heads"])
    back = MultiHeadAttention.from_file(path)
    assert back == m and back.canonical_heads() == m.canonical_heads()
    old = {"format": "exactlearn.mha/1", "d": 1, "heads": [{"W": [["1/2"]], "v": [2]}]}
    m1 = MultiHeadAttention.from_json(old)
    assert m1.to_json()["format"] == "exactlearn.mha/1" and not m1.bias
    assert all(set(h) == {"W", "v"} for h in m1.to_json()["heads"]) and "constant" not in m1.to_json()
    assert m1.canonical_heads() == (m1.heads[0],) and m1.constant == 0
    for bad in ({**old, "constant": 1},
                {**old, "heads": [{"W": [[1]], "v": [2], "u": [1]}]},
                {"format": "exactlearn.mha/2", "d": 1, "heads": [{"W": [[1]], "v": [2]}], "constant": 0},
                {"format": "exactlearn.mha/2", "d": 1, "heads": [{"W": [[1]], "v": [2], "u": [1]}]},
                {"format": "exactlearn.mha/2", "d": 1, "heads": [{"W": [[1]], "v": [2], "u": [1, 2]}],
                 "constant": 0}):
        with pytest.raises(ModelError):
            MultiHeadAttention.from_json(bad)


def test_tall_biased_v_and_c_over_the_modular_field_are_learned_exactly_over_more_primes():
    """One analysis prime reconstructs |num|, den up to reconstruction_bound(p), about 2^44.
    Taller v and c used to fail ("not supported yet"); a further prime's answers now give v
    and c modulo it (:func:`~exactlearn.pipeline.confirmation.solve_v_plan`, the plan for
    biases), its residues join the CRT, and the run is exact, compared with the model's own
    canonical form, with every prime's queries counted."""
    from exactlearn.algebra.reconstruct import reconstruction_bound
    from gmpy2 import mpq
    for k in (40, 50, 200):
        c = mpq(2 ** k + 1, 7)
        model = MultiHeadAttention([([[1, 0], [0, 2]], [2 ** k, 3], [1, 0]),
                                    ([[0, 1], [1, 0]], [-1, mpq(2 ** k, 5)], [0, 1])],
                                   constant=c, bias=True)
        box = Counted(Oracle(model, Modular()))
        res = learn(box, d=2, heads=2, seed=1, bias=True)
        assert res.queries == box.asked
        assert res.certified and res.exact_over_Q and res.heads == model.canonical_heads()
        assert res.heads.constant == c
        primes = res.multimodular["primes"]
        B = reconstruction_bound(int(primes[0]["p"]))
        if 2 ** k <= B:
            assert len(primes) == 2                    # analysis, then confirmation
        else:
            assert len(primes) >= 3 and primes[-1]["role"] == "confirmation"
            assert sum(p["queries"] for p in primes) == res.queries


def test_a_tall_constant_with_no_canonical_heads_is_learned_exactly():
    """Named degenerate case (helper-62): two biased heads that cancel leave no canonical head,
    only a constant c above one prime's reconstruction bound.  The further prime's residue of c
    is then f((x_0)) itself (V = 0); before, the empty set of heads had no family to solve and
    the run failed as if the primes disagreed."""
    from gmpy2 import mpq
    I2 = [[1, 0], [0, 2]]
    for c in (mpq(2 ** 40 + 1, 9), mpq(2 ** 50 + 1, 9), mpq(-(2 ** 120), 7)):
        model = MultiHeadAttention([(I2, [1, 1], [1, 0]), (I2, [-1, -1], [1, 0])], constant=c,
                                   bias=True)
        assert len(model.canonical_heads()) == 0
        box = Counted(Oracle(model, Modular()))
        res = learn(box, d=2, heads=2, seed=8, bias=True)
        assert res.queries == box.asked
        assert res.certified and res.heads == model.canonical_heads() and res.heads.constant == c


def test_headset_hash_agrees_with_equality():
    """A HeadSet with constant 0 equals the plain tuple of its heads, so it must hash as that
    tuple (it did not: {HeadSet(hs), hs} had two members and a dict keyed by one missed the
    other); a nonzero constant still tells them apart."""
    from exactlearn.model import Head, HeadSet
    h = Head(((1,),), (2,), (3,))
    assert HeadSet([h]) == (h,) and hash(HeadSet([h])) == hash((h,))
    assert len({HeadSet([h]), (h,)}) == 1 and {(h,): "x"}.get(HeadSet([h], bias=True)) == "x"
    assert HeadSet([h], constant=1) != (h,) and len({HeadSet([h], constant=1), (h,)}) == 2


@pytest.mark.parametrize("bad,msg", [
    # an mha/1 (or format-less) file smuggling a bias in a triple head [W, v, u]
    ({"format": "exactlearn.mha/1", "d": 1, "heads": [[[[1]], [2], [5]]]}, "use format 'exactlearn.mha/2'"),
    ({"d": 1, "heads": [[[[1]], [2], [5]]]}, "use format 'exactlearn.mha/2'"),
    # an mha/2 file whose head has no u: a pair [W, v], or "u": null
    ({"format": "exactlearn.mha/2", "d": 1, "heads": [[[[1]], [2]]], "constant": 0}, "triple [W, v, u]"),
    ({"format": "exactlearn.mha/2", "d": 1, "heads": [{"W": [[1]], "v": [2], "u": None}], "constant": 0},
     "u is null"),
    # "constant": null is not the constant 0 (docs: null is refused)
    ({"format": "exactlearn.mha/2", "d": 1, "heads": [{"W": [[1]], "v": [2], "u": [1]}], "constant": None},
     "constant is null"),
])
def test_model_file_bias_smuggled_or_null_is_refused(tmp_path, capsys, bad, msg):
    """docs/reference/model-files.md: mha/1 with a u is refused, every mha/2 head has u, null is
    refused.  On 43b826e+bias these were read silently (u = 0, c = 0, or a biased mha/1)."""
    with pytest.raises(ModelError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        MultiHeadAttention.from_json(bad)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    assert main(["learn", "--model", str(path), "--heads", "1", "--bias"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0] and msg in err[0]


# -- the plan and its count -------------------------------------------------------------
@pytest.mark.parametrize("d,H", [(1, 1), (1, 3), (2, 2), (3, 1), (4, 3), (6, 2)])
def test_plan_count_formula(d, H):
    import random
    plan = draw_bias_plan(d, H, random.Random(d * 10 + H), 5)
    assert plan.count == bias_count(d, H) == 4 * H * d * d + 4 * H * d - 2 * H + 1
    assert len(plan.configs) == 2 * d * d + 2 * d - 1
    assert sum(1 for q in plan.queries if q.k == 0) == 1
    assert max(len(plan.tokens(q)) for q in plan.queries) == 2 * H + 1


@pytest.mark.parametrize("field_name", sorted(FIELDS))
@pytest.mark.parametrize("d,H,kw", [(2, 2, {}), (3, 3, {"merge": True, "cancel": True}),
                                    (2, 4, {"merge": True, "cancel": True}), (1, 2, {})])
def test_seeded_biased_models_are_learned_exactly(field_name, d, H, kw):
    if field_name == "symbolic" and d * H > 4:
        pytest.skip("symbolic: degrees grow fast; covered at d * H <= 4")
    model = random_model(d, H, seed=5, bias=True, **kw)
    assert model.bias and (model.constant != 0 or any(h.biased for h in model.canonical_heads()))
    box = Counted(Oracle(model, FIELDS[field_name]()))
    res = learn(box, d=d, heads=H, seed=1, bias=True, query_range=RANGES[field_name])
    assert res.certified, res.error
    check_run(model, field_name, res, box, H)
    assert res.plan_queries == bias_count(d, H)
    out = res.to_json()
    assert out["constant"] == str(model.constant) and all("u" in h for h in out["heads"])


def test_with_a_bound_H0():
    model = random_model(2, 2, seed=7, bias=True)
    box = Counted(Oracle(model, Rational()))
    res = learn(box, d=2, max_heads=3, seed=2, bias=True)
    assert res.certified, res.error
    check_run(model, "rational", res, box, 3)


# -- hypothesis round trips: one body, every exact field ------------------------------
#: per field: its models (over Q(T) small integer W keep the degrees in T down), the
#: examples and the query range
ROUND_TRIPS = {
    "rational": (biased_models(max_d=3, max_heads=3), 10, None),
    "modular": (biased_models(max_d=3, max_heads=3), 10, None),
    "symbolic": (biased_models(max_d=2, max_heads=2, w_num=2, w_den=1), 5, 3),
}


@pytest.mark.parametrize("field_name", sorted(ROUND_TRIPS))
def test_round_trip(field_name):
    models, examples, query_range = ROUND_TRIPS[field_name]

    @settings(max_examples=scaled(examples), deadline=None)
    @given(models, seeds)
    def round_trip(model, seed):
        box = Counted(Oracle(model, FIELDS[field_name]()))
        res = learn(box, d=model.d, heads=model.H, seed=seed, bias=True, retries=1,
                    query_range=query_range)
        check_run(model, field_name, res, box, model.H)
        if field_name == "modular" and res.certified:
            assert res.exact_over_Q

    round_trip()


def test_a_box_fixed_to_one_prime_is_certified_modulo_p_only():
    model = random_model(2, 2, seed=5, bias=True)
    oracle = Oracle(model, Modular())
    K = oracle.field
    res = learn(lambda tokens: oracle(tokens), d=2, heads=2, field=K, seed=1, bias=True)
    assert res.certified and not res.exact_over_Q
    canonical = model.canonical_heads()
    assert K(res.constant) == K(canonical.constant)                    # a residue modulo p
    assert int(res.multimodular["constant_residue"]) == int(res.constant)
    assert [h.W for h in res.heads] == [h.W for h in canonical]
    assert [h.u for h in res.heads] == [h.u for h in canonical]
    assert res.queries == bias_count(2, 2) == oracle.queries


# -- the negative control and the refusals ----------------------------------------------
@pytest.mark.parametrize("field_name", sorted(FIELDS))
def test_bias_free_plan_on_a_biased_box_fails_explicitly(field_name):
    models = [m for m in (random_model(2, 2, seed=s, bias=True) for s in range(8)) if m.constant != 0]
    assert len(models) >= 4
    for seed, model in enumerate(models[:4]):
        res = learn(Oracle(model, FIELDS[field_name]()), d=2, heads=2, seed=seed,
                    query_range=RANGES[field_name])
        assert res.status == "failed" and res.error and res.heads == ()
        assert "constant" not in res.to_json()


def test_bias_over_the_real_field_needs_the_stable_plan_and_is_refused_with_the_efficient_plan():
    model = random_model(2, 1, seed=1, bias=True)
    with pytest.raises(ValueError, match="needs plan='stable'"):
        learn(Oracle(model, Real()), d=2, heads=1, bias=True)     # exact tokens: the paper plan
    with pytest.raises(ValueError, match="plan='efficient'"):
        learn(Oracle(model, Rational()), d=2, heads=1, bias=True, plan="efficient")


def test_without_bias_the_json_has_no_bias_keys():
    model = random_model(2, 2, seed=1)
    res = learn(Oracle(model, Rational()), d=2, heads=2, seed=1)
    out = res.to_json()
    assert "constant" not in out and all(set(h) == {"W", "v"} for h in out["heads"])
    assert res.constant == 0 and not res.bias


# -- the command line -----------------------------------------------------------------
def _run(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_random_model_bias_and_learn_bias(capsys, tmp_path):
    path = tmp_path / "b.json"
    rc, out, err = _run(capsys, ["random-model", "--d", "2", "--heads", "2", "--seed", "3",
                                 "--bias", "--merge", "--out", str(path)])
    assert rc == 0 and err == ""
    model = MultiHeadAttention.from_file(path)
    assert json.loads(path.read_text())["format"] == "exactlearn.mha/2" and model.bias
    for field in ("rational", "modular", "symbolic"):
        rc, out, err = _run(capsys, ["learn", "--model", str(path), "--heads", "2", "--bias",
                                     "--seed", "1", "--field", field, "--json"]
                            + (["--range", "4"] if field == "symbolic" else []))
        got = json.loads(out)
        assert rc == 0, err
        canonical = model.canonical_heads()
        assert got["constant"] == str(canonical.constant)
        assert [h["u"] for h in got["heads"]] == [[str(x) for x in h.u] for h in canonical]
        assert got["plan_queries"] == bias_count(2, 2)
    rc, out, err = _run(capsys, ["learn", "--model", str(path), "--heads", "2", "--bias", "--seed", "1"])
    assert rc == 0 and "constant: c = " in out and "equal to the model's canonical heads: True" in out


@pytest.mark.parametrize("extra", [["--field", "real"], ["--plan", "efficient"]])
def test_cli_bias_refusals_exit_2(capsys, tmp_path, extra):
    path = tmp_path / "b.json"
    random_model(2, 1, seed=3, bias=True).dump(path)
    rc, out, err = _run(capsys, ["learn", "--model", str(path), "--heads", "1", "--bias"] + extra)
    assert rc == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert ("needs --plan stable" if "real" in extra else "not supported yet") in err


def test_cli_learn_biased_file_without_bias_fails(capsys, tmp_path):
    path = tmp_path / "b.json"
    random_model(2, 1, seed=3, bias=True).dump(path)
    rc, out, err = _run(capsys, ["learn", "--model", str(path), "--heads", "1", "--seed", "1", "--json"])
    got = json.loads(out)
    assert rc == 1 and got["status"] == "failed" and "constant" not in got


# -- proofs-check ----------------------------------------------------------------------
def test_proofs_check_claim_bias_extension():
    from proofs_check.claim import Context, discover
    res = discover()["bias-extension"].run(Context(quick=True, tiny=True, seed=0))
    assert res.status == "verified", res.evidence
    ev = res.evidence
    assert ev["counterexamples"] == 0 and ev["negative_control"]["runs"] >= 3
    assert ev["negative_control"]["certified"] == 0
    assert set(ev["by_field"]) == {"rational", "modular", "symbolic"}
