"""exactlearn: exact learning of multi-head attention from value queries.

Recovers the canonical heads of a multi-head softmax attention black box
exactly (arXiv:2608.03294); see the README and ``../shared/SPEC.md``.
"""

from exactlearn.fields import Field, Rational
from exactlearn.api import LearnResult, learn
from exactlearn.model import Head, ModelError, MultiHeadAttention
from exactlearn.oracle import Oracle
from exactlearn.pipeline.plan import paper_count, paper_plan
from exactlearn.transformer_model import OneLayerTransformer

__all__ = ["MultiHeadAttention", "Head", "ModelError", "Oracle", "learn", "LearnResult",
           "Field", "Rational", "paper_plan", "paper_count", "OneLayerTransformer"]
__version__ = "0.1.0"
