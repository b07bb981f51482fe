"""The real field's learner: scaled queries, error propagation, a tolerance certificate and
an a-posteriori error bound (docs: explanation/real-field.md; the paper's approximate-oracle
conditions, arXiv:2608.03294).

One pipeline, :func:`~exactlearn.strategies.real.stable.run_stable` (its docstring names the
module of each step: probe, families, labels, solve, polish, certificate); the plans are its
choices of nodes -- ``plan="stable"`` the ratio nodes, ``plan="paper"`` the paper's
``k = 0 .. 2H`` (:func:`~exactlearn.strategies.real.stable_plan.paper_nodes`) -- and
``snap=True`` (the paper plan's) snaps its certified heads
(:mod:`~exactlearn.strategies.real.snap`).  This module is the strategy interface
:func:`exactlearn.api.learn` drives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exactlearn.errors import DegenerateDraw, LearningFailure, ResidualsBeyondNoise, clip
from exactlearn.pipeline.plan import draw_paper_plan

# the learner's modules (numpy, mpmath, scipy) are imported where they run, so that
# importing exactlearn for an exact field does not load them (RealDetail is all the
# API's result needs from here)

#: The strategy runs over the real field (inexact) only.
EXACT = False

#: It asks beyond the plan (the scaling probe, supplementary families): its observations are
#: kept, never streamed.
ASKS_PLAN = False


@dataclass
class RealState:
    """Across attempts: the probe queries of each attempt, and the last outcome."""

    probes: list = field(default_factory=list)
    planned: list = field(default_factory=list)     # the stable plan's own count, per attempt
    outcome: object = None
    plan: str = "paper"                # the plan run: "paper" or "stable"


@dataclass
class RealDetail:
    """What the real field adds to a result (docs: explanation/real-field.md).

    Numbers, not strings: ``error_bound`` (the a-posteriori bound on the largest parameter
    error), ``head_error_bounds`` (one per head), ``W_bounds`` and ``v_bounds`` (per entry),
    ``eta`` (the declared or measured bound the certificate used) and ``query_scale``
    (sigma; None for the stable plan's dyadic scale when not found) are set when the run
    was certified; ``report`` is the run's account (the JSON's ``real_detail``, whose
    strings are formatted from these numbers)."""

    probe_queries: int                 # scaling probe (inside ``queries``), every attempt
    error_bound: object                # a-posteriori bound on the largest parameter error
    report: dict | None                # the JSON's real_detail: scale, tolerance, ...
    snap: dict | None                  # snap=True: bounded-height rationals, certified
    plan: str = "paper"                # "paper" or "stable"
    head_error_bounds: tuple = ()      # certified: per head, the largest entry error bound
    W_bounds: tuple = ()               # certified: [head][row][col]
    v_bounds: tuple = ()               # certified: [head][entry] (outputs=m: [head][j][entry])
    eta: object = None                 # certified: the absolute noise bound used
    query_scale: object = None         # certified: the query scale sigma
    planned: int | None = None         # the stable plan's own count at the nodes last chosen

    @property
    def plan_queries(self) -> int | None:
        """The stable plan's own count at the nodes this run used (lean at float64 rounding:
        :func:`~exactlearn.strategies.real.stable_plan.stable_count`; a failed run's too), None
        before its plan."""
        return (self.report or {}).get("stable_plan_queries", self.planned)

    @property
    def detail(self) -> dict | None:
        """Deprecated name of ``report`` (a ``DeprecationWarning``)."""
        import warnings
        warnings.warn("RealDetail.detail is deprecated: use RealDetail.report (or "
                      "LearnResult.real_detail)", DeprecationWarning, stacklevel=2)
        return self.report


def new_state() -> RealState:
    return RealState()


def draw_plan(d, H, rng, R, e_range=None, rank=None):
    """A random paper plan; :func:`run` makes its X and E orthogonal and scales them."""
    return draw_paper_plan(d, H, rng, R, e_range)


def plan_count(name, d, H, bias=False, drawn=None) -> int:
    """The plan's own count (probe excluded): the stable plan's (with ``bias``, the stable plan
    for biases', docs/explanation/biases.md), or the paper plan's nodes': its
    ``4Hd^2 - 2H + 1`` and the ``2d - 2`` single tokens ``(x)`` the paper computes from V
    (:func:`~exactlearn.strategies.real.stable_plan.stable_count`)."""
    from exactlearn.strategies.real.stable_plan import paper_nodes, stable_count
    return stable_count(d, H, bias, nodes=None if name == "stable" else paper_nodes(H))


def run(plan, ask, K, trace, options) -> tuple:
    """Probe, scale, ask and analyse ``plan`` over the real field: ``(heads, n_certified)``;
    ``options.plan`` is ``"stable"`` (:mod:`~exactlearn.strategies.real.stable`, the
    default over this field) or ``"paper"`` (the same pipeline at the paper's nodes).

    **Head-count escalation** (a head bound ``max_heads``): the count the families show comes
    first; when the certified model's residuals exceed what the declared eta allows
    (:class:`~exactlearn.errors.ResidualsBeyondNoise`, docs/explanation/real-field.md) with m
    heads below the bound, the run is repeated fitting exactly m + 1 heads, and so on up to
    the bound: the smallest count whose residuals are within eta is certified.  The stable
    plan also refutes m heads within eta when the observations resolve a split head (its
    resolution test, :func:`~exactlearn.strategies.real.stable_checks.resolution_test`).  If no
    count is certified, the run fails naming every count tried ("the observations resolve more than
    m heads, but ..." after a resolution).  Every query of every try is counted.
    """
    if options.plan == "stable" and options.snap:
        raise ValueError("snap=True is available with plan='paper' over the real field")
    if options.plan != "stable" and options.noise_rel is not None:
        raise ValueError("noise_rel= (relative noise) needs plan='stable' over the real field")
    if options.plan != "stable" and getattr(options, "bias", False):
        raise ValueError("bias=True over the real field needs plan='stable'")
    fit_heads, tried, resolved = None, [], None
    options.state.plan = options.plan
    while True:
        try:
            heads, n, options.state.outcome = _run_once(plan, ask, K, options, fit_heads)
            if tried:                   # the counts refuted before this one, and why
                options.state.outcome.detail["head_counts_refuted"] = [clip(t, 300) for t in tried]
            if not options.heads_given and len(heads) < plan.H:     # what the bound can't show
                options.state.outcome.detail["head_bound_caveat"] = (
                    f"{plural(len(heads))} certified under a bound of {plan.H}: the error bound "
                    f"covers the canonical heads if no two true heads are closer than these "
                    f"observations resolve at the declared eta (two such heads are reported as "
                    f"one; docs/explanation/real-field.md#the-resolution-test)")
            break
        except ResidualsBeyondNoise as exc:
            m = exc.heads
            if exc.resolved and resolved is None:
                resolved = m
            tried.append(f"with {plural(m) if m is not None else 'the heads found'}: {exc}")
            if options.heads_given or m is None or m >= plan.H:
                if len(tried) > 1:
                    raise ResidualsBeyondNoise(_history(tried, resolved), heads=m,
                                               draw=resolved is not None) from None
                raise
            fit_heads = max(m, fit_heads or 0) + 1
            if fit_heads > plan.H:      # the count the bound allows was fitted, and merged
                raise ResidualsBeyondNoise(_history(tried, resolved), heads=m,
                                           draw=resolved is not None) from None
        except LearningFailure as exc:
            if not tried:
                raise
            tried.append(f"refitting with exactly {plural(fit_heads)}: {exc.kind}: {exc}")
            raise ResidualsBeyondNoise(_history(tried, resolved), heads=fit_heads,
                                       draw=True) from None
    if options.heads_given and len(heads) < plan.H:
        raise DegenerateDraw(
            f"{len(heads)} of the {plan.H} heads given were resolved: over the real field "
            f"two heads closer than the noise resolves look like one, and no error bound "
            f"covers that (give max_heads= instead of heads= when heads may merge exactly)")
    return heads, n


def plural(m) -> str:
    """``m`` heads, in words (the learner's messages)."""
    return f"{m} head{'s' if m != 1 else ''}"


def _run_once(plan, ask, K, options, fit_heads):
    """One attempt of the one pipeline at the plan's nodes; ``snap=True`` snaps its heads."""
    from exactlearn.strategies.real.lsq import one_blas_thread
    from exactlearn.strategies.real.stable import run_stable
    start = len(ask.observations)
    with one_blas_thread():            # the box keeps its threads (lsq.box_blas_threads)
        heads, n, out = run_stable(
            plan, ask, K, noise=options.noise, noise_rel=options.noise_rel,
            query_scale=options.query_scale, heads_exact=options.heads_given,
            probe_log=options.state.probes, fit_heads=fit_heads,
            bias=getattr(options, "bias", False), remeasure=getattr(options, "remeasure", None),
            plan_log=options.state.planned, paper=options.plan != "stable")
    if options.snap:
        from exactlearn.strategies.real.snap import snap_heads
        out.snap = snap_heads(heads, out, K, ask.observations[start:], start)
    return heads, n, out


def _history(tried, resolved=None):
    if resolved is not None:            # the resolution test refuted a count within eta
        head = (f"the observations resolve more than {plural(resolved)}, but no larger count up "
                f"to the bound is certified with a covering bound; ")
    else:
        head = "no head count up to the bound fits the observations within the declared eta; "
    return head + "; ".join(tried)


def verify(oracle, heads, d, H, K, convert, rng, R, n, state) -> tuple:
    """``n`` fresh queries compared within the certificate's tolerance."""
    from exactlearn.strategies.real.certificate import verify_real
    return verify_real(oracle, state.outcome, heads, d, H, K, convert, rng, R, n)


def detail(plan, state, certified) -> RealDetail:
    """The real field's detail: numbers from the last outcome (its bounds when certified)."""
    out, planned = state.outcome, (state.planned or [None])[-1]
    if out is None:
        return RealDetail(sum(state.probes), None, None, None, plan=state.plan, planned=planned)
    kept = certified                        # the bounds describe certified heads only
    return RealDetail(sum(state.probes), out.error_bound if kept else None, out.detail,
                      out.snap if kept else None, plan=state.plan,
                      head_error_bounds=tuple(out.head_bounds) if kept else (),
                      W_bounds=tuple(out.W_bounds) if kept else (),
                      v_bounds=tuple(out.v_bounds) if kept else (),
                      eta=out.eta if kept else None, query_scale=out.sigma if kept else None,
                      planned=planned)
