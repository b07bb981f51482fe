"""The strategy protocol: what every strategy offers ``learn()`` (docs: explanation/algorithm.md#how-it-works).

A strategy is a module (or an object) with the members of
[`Strategy`][exactlearn.strategies.base.Strategy]; ``learn()`` drives every strategy
through them and nothing else.  The strategies are peers: the paper plan
(:mod:`~exactlearn.strategies.paper`), the plan for biases
(:mod:`~exactlearn.strategies.bias`), the efficient plan
(:mod:`~exactlearn.strategies.efficient`), the real field (:mod:`~exactlearn.strategies.real`),
and the modular field's run of an exact one over several primes, serially or on a Dask
cluster (:class:`~exactlearn.strategies.modular.ModularStrategy`).

>>> from exactlearn.strategies import paper
>>> isinstance(paper, Strategy)
True
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Strategy(Protocol):
    """What ``learn()`` drives: flags, the plan's count, its draw, the run, the
    verification and the strategy's detail for the result."""

    #: True when the strategy runs over the exact fields, False over the real field.
    EXACT: bool
    #: True when it asks exactly ``plan.queries``, in order, and certifies them itself (its
    #: observations can be streamed, the plan spread over a cluster).
    ASKS_PLAN: bool

    def new_state(self) -> object:
        """The state kept across attempts (None when there is none)."""

    def plan_count(self, name: str, d: int, H: int, bias: bool = False, drawn=None) -> int:
        """The plan's own count for the plan ``name`` (``drawn``: the drawn plan, when its
        count depends on the draw)."""

    def draw_plan(self, d: int, H: int, rng, R: int, e_range=None, rank=None):
        """A random plan."""

    def run(self, plan, ask, K, trace, options) -> tuple:
        """Ask ``plan`` through ``ask``, analyse and certify: ``(heads, n_certified)``."""

    def verify(self, oracle, heads, d, H, K, convert, rng, R, n, state) -> tuple:
        """``n`` fresh queries compared with the learned heads: ``(agreed, error)``."""

    def detail(self, plan, state, certified) -> object:
        """The strategy's typed detail for ``LearnResult.detail`` (None when none)."""
