"""Hostile review of vector outputs, the float32 path and the least-squares driver (h23):
each test is named after the degenerate case it pins down.  Truths are computed here from
the raw model, counts from a counter around the box."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.fields import Rational, Real

MODEL = MultiHeadAttention([([[1, 0], [0, -1]], [[1, 2], [0, 0], [3, -1]]),
                            ([[0, 1], [2, 0]], [[0, 1], [1, 1], [-1, 0]])], outputs=3)


class Counted:
    """A box of 3 outputs from MODEL over Q, the answers passed through ``answer``."""

    def __init__(self, answer):
        self.oracle = Oracle(MODEL, Rational())
        self.answer, self.asked = answer, 0

    def __call__(self, tokens):
        self.asked += 1
        ys = [Fraction(int(y.numerator), int(y.denominator)) for y in self.oracle(tokens)]
        return self.answer(ys)


class CountedBatch(Counted):
    def batch(self, queries):
        return [self(q) for q in queries]


@pytest.mark.parametrize("kind", [Counted, CountedBatch])
def test_an_output_outside_the_field_is_a_counted_query(kind):
    """One output not in the field (a float over Q): the query was answered, so it is
    counted -- as for a scalar box, whose _record counts it before converting."""
    box = kind(lambda ys: [ys[0], float(ys[1]), ys[2]])
    res = learn(box, d=2, heads=2, field=Rational(), seed=0, outputs=3)
    assert res.status == "failed" and "not in the rational field" in res.error
    assert box.asked >= 1 and res.queries == box.asked


def test_a_nan_on_one_output_is_a_counted_query():
    oracle, asked = Oracle(MODEL, Real(dps=30)), []

    def box(tokens):
        asked.append(1)
        ys = oracle(tokens)
        return [float(ys[0]), float("nan"), float(ys[2])]
    res = learn(box, d=2, heads=2, field=Real(dps=30), seed=0, outputs=3, noise=1e-9)
    assert res.status == "failed" and "not a finite real number" in res.error
    assert asked and res.queries == len(asked)
