"""Pinned from helper-86's bad-input sweep and helper-85's third-party review (5 Dec 2026):
each refusal is one line, before any query and any large allocation.  Each test failed
before its fix."""

from __future__ import annotations

import json
import resource

import numpy as np
import pytest
from gmpy2 import next_prime

from exactlearn.cli.main import main


def _coprime_model(path, d, digits):
    """One head, every W entry 1/p for a distinct prime p of about ``digits`` digits: the lcm
    of the denominators has d^2 times ``digits`` digits."""
    p, W = 10 ** (digits - 1), []
    for _ in range(d):
        row = []
        for _ in range(d):
            p = next_prime(p)
            row.append(f"1/{p}")
        W.append(row)
    path.write_text(json.dumps({"format": "exactlearn.mha/1", "d": d,
                                "heads": [{"W": W, "v": ["1"] * d}]}))


def test_a_model_whose_common_denominator_explodes_is_refused_at_once(tmp_path, capsys):
    """d = 12 with 144 coprime 400-digit denominators: their lcm would have about 57,600
    digits (the sweep's d = 40 with 4,000-digit ones ran 7 minutes to 2.9 GB before any
    query); it is refused as it passes MAX_SCALE_DIGITS, exit 2, one line."""
    path = tmp_path / "lcm.json"
    _coprime_model(path, 12, 400)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert main(["learn", "--model", str(path), "--heads", "1", "--seed", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "MAX_SCALE_DIGITS" in err, err
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000   # KB


def test_a_common_denominator_within_the_limit_is_learned(tmp_path, capsys):
    path = tmp_path / "ok.json"
    _coprime_model(path, 2, 4)                       # four 4-digit primes: D of 16 digits
    assert main(["learn", "--model", str(path), "--heads", "1", "--seed", "1", "--field", "modular",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "certified"


def test_a_torch_readout_that_requires_grad_is_taken():
    """helper-85: ``readout=head.weight[0]`` raised torch's "Can't call numpy() on Tensor that
    requires grad" through the adapter; it is detached and read."""
    torch = pytest.importorskip("torch")
    from exactlearn.adapters import torch as ta
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=torch.float64).eval()
    w = torch.nn.Linear(4, 1, dtype=torch.float64).weight[0]
    assert w.requires_grad
    box = ta.black_box(mha, readout=w)
    assert np.array_equal(box.readout, w.detach().numpy())


@pytest.mark.parametrize("make, match", [
    (lambda: __import__("exactlearn").Rational(base=2.5), "the base must be an integer >= 2, got 2.5"),
    (lambda: __import__("exactlearn").Rational(max_bits=-1), "max_bits must be an integer >= 1"),
    (lambda: __import__("exactlearn").Rational(scale="2x"), "scale D must be an integer >= 1, got '2x'"),
    (lambda: __import__("exactlearn").Rational(via_modular="no"), "via_modular must be True or False"),
    (lambda: __import__("exactlearn").Rational(base=10 ** 10000), "more than 4000 digits: about 2"),
    (lambda: __import__("exactlearn").Rational(scale="1" * 4400), "scale D has more than 4000 digits"),
    (lambda: __import__("exactlearn").Rational(scale=10 ** 20000), "more than 16000 digits: about 2"),
    (lambda: __import__("exactlearn").Modular(p=10 ** 5000 + 1), "the prime p has more than 4000 digits"),
])
def test_field_arguments_are_checked_in_one_line(make, match):
    """helper-86: Rational(base=2.5) became base 2, max_bits=-1 was taken and failed after a
    whole plan, and a huge int leaked Python's 'Exceeds the limit (4300 digits)' message."""
    with pytest.raises(ValueError, match=match.replace("(", r"\(")) as info:
        make()
    assert "\n" not in str(info.value) and "4300" not in str(info.value)


def test_a_model_entry_given_as_a_huge_number_is_refused_before_any_query():
    """helper-86: MultiHeadAttention([([[10**100000]], [1])]) was accepted and learn() leaked
    Python's integer-conversion error after two queries; as text it was refused."""
    from exactlearn import MultiHeadAttention
    from exactlearn.errors import ModelError
    from fractions import Fraction
    from gmpy2 import mpq
    for x in (10 ** 5000, Fraction(1, 10 ** 5000)):
        with pytest.raises(ModelError, match="W row 1 entry 1: more than 4000 digits"):
            MultiHeadAttention([([[x]], [1])])
    with pytest.raises(ModelError, match="constant entry 1: more than 4000 digits"):
        MultiHeadAttention([([[1]], [1])], constant=10 ** 5000)
    assert MultiHeadAttention([([[10 ** 3999]], [1])]).heads[0].W[0][0] == 10 ** 3999
    largest = 10 ** 4000 - 1                        # 4,000 digits exactly: taken
    assert MultiHeadAttention([([[1]], [mpq(1, largest)])]).heads[0].v[0] == mpq(1, largest)
    with pytest.raises(ModelError, match="more than 4000 digits"):
        MultiHeadAttention([([[1]], [mpq(1, largest + 1)])])


@pytest.mark.parametrize("text, match", [
    ('{"d":1,"heads":[{"W":[[1]],"W":[[2]],"v":[1]}]}', "key 'W' is given twice"),
    ('{"format":"exactlearn.mha/3","d":1,"outputs":1,"bias":false,"constant":[5],'
     '"heads":[{"W":[[1]],"v":[[1]],"u":[0]}]}', '"bias": false, but the constant is not zero'),
    ('{"format":"exactlearn.mha/3","d":1,"outputs":1,"bias":false,"constant":[0],'
     '"heads":[{"W":[[1]],"v":[[1]],"u":[3]}]}', '"bias": false, but head 1\'s u is not zero'),
    ("[" + ",".join(["{}"] * 40000) + "]", "more than 32768 JSON objects"),
])
def test_model_files_that_say_two_things_or_hold_too_many_objects_are_refused(
        tmp_path, capsys, text, match):
    """helper-86: a key given twice was read as its last value (W = [[2]] learned), a vector
    file with "bias": false and a nonzero u or constant was taken and failed after queries,
    and 2.6 million empty objects took 733 MB before "missing key 'd'"."""
    path = tmp_path / "m.json"
    path.write_text(text)
    assert main(["learn", "--model", str(path), "--heads", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and match in err, err


@pytest.mark.parametrize("case", ["vector", "no heads", "write", "empty write", "dps"])
def test_demo_refuses_before_any_output(tmp_path, capsys, case):
    """helper-86: each printed part of the walk-through (or the MiniLM layer's description)
    and then refused, in API wording for the vector file ("pass outputs=3")."""
    path = tmp_path / "m.json"
    if case == "vector":
        assert main(["random-model", "--d", "2", "--heads", "2", "--seed", "1", "--outputs", "3",
                     "--out", str(path)]) == 0
        argv, says = ["demo", "--model", str(path)], "has 3 outputs (exactlearn.mha/3)"
    elif case == "no heads":
        path.write_text('{"d": 2, "heads": []}')
        argv, says = ["demo", "--model", str(path)], "the model file has no heads"
    elif case == "empty write":
        argv, says = ["demo", "--minilm", "--write", ""], "--write needs a file name"
    elif case == "write":
        argv = ["demo", "--minilm", "--write", str(tmp_path / "none" / "x.json")]
        says = "is not a writable folder"
    else:
        argv, says = ["demo", "--minilm", "--dps", "0"], "--dps must be >= 20, got 0"
    capsys.readouterr()
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and says in err, (out, err)


def test_wrong_types_get_one_line_messages_before_any_query():
    """helper-86: AttributeError / IndexError from inside, and a two-line TypeError from
    random for a numpy seed (numpy ints were taken for d, heads and verify already)."""
    from exactlearn import MultiHeadAttention, Oracle, Rational, learn
    from exactlearn.errors import ModelError
    model = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2])])
    for field, says in ((Rational, "the class Rational: call it, Rational()"), (5, "a int")):
        with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
            learn(Oracle(model, Rational()), d=2, heads=1, field=field)
    for args, says in (((model, "rational"), "field object"), (("m.json", Rational()), "from_file")):
        with pytest.raises(TypeError, match=says):
            Oracle(*args)
    with pytest.raises(ModelError, match="heads must be a list of heads"):
        MultiHeadAttention("abc")
    box = Oracle(model, Rational())
    with pytest.raises(ValueError, match="seed must be an integer"):
        learn(box, d=2, heads=1, seed=[1])
    assert box.queries == 0
    a = learn(Oracle(model, Rational()), d=2, heads=1, seed=np.int64(3))
    b = learn(Oracle(model, Rational()), d=2, heads=1, seed=3)
    assert a.certified and a.heads == b.heads and a.queries == b.queries


@pytest.mark.parametrize("argv, says", [
    (["--seed", "1", "--seed", "2", "--list"], "given twice"),
    (["--plots", "", "--tiny"], "--plots needs a name"),
    (["--report", " ", "--tiny"], "--report needs a name"),
    (["--scheduler", "tcp://127.0.0.1:1", "--scheduler-timeout", "nan"], "(0, 3600]"),
    (["--workers", "1000000", "--tiny"], "MAX_LOCAL_WORKERS"),
    (["--scale", "1000000000000"], "--scale must be 1..1000"),
])
def test_proofs_check_options_are_checked_before_any_campaign(capsys, argv, says):
    """helper-86: each was accepted (an option given twice kept its last value, the empty
    names wrote nowhere, a nan timeout reached Dask as "KeyError: 'Invalid time unit'",
    a million workers and a 10^12 scale ran)."""
    from proofs_check.cli import main as proofs_main
    assert proofs_main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and says in err, err


@pytest.mark.parametrize("argv, says", [
    (["random-model", "--d", "\u0663", "--heads", "1"], "--d must be an integer in ASCII digits"),
    (["random-model", "--d", "2_0", "--heads", "1"], "--d must be an integer in ASCII digits"),
    (["random-model", "--d", "2", "--heads", "1", "--merge"], "--merge needs --heads 2 or more"),
    (["random-model", "--d", "2", "--heads", "1", "--cancel"], "--cancel needs --heads 2 or more"),
    (["demo", "--minilm", "--layer", "\uff11"], "--layer must be an integer in ASCII digits"),
])
def test_integer_options_read_ascii_digits_and_random_model_flags_need_two_heads(
        capsys, argv, says):
    """helper-86: argparse's int() took Arabic-Indic digits and 2_0 (model files refuse
    them), and --merge / --cancel with one head were silently ignored."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and says in err, err


def test_a_float_layer_learned_without_noise_says_how_to_declare_it():
    """helper-85: a float64 torch layer learned with no noise= failed after 6,990 queries on
    "the pencil start needs the polish ..." without a word on noise=."""
    torch = pytest.importorskip("torch")
    from exactlearn import learn
    from exactlearn.adapters import torch as ta
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(4, 2, bias=False, batch_first=True,
                                      dtype=torch.float64).eval()
    res = learn(ta.black_box(mha, readout=np.array([1.0, -0.5, 0.25, 2.0])), d=4, heads=2,
                field="real", tokens="float64", seed=0, retries=0)
    assert not res.certified and "no noise= was declared" in res.error
    assert "noise='auto'" in res.error


def test_a_transformer_file_numbers_its_b_rows_from_one(tmp_path, capsys):
    """helper-86: "ffn: B row 0 ..." while every other message numbers from 1."""
    path = tmp_path / "t.json"
    assert main(["random-model", "--transformer", "--d", "2", "--heads", "1", "--seed", "1",
                 "--out", str(path)]) == 0
    obj = json.loads(path.read_text())
    obj["ffn"]["B"][0] = obj["ffn"]["B"][0][:1]
    path.write_text(json.dumps(obj))
    capsys.readouterr()
    assert main(["learn", "--model", str(path), "--heads", "1"]) == 2
    assert "ffn: B row 1 " in capsys.readouterr().err


def test_what_the_stricter_checks_must_still_take():
    """helper-88's review of the checks above: each of these worked at 25921fd and broke
    (Rational(base=np.int64(3)) crashed in gmpy2.log2, the real field and v denominators hit
    the exact fields' scale limit, a list of tensors that require grad raised torch's error)."""
    from fractions import Fraction
    from gmpy2 import mpq
    from exactlearn import MultiHeadAttention, Modular, Oracle, Rational, Real, learn
    assert Rational(base=np.int64(3)).base == 3 and Modular(p=np.int64(101)).p == 101
    assert Rational(scale=6.0).scale == Rational(scale=Fraction(6)).scale == 6
    assert Rational(scale="6").scale == 6 and Rational(via_modular=np.bool_(False)).via_modular is False
    ps = [10 ** 1199 + j for j in range(16)]     # nearly coprime: an lcm of ~19,000 digits
    wide = MultiHeadAttention([([[mpq(1, ps[0]), mpq(1, ps[1])], [mpq(1, ps[2]), 0]], [1, 2])]
                              + [([[mpq(1, q), 0], [0, 0]], [1, 0]) for q in ps[3:]])
    assert Oracle(wide, Real(dps=30))([(1, 2), (3, 4)]) is not None   # D of ~19,000 digits
    tall_v = MultiHeadAttention([([[0, 0], [0, 0]], [mpq(1, q) for q in ps[:2]])] * 8)
    assert Oracle(tall_v, Rational())([(1, 1)]) is not None           # v's denominators
    box = Oracle(MultiHeadAttention([([[1, 0], [0, 1]], [1, 2])]), Rational())
    assert learn(box, d=2, heads=1, seed=bytearray(b"x")).certified
    torch = pytest.importorskip("torch")
    from exactlearn.adapters.common import readout_vector
    w = torch.nn.Linear(2, 1).weight[0]
    assert readout_vector([w[0], w[1]], 2).tolist() == w.detach().double().tolist()
    assert readout_vector(torch.ones(2, dtype=torch.bfloat16), 2).tolist() == [1.0, 1.0]
