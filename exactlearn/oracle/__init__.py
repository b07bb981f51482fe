"""The black box: a model evaluated through a field, with a query counter.

``Oracle(model, field)`` is callable on a sequence of token vectors and returns
a field element.  It counts the queries (``.queries``), the longest query
(``.max_length``) and the time spent answering (``.seconds``).  A query of k
copies of one token costs work in the number of *distinct* tokens, not in k,
and each head's ``W_h x_n`` is computed once per final token.

When the field's scale D is left on auto (``scale=None``) the oracle fixes it to
the lcm of the W denominators of the model's *raw* heads, as written (docs: howto/field-and-range.md#number-systems-fields):
the black box evaluates every raw head -- cancelling and merging ones included
-- and never substitutes the canonical form for the model.  ``oracle.field`` is
the resolved field, which the learner uses by default.

>>> from exactlearn.model import MultiHeadAttention
>>> from exactlearn.fields import Rational
>>> o = Oracle(MultiHeadAttention([([["1/2", 0], [0, 1]], [1, 1])]), Rational())
>>> o([[2, 0], [2, 0], [0, 2]]), o.queries, o.max_length, o.field.scale
(mpq(2,1), 1, 3, 2)
"""

from exactlearn.oracle.adapt import TOKEN_KINDS, TokenAdapter, box_name, checked_batch
from exactlearn.oracle.counting import CountingOracle, Oracle, TransformerOracle
from exactlearn.oracle.recorder import Recorder
from exactlearn.oracle.views import OutputsView, resolve_field

# Names that ``from exactlearn.oracle import ...`` reached before oracle became a package (the
# old module's imports); they stay importable from here, outside __all__.
from exactlearn.errors import (BadBlackBox, DegenerateDraw, ExactnessError,  # noqa: F401,E402
                               FieldError, ModelError)
from exactlearn.fields.base import Field  # noqa: F401,E402
from exactlearn.limits import readable_int  # noqa: F401,E402
from exactlearn.model import HeadEvaluator, MultiHeadAttention, evaluator  # noqa: F401,E402
from exactlearn.transformer_model import (OneLayerTransformer,  # noqa: F401,E402
                                          TransformerEvaluator, require_ordered)

__all__ = ["CountingOracle", "Oracle", "TransformerOracle", "Recorder", "TokenAdapter",
           "TOKEN_KINDS", "OutputsView", "resolve_field", "box_name", "checked_batch"]
