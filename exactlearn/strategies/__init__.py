"""Learning strategies: peers that use the layers below and never each other (docs: explanation/algorithm.md#how-it-works).

* :mod:`~exactlearn.strategies.paper` -- the paper's plan over the exact fields;
* :mod:`~exactlearn.strategies.efficient` -- the efficient plan (exact fields);
* :mod:`~exactlearn.strategies.real` -- the paper's plan over the real field,
  with scaled queries and error bounds;
* :mod:`~exactlearn.strategies.transformer` -- the one-layer Transformer.

Each of the first three offers ``new_state``, ``draw_plan``, ``run``, ``verify``
and ``detail``, and the flag ``EXACT``; :func:`exactlearn.api.learn` chooses one and drives it.
"""
