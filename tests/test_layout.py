"""The layered layout (docs: explanation/algorithm.md#how-it-works) and what a user imports.

``lint-imports`` (in ``.ci/run``) holds the layers; these tests pin what a user
sees: every public name at the top level, one home per module path (no import
hook, no ``importlib`` detour), and the exception tree.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

import exactlearn
from exactlearn import errors

#: the flat module paths of the first layout; no hook makes them import any more (issue 21)
OLD_PATHS = ["exactlearn.learner", "exactlearn.learn_real", "exactlearn.learn_efficient",
             "exactlearn.plan_efficient", "exactlearn.snap", "exactlearn.transformer_learn",
             "exactlearn.transformer", "exactlearn.plan", "exactlearn.interpolate", "exactlearn.match",
             "exactlearn.solve", "exactlearn.certify", "exactlearn.multimodular", "exactlearn.polys",
             "exactlearn.linalg", "exactlearn.cli_real", "exactlearn.demo_symbolic", "exactlearn.minilm"]

PACKAGE = Path(exactlearn.__file__).parent


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


@pytest.mark.parametrize("old", OLD_PATHS)
def test_the_old_flat_paths_are_gone(old):
    """No import hook: an old path fails like any missing module (compat.py is dropped)."""
    sys.modules.pop(old, None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


@pytest.mark.parametrize("root", [PACKAGE, PACKAGE.parent / "proofs_check"], ids=lambda p: p.name)
def test_no_module_imports_through_importlib(root):
    """Every import between the packages' modules is a plain import statement that
    ``lint-imports`` sees: no ``importlib`` (only ``importlib.metadata``, which reads the
    installed version and imports nothing)."""
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            offenders += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names
                          if n.split(".")[0] == "importlib" and n != "importlib.metadata"]
    assert offenders == []


def test_moved_names_have_one_home():
    """ModularImage and ANALYSIS_PRIMES live in fields.multimodular only: fields.modular,
    below it, does not reach up for them (the dependency is one-way)."""
    from exactlearn.fields import modular, multimodular
    assert multimodular.ModularImage is exactlearn.ModularImage and multimodular.ANALYSIS_PRIMES
    for name in ("ModularImage", "ANALYSIS_PRIMES"):
        with pytest.raises(AttributeError):
            getattr(modular, name)


def test_max_primes_outside_the_modular_field_is_refused():
    from exactlearn import MultiHeadAttention, Oracle, learn
    from exactlearn.fields import Rational
    model = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2])])
    with pytest.raises(ValueError, match="modular field only"):
        learn(Oracle(model, Rational()), d=2, heads=1, max_primes=3)
