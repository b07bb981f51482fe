"""exactlearn: exact learning of multi-head attention from value queries.

Recovers the canonical heads of a multi-head softmax attention black box
exactly (arXiv:2608.03294, "Provably Learning Multi-Head Attention with
Queries"); docs: explanation/algorithm.md#how-it-works says how, and which module does each step.

The names a user needs are here: models, black boxes, fields, the learners
and their results, and the exception tree.
"""

from exactlearn.api import EfficientOptions, LearnResult, ModularOptions, RealOptions, learn
from exactlearn.errors import (CertificateError, DegenerateDraw, ExactLearnError, ExactnessError,
                               FieldError, LearningFailure, MatchError, ModelError,
                               VerificationFailed)
from exactlearn.fields import (ConfirmationModular, Field, Modular, ModularImage, QQ, Rational,
                               ResidueModular)
from exactlearn.model import Head, MultiHeadAttention, canonicalize
from exactlearn.oracle import CountingOracle, Oracle, Recorder, TransformerOracle
from exactlearn.pipeline.plan import paper_count, paper_plan
from exactlearn.transformer_model import OneLayerTransformer, random_transformer

__all__ = [
    # models and black boxes
    "MultiHeadAttention", "Head", "canonicalize", "OneLayerTransformer", "random_transformer",
    "Oracle", "CountingOracle", "TransformerOracle", "NoisyOracle", "Recorder",
    # fields
    "Field", "Rational", "QQ", "Modular", "ModularImage", "ResidueModular", "ConfirmationModular",
    "Real", "Symbolic",
    # learning
    "learn", "LearnResult", "RealOptions", "ModularOptions", "EfficientOptions", "estimate_noise", "learn_transformer", "TransformerLearnResult", "paper_plan",
    "paper_count",
    # errors
    "ExactLearnError", "ModelError", "FieldError", "ExactnessError", "LearningFailure",
    "DegenerateDraw", "MatchError", "CertificateError", "VerificationFailed",
]
__version__ = "0.1.0"


def __getattr__(name):
    """``Real`` (mpmath), ``Symbolic`` (sympy), the noisy oracle and the Transformer learner
    load on first use, which keeps the command line's start-up short."""
    if name in ("Real", "Symbolic"):
        from exactlearn import fields
        return getattr(fields, name)
    if name == "NoisyOracle":
        from exactlearn.noise import NoisyOracle
        return NoisyOracle
    if name == "estimate_noise":
        from exactlearn.strategies.real.eta import estimate_noise
        return estimate_noise
    if name in ("learn_transformer", "TransformerLearnResult"):
        from exactlearn.strategies.transformer import learn as transformer_learn
        return getattr(transformer_learn, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
