"""The layered layout (docs: explanation/algorithm.md#how-it-works) and the paths of exactlearn 0.1.

``lint-imports`` (in ``.ci/run``) holds the layers; these tests pin what a user
sees: every public name at the top level, the old module paths still working,
and the exception tree.
"""

from __future__ import annotations

import importlib

import pytest

import exactlearn
from exactlearn import errors
from exactlearn.compat import MOVED

#: a few names per old module path, as user code of exactlearn 0.1 imported them
OLD_NAMES = {
    "exactlearn.learner": ["learn", "LearnResult", "Degenerate", "DEFAULT_RANGES", "head_bound"],
    "exactlearn.learn_real": ["run_real", "max_parameter_error", "orthogonal_plan", "fit_family"],
    "exactlearn.learn_efficient": ["run_efficient", "fit_family"],
    "exactlearn.plan_efficient": ["draw_efficient_plan", "efficient_count"],
    "exactlearn.snap": ["snap_heads", "simplest_rational"],
    "exactlearn.transformer_learn": ["learn_transformer", "CONDITIONS", "run_cli", "E_RANGE"],
    "exactlearn.transformer": ["OneLayerTransformer", "TransformerOracle", "random_transformer"],
    "exactlearn.plan": ["paper_plan", "paper_count", "draw_paper_plan", "across_direction"],
    "exactlearn.interpolate": ["cauchy_interpolate", "poles", "InterpolationError", "cauchy_flint"],
    "exactlearn.match": ["match", "label_basis", "MatchError", "PoleCountMismatch"],
    "exactlearn.solve": ["solve_heads"],
    "exactlearn.certify": ["certify", "CertificateError"],
    "exactlearn.multimodular": ["learn_over_primes", "HeightExceeded"],
    "exactlearn.polys": ["evaluate"],
    "exactlearn.linalg": ["inverse", "SingularMatrix"],
    "exactlearn.cli_real": ["learn_options"],
    "exactlearn.demo_symbolic": ["run_symbolic_demo"],
    "exactlearn.minilm": ["MiniLMUnavailable"],
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_module_paths_still_import(old):
    module = importlib.import_module(old)
    for name in OLD_NAMES[old]:
        assert getattr(module, name) is not None, (old, name)
    with pytest.raises(AttributeError, match="no attribute"):
        getattr(module, "no_such_name")


def test_every_public_name_is_exported():
    for name in exactlearn.__all__:
        assert getattr(exactlearn, name) is not None, name
    for name in ("Modular", "Real", "Symbolic", "NoisyOracle", "learn_transformer",
                 "TransformerOracle", "ExactLearnError", "Recorder"):
        assert name in exactlearn.__all__


def test_one_exception_tree():
    """Every exception the package raises derives from ExactLearnError, and a failure
    reason comes from the exception's own kind."""
    classes = [getattr(errors, n) for n in errors.__all__ if isinstance(getattr(errors, n), type)]
    assert all(issubclass(c, errors.ExactLearnError) for c in classes)
    assert not issubclass(errors.InterpolationError, errors.FieldError)   # learning, not field
    assert not issubclass(errors.MatchError, errors.FieldError)
    assert errors.PoleCountMismatch("x").kind == errors.DegenerateDraw("x").kind
    assert errors.CertificateError.kind == "certificate failed"
    assert issubclass(exactlearn.ModelError, ValueError)                  # bad input stays a ValueError


def test_old_paths_cover_star_imports_and_moved_names():
    """Found by the final review: star imports, renamed errors, and names that moved out of a
    module that still exists."""
    namespace: dict = {}
    exec("from exactlearn.learner import *", namespace)
    assert "learn" in namespace and "LearnResult" in namespace
    from exactlearn.fields.modular import ANALYSIS_PRIMES, ModularImage
    from exactlearn.learn_efficient import Degenerate
    from exactlearn.transformer_learn import TransformerEvaluator
    assert Degenerate is errors.DegenerateDraw and ModularImage and ANALYSIS_PRIMES
    assert TransformerEvaluator.__name__ == "TransformerEvaluator"


def test_max_primes_outside_the_modular_field_is_refused():
    from exactlearn import MultiHeadAttention, Oracle, learn
    from exactlearn.fields import Rational
    model = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2])])
    with pytest.raises(ValueError, match="modular field only"):
        learn(Oracle(model, Rational()), d=2, heads=1, max_primes=3)
