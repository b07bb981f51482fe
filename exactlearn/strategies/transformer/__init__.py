"""The one-layer Transformer strategy (arXiv:2608.03294, its one-layer Transformer
extension; docs: howto/transformer.md).

:func:`learn_transformer` (:mod:`.learn`) drives one module per step:
:mod:`.path` (single tokens along a path, exact kinks), :mod:`.cones` (the
paper's plan in each cone), :mod:`.assembly` (neurons and the model),
:mod:`.certificate` (observations and fresh queries) and :mod:`.result`
(:class:`TransformerLearnResult`, the conditions :data:`CONDITIONS`).
"""

from exactlearn.strategies.transformer.learn import (CONDITIONS, TransformerLearnResult,
                                                     hyperplane_point, learn_transformer)

__all__ = ["learn_transformer", "CONDITIONS", "hyperplane_point", "TransformerLearnResult"]
