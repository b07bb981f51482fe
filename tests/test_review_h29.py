"""Hostile-review regressions (h29) for the API redesign and ``noise="auto"`` with vector
outputs (docs: reference/cli.md#limits, explanation/biases.md#vector-outputs)."""

from __future__ import annotations

import pytest

from exactlearn import learn


class NeverAsked:
    """A box that counts its calls independently of the learner and answers none."""

    def __init__(self):
        self.calls = 0

    def __call__(self, tokens):
        self.calls += 1
        raise AssertionError("the box was asked before the sizes were checked")


def test_noise_auto_with_huge_outputs_is_refused_before_any_query():
    """d = 1, H = 64, m = 65536, float32 tokens: the measurement keeps 5,616 queries of
    65,536 answers each (23.6 GB at 64 bytes a value, past MAX_PLAN_BYTES) although the plan
    itself fits; it is a one-line ValueError before the box is asked."""
    from exactlearn.limits import MAX_PLAN_BYTES, PLAN_BYTES_PER_QUERY
    from exactlearn.strategies.real.eta import DRAWS, PERMUTATIONS, SCALES, shape_lengths
    H, m = 64, 65536
    queries = len(SCALES) * DRAWS * (1 + PERMUTATIONS + 2) * len(shape_lengths(H))
    assert queries * m * PLAN_BYTES_PER_QUERY > MAX_PLAN_BYTES      # independent arithmetic
    box = NeverAsked()
    with pytest.raises(ValueError, match=r"noise measurement: \d+ bytes.*MAX_PLAN_BYTES") as ei:
        learn(box, d=1, heads=H, field="real", tokens="float32", noise="auto", outputs=m)
    assert "\n" not in str(ei.value)
    assert box.calls == 0


def test_noise_auto_with_outputs_within_the_limits_is_not_refused():
    """The same measurement with few outputs fits: the box is asked (and here fails)."""
    box = NeverAsked()
    res = None
    try:
        res = learn(box, d=1, heads=64, field="real", tokens="float32", noise="auto", outputs=2)
    except AssertionError:
        pass
    assert box.calls >= 1, res
