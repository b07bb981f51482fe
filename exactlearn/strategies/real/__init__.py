"""The paper's plan over the real field: scaled queries, error propagation, a tolerance
certificate and an a-posteriori error bound (docs: explanation/real-field.md;
the paper's approximate-oracle conditions, arXiv:2608.03294).

:mod:`~exactlearn.strategies.real.learn` does the work (its docstring names the module
of each step: probe, sensitivity, fit, analysis, solve, evaluate, certificate, snap);
this module is the strategy interface :func:`exactlearn.api.learn` drives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exactlearn.errors import DegenerateDraw
from exactlearn.pipeline.plan import draw_paper_plan
from exactlearn.strategies.real.learn import run_real, verify_real
from exactlearn.strategies.real.stable import run_stable, stable_count

#: The strategy runs over the real field (inexact) only.
EXACT = False


@dataclass
class RealState:
    """Across attempts: the probe queries of each attempt, and the last outcome."""

    probes: list = field(default_factory=list)
    outcome: object = None


@dataclass
class RealDetail:
    """What the real field adds to a result."""

    probe_queries: int                 # scaling probe (inside ``queries``), every attempt
    error_bound: object                # a-posteriori bound on the largest parameter error
    detail: dict | None                # scale, certificate tolerance, ...
    snap: dict | None                  # snap=True: bounded-height rationals, certified


def new_state() -> RealState:
    return RealState()


def draw_plan(d, H, rng, R, e_range=None, rank=None):
    """A random paper plan; :func:`run` makes its X and E orthogonal and scales them."""
    return draw_paper_plan(d, H, rng, R, e_range)


def plan_count(name, d, H) -> int:
    """The plan's own count (probe excluded): the stable plan's, or the paper's."""
    from exactlearn.pipeline.plan import paper_count
    return stable_count(d, H) if name == "stable" else paper_count(d, H)


def run(plan, ask, K, trace, options) -> tuple:
    """Probe, scale, ask and analyse ``plan`` over the real field: ``(heads, n_certified)``;
    ``options.plan`` is ``"stable"`` (:mod:`~exactlearn.strategies.real.stable`, the
    default over this field) or ``"paper"`` (:mod:`~exactlearn.strategies.real.learn`)."""
    if options.plan == "stable":
        if options.snap:
            raise ValueError("snap=True is available with plan='paper' over the real field")
        heads, n, options.state.outcome = run_stable(
            plan, ask, K, noise=options.noise, noise_rel=options.noise_rel,
            query_scale=options.query_scale, heads_exact=options.heads_given,
            probe_log=options.state.probes)
    else:
        if options.noise_rel is not None:
            raise ValueError("noise_rel= (relative noise) needs plan='stable' over the real field")
        heads, n, options.state.outcome = run_real(
            plan, ask, K, noise=options.noise, query_scale=options.query_scale,
            snap=options.snap, probe_log=options.state.probes)
    if options.heads_given and len(heads) < plan.H:
        raise DegenerateDraw(
            f"{len(heads)} of the {plan.H} heads given were resolved: over the real field "
            f"two heads closer than the noise resolves look like one, and no error bound "
            f"covers that (give max_heads / --max-heads when heads may merge exactly)")
    return heads, n


def verify(oracle, heads, d, H, K, convert, rng, R, n, state) -> tuple:
    """``n`` fresh queries compared within the certificate's tolerance."""
    return verify_real(oracle, state.outcome, heads, d, H, K, convert, rng, R, n)


def detail(plan, state, certified) -> RealDetail:
    out = state.outcome
    return RealDetail(sum(state.probes),
                      out.error_bound if out is not None and certified else None,
                      out.detail if out is not None else None,
                      out.snap if out is not None and certified else None)
