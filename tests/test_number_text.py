"""Numbers written as text (model files, CLI values): one grammar, ASCII digits only.

``p/q`` (optional signs) or a decimal with an optional exponent, surrounding spaces allowed.
Python's ``int()``/``Fraction()`` also read ``1_000``, ``١٢`` (Arabic-Indic digits) and
``1 / 2``; those are refused with a one-line message naming the value and the grammar."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from gmpy2 import mpq

from exactlearn.fields.base import as_mpq


@pytest.mark.parametrize("text, value", [
    ("0.1", mpq(1, 10)), ("-3/6", mpq(-1, 2)), ("1/-2", mpq(-1, 2)), ("+1/2", mpq(1, 2)),
    (".5", mpq(1, 2)), ("5.", mpq(5)), ("1.5e3", mpq(1500)), ("-.5e+2", mpq(-50)),
    (" 7 ", mpq(7)), ("1e-3", mpq(1, 1000))])
def test_the_grammar_reads_integers_fractions_and_decimals_exactly(text, value):
    assert as_mpq(text) == value


@pytest.mark.parametrize("text", ["1_000", "\u0661\u0662", "\uff11", "1 / 2", "1/2_0", "0x10",
                                  ".", "1e", "e5", "1e1_0", "--1", "1/2/3"])
def test_other_spellings_python_would_read_are_refused(text):
    with pytest.raises(ValueError, match="not a rational number.*ASCII digits"):
        as_mpq(text)


def test_a_model_file_with_an_underscored_entry_exits_2_naming_it(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"format": "exactlearn.mha/1", "d": 1,
                                "heads": [{"W": [["1_000"]], "v": ["1"]}]}))
    out = subprocess.run([sys.executable, "-m", "exactlearn.cli", "learn", "--model", str(path),
                          "--heads", "1"], capture_output=True, text=True)
    assert out.returncode == 2, out
    assert out.stderr.count("\n") == 1 and "1_000" in out.stderr and "Traceback" not in out.stderr
