"""float32 layers over the real field (issue 22 section 3; docs: howto/float-black-box.md,
explanation/real-field.md#the-stable-plan-for-float-black-boxes).

Pinned at 9c1701d: a float32 numpy layer with d = 6, H = 3 failed ("configurations could not
be resolved") with a declared and with a measured eta; ``noise='auto'`` missed the rounding
of a float32 box's scores (no reordering changes it); the failure of a coarse box never named
its precision; and a Python caller was told to "raise --heads / --max-heads".
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from gmpy2 import mpq

from exactlearn import MultiHeadAttention, Oracle, estimate_noise, learn
from exactlearn.fields import Rational, Real
from exactlearn.model import Head, canonicalize
from exactlearn.strategies.real.eta import shape_lengths
from exactlearn.strategies.real.learn import max_parameter_error
from exactlearn.strategies.real.ratio import dyadic
from float_layers import NumpyAttention


def _truth(box):
    """The layer's own weights as exact rationals, in canonical form (apart from the learner)."""
    return canonicalize([Head(tuple(tuple(mpq(a) for a in r) for r in W), tuple(mpq(a) for a in v))
                         for W, v in box.exact_heads()])


@pytest.mark.slow
def test_a_float32_layer_with_three_heads_is_certified_with_a_covering_bound():
    box = NumpyAttention.from_seed(6, 3, 0, dtype=np.float32)
    K = Real(dps=30)
    res = learn(box, d=6, heads=3, field=K, tokens="float32", noise="auto", seed=0, retries=0)
    assert res.status == "certified", res.error
    err, _ = max_parameter_error(res.heads, _truth(box), K)
    assert err <= 1e-3
    assert err <= res.error_bound
    assert res.real_detail["estimate"] == "polish"


class _Float32Scores:
    """Scores x_i^T W_h x_n rounded to float32, everything else in float64: its answers barely
    change under reordering, yet err by the scores' rounding (about 1e-5 here)."""

    def __init__(self, d=3, H=2, seed=0):
        rng = np.random.default_rng(seed)
        self.W = rng.normal(0, 2.0, (H, d, d)).astype(np.float32)
        self.v = rng.normal(0, 1.0, (H, d))

    def value(self, X, dt):
        X = np.asarray(X, dtype=np.float64)
        s = np.einsum("ic,hcr,r->hi", X.astype(dt), self.W.astype(dt), X[-1].astype(dt))
        s = s.astype(np.float64)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return float((p * (X @ self.v.T).T).sum())

    def __call__(self, X):
        return self.value(X, np.float32)


def test_noise_auto_measures_the_rounding_of_a_float32_box_s_scores():
    box = _Float32Scores()
    est = estimate_noise(box, 3, 2, tokens="float32", seed=0)
    rnd = random.Random(5)
    worst = 0.0
    for f in (2, 8):                    # the plan's shapes at two of the measured scales
        for k, m in shape_lengths(2):
            for _ in range(4):
                x = tuple(f * a for a in dyadic(rnd.gauss(0, 0.6) for _ in range(3)))
                e = tuple(f * a for a in dyadic(rnd.gauss(0, 0.6) for _ in range(3)))
                a = tuple(p + q for p, q in zip(x, e))
                X = np.array([[float(t) for t in tok] for tok in [a] * k + [x] * m])
                y = box(X)
                worst = max(worst, abs(y - box.value(X, np.float64)) /
                            (est.noise + est.noise_rel * abs(y)))
    assert worst <= 1, worst
    assert "grid step" in est.method
    assert est.queries == est.groups * 6        # each query, 3 reorderings, 2 grid steps


def test_a_float32_box_declared_below_its_rounding_fails_naming_precision_and_keywords():
    box = NumpyAttention.from_seed(2, 1, 0, dtype=np.float32)
    res = learn(box, d=2, heads=1, field=Real(dps=30), tokens="float32", noise=1e-9,
                noise_rel=1e-9, seed=0, retries=0)
    assert res.status == "failed"
    assert "below a float32 box's rounding" in res.error, res.error
    assert "declare a larger noise=, or use noise='auto'" in res.error
    assert "raise heads= / max_heads=" in res.error
    assert "--" not in res.error.replace(" -- ", " ")     # no command-line flag


def test_python_failures_name_keywords_not_flags():
    two = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2]), ([[0, 1], [1, 0]], [2, -1])])
    res = learn(Oracle(two, Rational()), d=2, heads=1, seed=1)
    assert res.status == "failed"
    assert "raise heads= / max_heads=" in res.error, res.error
    assert "--heads" not in res.error and "--max-heads" not in res.error
