"""Failure reasons name the real cause (docs: explanation/algorithm.md#what-a-failure-means).

Pinned: ``--heads 1`` on a two-head model used to fail with only "an additive
constant or a bias is present", never mentioning that the black box may have
more heads than the bound.
"""

from __future__ import annotations

import pytest

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.cli.main import main
from exactlearn.fields import Modular, Rational

TWO_HEADS = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2]), ([[0, 1], [1, 0]], [2, -1])])


@pytest.mark.parametrize("K", [Rational(), Modular()], ids=["rational", "modular"])
@pytest.mark.parametrize("plan", ["paper", "efficient"])
def test_an_under_counted_head_bound_is_named(K, plan):
    for seed in range(3):
        res = learn(Oracle(TWO_HEADS, K), d=2, heads=1, seed=seed, plan=plan)
        assert res.status == "failed"
        assert "more than 1 canonical head" in res.error, res.error


def test_cli_names_the_head_bound(tmp_path, capsys):
    path = tmp_path / "two.json"
    TWO_HEADS.dump(path)
    assert main(["learn", "--model", str(path), "--heads", "1", "--seed", "1"]) == 1
    assert "raise --heads / --max-heads" in capsys.readouterr().out
    assert main(["learn", "--model", str(path), "--heads", "2", "--seed", "1"]) == 0


def test_long_reasons_are_cut_at_a_word_with_an_ellipsis():
    """A box's long error (and the real field's probe, pencil and family texts, all through
    :func:`exactlearn.errors.clip`) used to be cut mid-word with no mark: "... at the decla"."""
    from exactlearn.errors import box_failure, clip, mark_box_failure
    exc = RuntimeError("the declared noise " * 40)
    mark_box_failure(exc, "layer")
    text = box_failure(exc).split(": ", 1)[1]
    assert len(text) <= 300 and text.endswith(" …"), text
    assert text[:-2].split()[-1] in ("the", "declared", "noise"), text      # a whole word
    assert clip("one two three", 12) == "one two …" and clip("one two", 12) == "one two"
