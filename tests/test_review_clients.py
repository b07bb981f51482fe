"""Pinned from a third-party client review (5 Dec 2026): boxes written by hand, as a client
who never read about exactlearn.adapters writes them.  Each test failed before its fix."""

from __future__ import annotations

import numpy as np
import pytest

from exactlearn import learn

W = np.array([[[0.3, -0.2], [0.1, 0.4]]])
V = np.array([[1.0, -0.5], [0.25, 0.75]])          # 2 outputs of one head


def _outputs(X):
    s = X @ W @ X[-1]
    a = np.exp(s - s.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)
    return V @ (a[0] @ X)                           # (2,), float64


HINT = "the black box answered float32 values"


def test_a_box_answering_float32_with_a_float64_noise_names_the_float32():
    """A box that answers ``np.float32`` (a float32 torch tensor, a JAX array without x64)
    under a declared float64 eta failed "outputs noisier than the declared eta" with a note
    about the head count only (a flax layer made without x64 took 14,336 queries and 60 s to
    fail so at d = 4, H = 2): the failure now names the answers' dtype and the way out."""
    def box(X):
        return np.float32(_outputs(X)[0])
    res = learn(box, d=2, heads=1, field="real", tokens="float64", noise=1e-15,
                noise_rel=1e-16, seed=0)
    assert res.status == "failed" and HINT in res.error and "noise='auto'" in res.error
    assert "jax_enable_x64" in res.error


def test_a_float32_batch_and_a_float32_vector_are_named_too():
    class Box:
        def __call__(self, X):
            return np.float32(_outputs(X)[0])

        def batch(self, queries):                   # one float32 array, as a jitted model
            return np.array([_outputs(X)[0] for X in queries], dtype=np.float32)
    res = learn(Box(), d=2, heads=1, field="real", tokens="float64", noise=1e-15,
                noise_rel=1e-16, seed=0)
    assert res.status == "failed" and HINT in res.error
    res = learn(lambda X: _outputs(X).astype(np.float32), d=2, heads=1, field="real",
                tokens="float64", noise=1e-15, noise_rel=1e-16, outputs=2, seed=0)
    assert res.status == "failed" and HINT in res.error


@pytest.mark.parametrize("answer", [lambda y: float(y), lambda y: np.float64(y)])
def test_a_float32_answer_passed_as_a_float64_is_named_by_its_values(answer):
    """``float(layer(X))`` of a float32 layer is a Python float: its type says float64, but
    its first answers are all float32 numbers, which float64 arithmetic gives by chance about
    once in 2^29 answers."""
    res = learn(lambda X: answer(np.float32(_outputs(X)[0])), d=2, heads=1, field="real",
                tokens="float64", noise=1e-15, noise_rel=1e-16, seed=0)
    assert res.status == "failed" and "values that are all float32 numbers" in res.error


def test_float64_answers_and_a_coarse_declared_noise_get_no_float32_note():
    """No note for float64 answers (a box noisier than declared for another reason), nor for
    float32 answers under an eta above float32's rounding."""
    res = learn(lambda X: _outputs(X)[0] + 1e-9 * np.sin(1e3 * X.sum()), d=2, heads=1,
                field="real", tokens="float64", noise=1e-15, noise_rel=1e-16, seed=0)
    assert res.status == "failed" and "float32" not in res.error, res.error
    res = learn(lambda X: np.float32(_outputs(X)[0]), d=2, heads=1, field="real",
                tokens="float64", noise=1e-6, noise_rel=1e-6, seed=0)
    assert "float32" not in (res.error or "")


def test_a_float_box_learned_with_the_fewest_arguments_is_told_about_tokens_and_noise():
    """``learn(box, d=, heads=, field="real")``, the fewest arguments the docs allow, sends a
    hand-written float box exact rationals under no declared noise: it failed "outputs
    noisier than the declared eta ... 1e31 times its first-order bound" with a note about the
    head count only; it now names tokens='float64' and noise=.  A box with a field of its
    own (an exactlearn Oracle) is not told."""
    res = learn(lambda X: float(_outputs(np.asarray(X, dtype=float))[0]), d=2, heads=1,
                field="real", seed=0)
    assert res.status == "failed" and "tokens='float64'" in res.error, res.error
    assert "noise='auto'" in res.error
    from exactlearn.api.hints import undeclared_noise_hint
    from exactlearn.fields import Real

    class OwnField:
        field = Real(dps=30)
    a = {"tokens": "exact", "noise": None, "noise_rel": None}
    assert undeclared_noise_hint(Real(dps=30), a, OwnField()) == ""
    assert "tokens='float64'" in undeclared_noise_hint(Real(dps=30), a, lambda X: 0.0)


def test_an_answer_whose_dtype_or_values_cannot_be_read_is_not_the_runs_failure():
    """The float32 note reads the first answers' ``dtype`` and values; an answer whose
    ``dtype`` or ``tolist`` raises is still read as its number (``.item()``)."""
    class Odd:
        def __init__(self, y):
            self.y = y

        @property
        def dtype(self):
            raise RuntimeError("no dtype here")

        def tolist(self):
            raise RuntimeError("no list here")

        def item(self):
            return self.y
    res = learn(lambda X: Odd(float(_outputs(X)[0])), d=2, heads=1, field="real",
                tokens="float64", noise=1e-13, noise_rel=1e-14, seed=0)
    assert res.status == "certified", res.error
