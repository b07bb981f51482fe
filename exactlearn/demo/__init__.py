"""The walk-throughs: ``exactlearn demo`` step by step (docs: index.md#example).

:mod:`~exactlearn.demo.walkthrough` (exact fields), :mod:`~exactlearn.demo.symbolic`
(the ground truth in Q(T)) and :mod:`~exactlearn.demo.minilm` (real MiniLM heads);
:mod:`~exactlearn.demo.header` holds the default model and header both walk-throughs print.
"""

from exactlearn.demo.walkthrough import DEFAULT_MODEL, run_demo, show_model

__all__ = ["run_demo", "show_model", "DEFAULT_MODEL"]
