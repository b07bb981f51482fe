"""Hostile review (helper-69, 4 Dec 2026): arguments as numpy gives them, messages that name
the parameter, the paper plan refused with float tokens before any query, a box that writes
into its input lists, and the note of a batch() that raises.  Each test failed before its
fix."""

from __future__ import annotations

import numpy as np
import pytest

from exactlearn import MultiHeadAttention, Oracle, learn
from exactlearn.fields import Rational

MODEL = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [2, 0]], [0, 1])])


def never_asked(tokens):
    raise AssertionError("the box was asked")


def test_numpy_integers_are_sizes():
    """``d=np.int64(2)`` was refused as "d must be a positive integer, got np.int64(2)"."""
    a = learn(Oracle(MODEL, Rational()), d=2, heads=2, seed=1)
    b = learn(Oracle(MODEL, Rational()), d=np.int64(2), heads=np.int32(2), seed=1)
    assert b.certified and b.heads == a.heads == MODEL.canonical_heads()
    assert b.queries == a.queries and b.to_json()["d"] == 2


@pytest.mark.parametrize("kw, message", [
    (dict(noise=5e-14, noise_rel=-1e-3), "noise_rel must be >= 0, got -0.001"),
    (dict(noise=5e-14, noise_rel=float("nan")), "noise_rel must be a finite number >= 0"),
    (dict(noise=5e-14, plan="paper"), "tokens='float64' needs plan='stable'")])
def test_real_field_options_are_refused_before_any_query_naming_the_parameter(kw, message):
    """noise_rel=-1e-3 said "noise must be >= 0, got Fraction(-1152921504606847, ...)" once the
    run started; plan='paper' with float tokens failed after its probe ("the scale probe
    failed ..."): the paper plan's tokens are never float numbers."""
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        learn(never_asked, d=2, heads=2, field="real", tokens="float64", seed=0, **kw)


def test_a_numpy_float32_noise_is_its_exact_value():
    """``noise=np.float32(1e-5)`` was refused as "not an exact rational number"."""
    from exactlearn.fields import Real
    from exactlearn.noise import noise_bound
    K = Real(dps=30)
    assert noise_bound(K, np.float32(1e-5)) == noise_bound(K, float(np.float32(1e-5)))
    assert noise_bound(K, np.float64(0.25)) == K("1/4")
    assert noise_bound(K, np.int64(2 ** 60 + 1)) == K(2 ** 60 + 1)     # an integer stays exact


def test_a_box_that_writes_into_its_input_lists_is_learned_as_any_other():
    """tokens='float' handed the box the adapter's cached rows: a box that zeroed its input
    after computing corrupted every later query with those tokens (a failure after 3287
    queries where tokens='float64' certified in 282)."""
    rng = np.random.default_rng(0)
    W, v = rng.normal(0, 0.5, (2, 4, 4)), rng.normal(0, 0.5, (2, 4))

    def layer(X):
        X = np.asarray(X, dtype=float)
        s = np.einsum("ic,hcr,r->hi", X, W, X[-1])
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return float((p * np.einsum("hc,ic->hi", v, X)).sum())

    def vandal(X):
        y = layer(X)
        for row in X:                   # the box's own business, after it answered
            for j in range(len(row)):
                row[j] = 0.0
        return y

    kw = dict(d=4, heads=2, field="real", noise=5e-14, noise_rel=1e-15, seed=0)
    clean = learn(layer, tokens="float", **kw)
    got = learn(vandal, tokens="float", **kw)
    assert clean.certified and got.certified, got.error
    assert got.queries == clean.queries and got.heads == clean.heads
