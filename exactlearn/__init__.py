"""exactlearn: exact learning of multi-head attention from value queries.

Recovers the canonical heads of a multi-head softmax attention black box
exactly (arXiv:2608.03294); see the README and ``../shared/SPEC.md``.
"""

from .fields import Field, Rational
from .learner import LearnResult, learn
from .model import Head, ModelError, MultiHeadAttention
from .oracle import Oracle
from .plan import paper_count, paper_plan
from .transformer import OneLayerTransformer

__all__ = ["MultiHeadAttention", "Head", "ModelError", "Oracle", "learn", "LearnResult",
           "Field", "Rational", "paper_plan", "paper_count", "OneLayerTransformer"]
__version__ = "0.1.0"
