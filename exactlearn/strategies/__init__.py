"""Learning strategies: peers that use the layers below and never each other (docs: explanation/algorithm.md#how-it-works).

* :mod:`~exactlearn.strategies.paper` -- the paper's plan over the exact fields;
* :mod:`~exactlearn.strategies.bias` -- the plan for biases over the exact fields;
* :mod:`~exactlearn.strategies.efficient` -- the efficient plan (exact fields);
* :mod:`~exactlearn.strategies.real` -- the real field: the paper plan with scaled
  queries and error bounds, or the stable plan;
* :mod:`~exactlearn.strategies.modular` -- the modular field's run of an exact strategy
  over several primes (the multi-modular method), serially or on a Dask cluster;
* :mod:`~exactlearn.strategies.transformer` -- the one-layer Transformer.

Every strategy but the Transformer's implements the
[`Strategy`][exactlearn.strategies.base.Strategy] protocol; :func:`choose` picks one for a
plan and a field (the only place a plan is chosen), and :func:`exactlearn.api.learn`
drives it.
"""

from __future__ import annotations

from exactlearn.strategies.base import Strategy

#: The plan names ``learn(plan=...)`` takes.
PLANS = ("paper", "efficient", "stable")


def default_plan(plan, K, tokens: str) -> str:
    """The plan a run uses: the one given, else the stable plan for a box that takes float
    tokens over the real field, else the paper plan."""
    if plan is not None:
        return plan
    return "stable" if tokens != "exact" and not K.is_exact else "paper"


def choose(plan: str, K, bias: bool = False) -> Strategy:
    """The strategy for a plan name, a field and ``bias`` (one-line ``ValueError`` for a
    plan the field does not run)."""
    if plan == "stable" and K.is_exact:
        raise ValueError("the stable plan is for finite-precision black boxes over the real "
                         "field; the exact fields use the paper plan (or plan='efficient')")
    if plan == "efficient":
        if not K.is_exact:
            raise ValueError("the efficient plan runs over the exact fields; over the real field "
                             "the learner uses the paper plan (exactlearn.strategies.real)")
        from exactlearn.strategies import efficient as strategy
    elif not K.is_exact:
        from exactlearn.strategies import real as strategy
    elif bias:
        from exactlearn.strategies import bias as strategy
    else:
        from exactlearn.strategies import paper as strategy
    if not isinstance(strategy, Strategy):        # every member of the protocol, checked
        raise TypeError(f"{strategy.__name__} does not implement the Strategy protocol")
    return strategy
