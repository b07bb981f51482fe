"""Multi-head attention with exact weights, its canonical form and evaluation (docs: explanation/algorithm.md#the-model-and-its-sign-convention).

Convention (that of arXiv:2601.16873): head h has a merged query-key matrix
W_h (d x d) and a merged value-readout vector v_h (d).  For a query
X = (x_1, ..., x_n) the final token x_n attends to every token, itself
included; the score of token i is ``s_{h,i} = x_i^T W_h x_n`` -- **key on the
left, query on the right** -- and the output is

    f(X) = sum_h sum_i softmax_i(s_{h,.}) * v_h . x_i .

The canonical form groups heads with equal W, sums their v, and drops groups
whose sum is zero; f depends only on it.

>>> m = MultiHeadAttention([([[1, 0], [0, 1]], [1, 2]), ([[1, 0], [0, 1]], [-1, 0]),
...                         ([[0, 1], [0, 0]], [3, "1/2"])])
>>> [(h.W, h.v) for h in m.canonical_heads()]     # doctest: +NORMALIZE_WHITESPACE
[(((mpq(0,1), mpq(1,1)), (mpq(0,1), mpq(0,1))), (mpq(3,1), mpq(1,2))),
 (((mpq(1,1), mpq(0,1)), (mpq(0,1), mpq(1,1))), (mpq(0,1), mpq(2,1)))]
>>> from exactlearn.fields import Rational
>>> m.evaluate([[1, 0], [0, 1]], Rational())
mpq(7,2)
"""


from exactlearn.errors import ModelError
from exactlearn.model.attention import FORMAT, FORMAT_BIAS, FORMAT_VECTOR, MultiHeadAttention
from exactlearn.model.evaluate import HeadEvaluator, VectorEvaluator, evaluator
from exactlearn.model.heads import (Head, HeadSet, Structure, canonicalize, constant_of,
                                    distinct_tokens, exponent_entries, is_matrix, structure)

# Names that ``from exactlearn.model import ...`` reached before model became a package (the
# old module's imports); they stay importable from here, outside __all__.
from exactlearn.errors import BadReduction, ExactnessError  # noqa: F401,E402
from exactlearn.fields.base import (Field, as_mpq, format_rational,  # noqa: F401,E402
                                    lcm_of_denominators)
from exactlearn.io import (check_format, dump_json, exact_matrix, exact_vector,  # noqa: F401,E402
                           load_json)
from exactlearn.limits import check_model_size, check_outputs_size  # noqa: F401,E402

__all__ = ["MultiHeadAttention", "Head", "HeadSet", "Structure", "canonicalize", "constant_of",
           "structure", "is_matrix", "distinct_tokens", "exponent_entries", "HeadEvaluator",
           "VectorEvaluator", "evaluator", "FORMAT", "FORMAT_BIAS", "FORMAT_VECTOR", "ModelError"]
