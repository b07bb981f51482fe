"""The oracle evaluates the model as written, never its canonical form (SPEC §4).

Pinned regressions: the oracle used to take D from the *canonical* heads and,
when a cancelling group carried finer W denominators, quietly evaluate
``canonical_heads()`` instead of the model -- so every check of the canonical
form compared the canonical form with itself.
"""

from __future__ import annotations

import pytest

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.fields import ExactnessError, Modular, Rational
from exactlearn.model import structure

from reference import as_set, reference_canonical

#: A plain head plus a cancelling pair whose W has a denominator (3) the plain head lacks.
CANCELLING_THIRDS = MultiHeadAttention([
    ([[1, 0], [0, -1]], [1, 2]),
    ([["1/3", 0], [1, 0]], [1, -1]),
    ([["1/3", 0], [1, 0]], [-1, 1]),
])

#: Two heads that merge into one (W with denominator 2), and a plain head.
MERGING_HALVES = MultiHeadAttention([
    ([["1/2", 1], [0, 0]], [1, 2]),
    ([[0, 1], [1, 1]], [2, 1]),
    ([["1/2", 1], [0, 0]], [2, -7]),
])


def test_auto_scale_clears_every_raw_head():
    assert CANCELLING_THIRDS.scale() == 3
    assert Oracle(CANCELLING_THIRDS, Rational()).field.scale == 3
    assert Oracle(CANCELLING_THIRDS, Modular()).field.scale == 3


@pytest.mark.parametrize("K", [Rational(scale=1), Modular(scale=1)], ids=["rational", "modular"])
def test_a_scale_that_cannot_realise_a_raw_head_is_refused(K):
    """No silent substitution of the canonical heads (they would realise at D = 1)."""
    with pytest.raises(ExactnessError, match="head 2"):
        Oracle(CANCELLING_THIRDS, K)
    with pytest.raises(ExactnessError, match="does not clear"):
        CANCELLING_THIRDS.evaluate([(1, 2)], K)


def _raw_sum(model, tokens, K):
    """f(X) head by head, each raw head a one-head model: the sum over the raw heads."""
    total = K.zero
    for h in model.heads:
        total = total + MultiHeadAttention([h], d=model.d).evaluate(tokens, K)
    return total


@pytest.mark.parametrize("model", [CANCELLING_THIRDS, MERGING_HALVES], ids=["cancel", "merge"])
def test_oracle_is_the_sum_of_its_raw_heads(model):
    K = Rational(scale=model.scale())
    o = Oracle(model, K)
    for q in ([(1, 2)], [(3, -1), (3, -1), (0, 2)], [(1, 1), (-2, 5), (4, 0)]):
        assert o(q) == _raw_sum(model, q, K)


@pytest.mark.parametrize("model", [CANCELLING_THIRDS, MERGING_HALVES], ids=["cancel", "merge"])
@pytest.mark.parametrize("K", [Rational(), Modular()], ids=["rational", "modular"])
def test_learned_heads_equal_the_canonical_form_computed_apart(model, K):
    """The raw model is the black box; the expected answer is canonicalised apart, by
    tests/reference.py (not by ``canonicalize``, which the learner's output passes through)."""
    expected = reference_canonical(model)
    assert len(expected) < model.H and structure(model.heads) != (0, 0, 0)   # not canonical
    res = learn(Oracle(model, K), d=2, max_heads=model.H, seed=3, retries=2)
    assert res.status == "certified", res.error
    assert as_set(res.heads) == expected
    assert res.heads == model.canonical_heads()
