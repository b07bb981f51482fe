"""The modular field's strategy: an exact strategy run once per prime (docs: explanation/multimodular.md).

:class:`ModularStrategy` wraps an exact strategy (the paper plan, the plan for biases or the
efficient plan) and runs it through the multi-modular method
(:func:`exactlearn.pipeline.multimodular.learn_modular`): an analysis prime, a confirmation
prime, rational reconstruction; with a Dask client (``executor``), the paper plan's groups
are spread over the cluster (:class:`exactlearn.pipeline.distributed.ClusterPlan`).  It
implements the [`Strategy`][exactlearn.strategies.base.Strategy] protocol, so that
``learn()`` drives the modular field like any other; its detail is a
[`ModularDetail`][exactlearn.strategies.modular.ModularDetail].
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from exactlearn.errors import ExactLearnError
from exactlearn.pipeline.multimodular import learn_modular


@dataclass(frozen=True)
class PrimeRun:
    """One prime the multi-modular method asked: its value, role and queries."""

    p: int
    role: str
    queries: int
    omega: int | None = None        # a confirmation prime's random evaluation point


@dataclass
class ModularDetail:
    """What the modular field adds to a result (docs: explanation/multimodular.md).

    ``exact_over_Q``: the heads are exact rationals (False for a box fixed to one prime:
    modulo p only); ``route``: how the reconstruction was confirmed (``"confirmation"``,
    ``"height bound"``, ...); ``primes``: the primes asked; ``log2_wrong_reconstruction_bound``:
    the bound on a wrong reconstruction, as a base-2 logarithm; ``inner``: the wrapped
    strategy's own detail (an ``EfficientDetail`` or None); ``report``: the JSON's
    ``multimodular`` object, from which the rest is read."""

    exact_over_Q: bool                                  # noqa: N815 -- the JSON key's spelling
    route: str | None
    primes: tuple
    log2_wrong_reconstruction_bound: float | None
    inner: object
    report: dict | None

    def __getattr__(self, name):
        """The wrapped strategy's detail fields (``fallbacks``, ``plan_detail`` of an
        ``EfficientDetail``), which ``res.detail`` had before the modular field's run became a
        strategy of its own: deprecated here (a ``DeprecationWarning``), read
        ``res.detail.inner`` or ``res.efficient_detail``."""
        if name.startswith("_") or name == "inner" or "inner" not in self.__dict__:
            raise AttributeError(name)                 # copy and pickle probe before init
        if not hasattr(self.inner, name):
            raise AttributeError(f"'ModularDetail' object has no attribute '{name}'")
        import warnings
        warnings.warn(f"ModularDetail.{name} is deprecated: use ModularDetail.inner.{name} (or "
                      f"LearnResult.efficient_detail)", DeprecationWarning, stacklevel=2)
        return getattr(self.inner, name)

    @classmethod
    def from_report(cls, report: dict | None, inner) -> "ModularDetail":
        report = report or {}
        primes = tuple(PrimeRun(int(r["p"]), r.get("role", ""), r.get("queries", 0),
                                None if r.get("omega") is None else int(r["omega"]))
                       for r in report.get("primes", ()) if "p" in r)
        bound = report.get("log2_wrong_reconstruction_bound")
        return cls(bool(report.get("exact_over_Q", False)), report.get("route"), primes,
                   None if bound is None else float(bound), inner, report or None)


@dataclass
class ModularState:
    """Across attempts: the wrapped strategy's state, and the last attempt's report."""

    inner: object = None
    report: dict | None = None


class ModularStrategy:
    """An exact strategy over the modular field: once per prime, serially or on a cluster.

    ``oracle`` is the black box (asked modulo further primes through ``oracle.over``),
    ``d`` the token dimension, ``rng`` the run's random source (the primes' draws),
    ``max_primes``, ``max_height`` and ``executor`` the
    [`ModularOptions`][exactlearn.api.options.ModularOptions]."""

    EXACT = True

    def __init__(self, inner, oracle, d, rng, max_primes=None, max_height=None, executor=None):
        self.inner, self.oracle, self.d, self.rng = inner, oracle, d, rng
        self.max_primes, self.max_height, self.executor = max_primes, max_height, executor
        self.ASKS_PLAN = inner.ASKS_PLAN

    def new_state(self) -> ModularState:
        return ModularState(self.inner.new_state())

    def plan_count(self, name, d, H, bias=False, drawn=None) -> int:
        return self.inner.plan_count(name, d, H, bias, drawn)

    def draw_plan(self, d, H, rng, R, e_range=None, rank=None):
        return self.inner.draw_plan(d, H, rng, R, e_range, rank)

    def run(self, plan, ask, K, trace, options) -> tuple:
        """The multi-modular method over the inner strategy's run: ``(heads, n_certified)``;
        the report is kept in ``options.state`` (on a failure too)."""
        state = options.state
        state.report = None
        inner_options = replace(options, state=state.inner)
        try:
            heads, n_cert, state.report = self._run(plan, ask, K, trace, inner_options)
        except ExactLearnError as exc:           # the primes asked, on failures too
            state.report = getattr(exc, "report", None)
            raise
        return heads, n_cert

    def _run(self, plan, ask, K, trace, options) -> tuple:
        if self.executor is not None:            # the paper plan's groups on the cluster
            from exactlearn.pipeline.distributed import ClusterPlan
            cluster = ClusterPlan(self.executor, plan, self.oracle)
            return learn_modular(
                self.oracle, ask, K, self.d, self.rng, lambda sub, Kr, t: cluster.run_prime(sub, Kr),
                self.max_primes, None, plan=plan, confirm_at=cluster.confirm,
                max_height=self.max_height, answers_at=lambda: getattr(cluster, "first_group", None))
        return learn_modular(
            self.oracle, ask, K, self.d, self.rng,
            lambda sub, Kr, t: self.inner.run(plan, sub, Kr, t, options),
            self.max_primes, trace, plan=plan if self.inner.ASKS_PLAN else None,
            max_height=self.max_height)

    def verify(self, oracle, heads, d, H, K, convert, rng, R, n, state) -> tuple:
        return self.inner.verify(oracle, heads, d, H, K, convert, rng, R, n, state.inner)

    def detail(self, plan, state, certified) -> ModularDetail:
        return ModularDetail.from_report(state.report,
                                         self.inner.detail(plan, state.inner, certified))
