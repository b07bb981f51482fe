"""A command line that explains itself (docs, "Reference: the command line").

Every option shows its default and its choices; options that do not apply to the chosen
field (or model kind, or demo) are bad input, never silently ignored; the seed used is
always in the JSON, so a run without ``--seed`` can be repeated; ``random-model
--transformer`` writes a file ``exactlearn learn`` learns; heads are numbered from 1 in
messages and outputs alike; ``proofs-check --list`` follows the docs' order of the claims,
and an unknown claim id points to ``--list``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from exactlearn import MultiHeadAttention, OneLayerTransformer
from exactlearn.cli.main import build_parser, main
from proofs_check.cli import build_parser as pc_parser
from proofs_check.cli import main as pc_main

from tests.test_cli import GOOD_MODEL, assert_bad_input, run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def good_file(tmp_path):
    path = tmp_path / "good.json"
    path.write_text(json.dumps(GOOD_MODEL))
    return str(path)


def _actions(parser):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                yield from _actions(sub)
        else:
            yield parser, a


@pytest.mark.parametrize("make", [build_parser, pc_parser], ids=["exactlearn", "proofs-check"])
def test_every_option_shows_its_default(make):
    """Each option's --help line names its default (or it is a flag, or required)."""
    missing = []
    for parser, a in _actions(make()):
        if not a.option_strings or a.required or a.help == argparse.SUPPRESS:
            continue
        if isinstance(a, (argparse._HelpAction, argparse._StoreTrueAction)):
            continue
        text = parser.formatter_class(prog="x")._get_help_string(a) or ""
        if "default" not in text and "required" not in text:
            missing.append(f"{parser.prog} {a.option_strings[0]}")
    assert not missing, missing


def test_field_shows_its_choices(capsys):
    with pytest.raises(SystemExit):
        main(["learn", "--help"])
    out = capsys.readouterr().out
    assert "--field {rational,modular,real,symbolic}" in out
    assert "--plan {paper,efficient,stable}" in out
    assert "(default: rational)" in out


INAPPLICABLE = {
    "--dps on rational": ["--heads", "2", "--dps", "30"],
    "--dps on modular": ["--heads", "2", "--field", "modular", "--dps", "30"],
    "--prime on rational": ["--heads", "2", "--prime", "7"],
    "--prime on real": ["--heads", "2", "--field", "real", "--prime", "7"],
    "--max-primes on rational": ["--heads", "2", "--max-primes", "3"],
    "--noise on rational": ["--heads", "2", "--noise", "1e-9"],
    "--noise-seed without --noise": ["--heads", "2", "--field", "real", "--noise-seed", "3"],
    "--query-scale on modular": ["--heads", "2", "--field", "modular", "--query-scale", "1/2"],
    "--rank without --plan efficient": ["--heads", "2", "--rank", "1"],
}


@pytest.mark.parametrize("name", list(INAPPLICABLE))
def test_inapplicable_options_exit_2(name, good_file, capsys):
    rc, out, err = run(capsys, ["learn", "--model", good_file] + INAPPLICABLE[name])
    assert_bad_input(rc, out, err)
    opt = INAPPLICABLE[name][-2]
    assert opt in err, err


@pytest.mark.parametrize("argv", [
    ["demo", "--dps", "30"], ["demo", "--layer", "2"], ["demo", "--write", "m.json"],
    ["demo", "--symbolic", "--plot", "x.png"],
    ["random-model", "--d", "2", "--heads", "1", "--neurons", "2"],
    ["random-model", "--d", "2", "--heads", "1", "--transformer", "--merge"],
    ["random-model", "--d", "2", "--heads", "1", "--transformer", "--entries", "5"],
], ids=["demo --dps", "demo --layer", "demo --write", "demo --symbolic --plot",
        "--neurons without --transformer", "--transformer --merge", "--transformer --entries"])
def test_inapplicable_demo_and_random_model_options_exit_2(argv, capsys):
    assert_bad_input(*run(capsys, argv))


def test_transformer_file_refuses_attention_only_options(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert main(["random-model", "--transformer", "--d", "2", "--heads", "1", "--seed", "0",
                 "--out", str(path)]) == 0
    for extra in (["--field", "real", "--noise", "1e-20"], ["--snap"], ["--range", "3"]):
        rc, out, err = run(capsys, ["learn", "--model", str(path), "--heads", "1"] + extra)
        assert_bad_input(rc, out, err)
        assert extra[-1 if extra[-1].startswith("--") else -2] in err


def test_the_seed_is_in_the_json_and_repeats_the_run(good_file, capsys):
    # a fresh seed may draw a degenerate plan (a failed run, exit 1): the seed repeats that too
    rc1, out, _ = run(capsys, ["learn", "--model", good_file, "--heads", "2", "--json"])
    first = json.loads(out)
    assert rc1 in (0, 1) and isinstance(first["seed"], int)
    assert (rc1 == 0) == (first["status"] == "certified")
    rc, out, _ = run(capsys, ["learn", "--model", good_file, "--heads", "2", "--json",
                              "--seed", str(first["seed"])])
    again = json.loads(out)
    assert again["seed"] == first["seed"] and rc == rc1
    for key in ("heads", "queries", "query_range", "attempts", "status", "error"):
        assert again[key] == first[key], key
    rc, out, _ = run(capsys, ["learn", "--model", good_file, "--heads", "2"])
    assert re.search(r"^seed: \d+ \(repeat the run with --seed \d+\)$", out, re.M), out


def test_noise_seed_is_in_the_json(good_file, capsys):
    rc, out, err = run(capsys, ["learn", "--model", good_file, "--heads", "2", "--field", "real",
                                "--dps", "40", "--noise", "1e-30", "--seed", "5", "--json"])
    obj = json.loads(out)
    assert (obj["seed"], obj["noise_seed"]) == (5, 5), err


def test_random_model_writes_its_seed(capsys):
    rc, out, _ = run(capsys, ["random-model", "--d", "2", "--heads", "2"])
    obj = json.loads(out)
    assert rc == 0 and isinstance(obj["seed"], int)
    rc, out2, _ = run(capsys, ["random-model", "--d", "2", "--heads", "2", "--seed", str(obj["seed"])])
    assert out2 == out                               # the same file again


@pytest.mark.parametrize("field", ["rational", "real"])
def test_random_transformer_file_is_learned(field, tmp_path, capsys):
    path = tmp_path / "t.json"
    rc, out, err = run(capsys, ["random-model", "--transformer", "--d", "2", "--heads", "2",
                                "--seed", "1", "--out", str(path)])
    assert rc == 0 and out == "" and err == ""
    model = OneLayerTransformer.from_file(path)
    assert (model.d, model.H, model.r) == (2, 2, 2)
    extra = ["--dps", "40"] if field == "real" else []
    rc, out, err = run(capsys, ["learn", "--model", str(path), "--heads", "2", "--field", field,
                                "--seed", "0", "--json"] + extra)
    obj = json.loads(out)
    assert rc == 0 and obj["status"] == "certified", (obj.get("error"), err)
    assert obj["seed"] == 0 and obj["model"]["format"] == "exactlearn.transformer/1"


def test_heads_are_numbered_from_one_in_messages_and_outputs(tmp_path, capsys):
    """A bad second head is "head 2" in the message, as it is in the summary's listing."""
    bad = {"d": 2, "heads": [GOOD_MODEL["heads"][0], {"W": [[1, 0], [0, 1]], "v": [1]}]}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(bad))
    rc, out, err = run(capsys, ["learn", "--model", str(path), "--heads", "2"])
    assert_bad_input(rc, out, err)
    assert "head 2: v" in err, err
    good = tmp_path / "g.json"
    good.write_text(json.dumps(GOOD_MODEL))
    rc, out, _ = run(capsys, ["learn", "--model", str(good), "--heads", "2", "--seed", "0"])
    assert "  head 1: W" in out and "  head 2: W" in out and "head 0" not in out


def test_demo_numbers_heads_as_its_result(capsys):
    """Steps 4-6 of the walk-through name each head by its number in the result."""
    rc, out, _ = run(capsys, ["demo"])
    assert rc == 0
    step4 = out.split("4. Poles")[1].split("5. Matching")[0]
    step6 = out.split("6. Solve")[1].split("7. Certificate")[0]
    heads = dict(re.findall(r"head (\d+): W = (\[\[.*?\]\])", step6))
    # the pole of head n has rho = 2^(e^T W_n x): recompute it from step 6's W
    x, e = [list(map(int, re.search(rf"{k} = \[([-\d, ]+)\]", out).group(1).split(",")))
            for k in ("x", "e")]
    for n, log in re.findall(r"head (\d+): rho = \S+ \(= 2\^\S+, so e\^T W x = (-?\d+)\)", step4):
        W = [[__import__("fractions").Fraction(c) for c in row] for row in json.loads(heads[n].replace("'", '"'))]
        assert sum(e[i] * W[i][j] * x[j] for i in range(2) for j in range(2)) == int(log), n


def test_demo_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "family.png"
    rc, out, err = run(capsys, ["demo", "--plot", str(path)])
    assert rc == 0, err
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(path) in out


def _docs_claim_order():
    text = (ROOT / "docs" / "explanation" / "claims.md").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("The claim ids, in order:"))
    return re.findall(r"`([a-z-]+)`", line)


def test_list_follows_the_docs_order(capsys):
    rc = pc_main(["--list"])
    out = capsys.readouterr().out
    ids = [ln.split(":")[0] for ln in out.splitlines()]
    assert rc == 0 and ids == _docs_claim_order()


def test_unknown_claim_id_points_to_list(capsys):
    rc = pc_main(["--only", "exact-recovery", "no-such-claim"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "no-such-claim" in err and "--list" in err


@pytest.mark.parametrize("argv", [["--tiny", "--scale", "3"], ["--quick", "--scale", "2"],
                                  ["--tiny", "--scheduler-timeout", "3"]],
                         ids=["--scale with --tiny", "--scale with --quick",
                              "--scheduler-timeout without --scheduler"])
def test_proofs_check_refuses_inapplicable_options(argv, capsys):
    rc = pc_main(argv + ["--only", "query-length"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1 and argv[1] in err
