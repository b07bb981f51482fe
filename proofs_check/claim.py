"""Claims, their results, and the context (quick/full, seed, executor) they run in.

A claim module registers itself with the :func:`claim` decorator::

    @claim("query-count", "The learner asks exactly 4Hd^2 - 2H + 1 queries ...", order=30)
    def check(ctx):
        rows = ctx.map(one_trial, [(seed, d, H) for ...])   # seeded trials, any executor
        ...
        return ClaimResult(VERIFIED, {"runs": len(rows), ...})

Trials passed to ``ctx.map`` must be top-level (picklable) functions of one
argument, pure functions of their item, so that every executor (in-process,
local processes, Dask: :mod:`proofs_check.executors`) gives the same verdicts
and the same evidence for the same seed.  ``ctx.trials`` counts the items
mapped; :func:`run_claims` reports it as ``evidence["trials"]``.

Campaign size
-------------
``ctx.quick`` (``--quick``) and ``ctx.tiny`` (``--tiny``, the test suite's
size) select the level; ``ctx.size(quick, full)`` returns the repetitions for
it, with the full size multiplied by ``ctx.scale`` (``--scale K``, for
clusters).  Claims that size their campaigns through ``ctx.size`` honour
``--scale``; :func:`run_claims` records which did (``row["scaled"]``).

Figure data in the evidence (``evidence["series"]``)
-----------------------------------------------------
A claim that measures something worth plotting puts it under
``evidence["series"][NAME] = {"points": [...], ...}``, where each point is a
flat dict of JSON numbers or strings (decimal strings are read with
``float``).  ``proofs-check --plots DIR`` (:mod:`proofs_check.figures`) draws
these names, from every claim that reports them:

``"queries_vs_d"``
    points ``{"plan": str, "d": int, "H": int, "queries": int}``, one per
    certified run (or per cell); optional ``"rank"`` (int) and ``"limit"``
    (the query limit the claim checks that run against).  ``plan`` is
    ``"paper"``, ``"efficient"``, ``"efficient rank=1"``, ...: one marker
    style per plan, one colour per H, drawn over the paper's formula
    4Hd^2 - 2H + 1 and the prior work's d^2 + d.
``"failure_vs_range"``
    points ``{"field": str, "range": int, "runs": int, "failures": int,
    "wrong": int, "bound": float}``: at sampling half-width R = ``range``
    (entries in [-R, R]), ``failures`` of ``runs`` learner runs were not
    certified, ``wrong`` were certified but wrong (must be 0), and ``bound``
    is the claim's upper bound on the failure probability at that R.
    Optional extra key ``"bound_formula"`` (str) beside ``"points"``.
``"error_vs_noise"``
    points ``{"eta": float, "error": float}`` (largest parameter error at
    output noise eta), optional ``"error_bound"`` (the learner's a-posteriori
    bound) and ``"model"`` (str, one line per model).  Extra keys beside
    ``"points"``: ``"slope"`` (the claim's fitted log-log slope) and
    ``"constant"`` (C in error <= C eta).
``"time_vs_d"``
    points ``{"field": str, "d": int, "H": int, "seconds": float}``.
    (Timings differ from run to run; every ``"seconds"`` key is left out when
    evidence is compared across executors.)
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field

from .executors import DaskExecutor, ExecutorError, LocalExecutor  # noqa: F401 (public here too)

VERIFIED = "verified"
REFUTED = "refuted"
INCONCLUSIVE = "inconclusive"
NOT_CHECKED = "not checked"
STATUSES = (VERIFIED, REFUTED, INCONCLUSIVE, NOT_CHECKED)


def verdict(evidence: dict, *, refuted: bool = False, problems=None) -> tuple:
    """``(status, evidence)`` by the rule every claim follows: ``refuted`` on a
    counterexample; otherwise ``inconclusive`` when there are ``problems`` (a list of
    reasons or one sentence, stored as ``evidence["why_not_verified"]``); else
    ``verified``.

    >>> verdict({}, problems=["only 2 certified runs (need 3)"])
    ('inconclusive', {'why_not_verified': ['only 2 certified runs (need 3)']})
    >>> verdict({"runs": 5}, refuted=True, problems="ignored")[0], verdict({})[0]
    ('refuted', 'verified')
    """
    if refuted:
        return REFUTED, evidence
    if problems:
        evidence["why_not_verified"] = problems
        return INCONCLUSIVE, evidence
    return VERIFIED, evidence


@dataclass
class ClaimResult:
    status: str
    evidence: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown claim status {self.status!r}")


@dataclass
class Claim:
    id: str
    statement: str
    run: object
    order: int = 100


CLAIMS: dict = {}


def claim(id: str, statement: str, order: int = 100):
    """Register a claim function ``f(ctx) -> ClaimResult`` under a stable id."""
    def deco(fn):
        if id in CLAIMS:
            raise ValueError(f"claim id {id!r} registered twice")
        CLAIMS[id] = Claim(id, statement, fn, order)
        return fn
    return deco


@dataclass
class Context:
    """What a claim needs: campaign size, base seed and an executor.

    ``progress`` (optional) is told about trials: ``progress.trials_added(n)``
    when a map of n trials starts, ``progress.trials_done(k)`` as k finish.
    """

    quick: bool = True
    seed: int = 0
    executor: object = None
    trials: int = 0            # counted by map(), reported per claim
    tiny: bool = False         # the test suite's size (below --quick)
    scale: int = 1             # multiplies full-run sizes given through size()
    progress: object = None
    scaled: bool = False       # set when size() was asked for a full-run size

    def __post_init__(self):
        if self.executor is None:
            self.executor = LocalExecutor(1)

    def map(self, fn, items):
        items = list(items)
        self.trials += len(items)
        p = self.progress
        if p is None or not _accepts_progress(self.executor):
            return self.executor.map(fn, items)
        p.trials_added(len(items))
        return self.executor.map(fn, items, progress=p.trials_done)

    def size(self, quick: int, full: int) -> int:
        if self.quick:
            return quick
        self.scaled = True
        return full * max(1, int(self.scale))


def _accepts_progress(executor) -> bool:
    import inspect
    try:
        return "progress" in inspect.signature(executor.map).parameters
    except (TypeError, ValueError):
        return False


def discover() -> dict:
    """The registered claims in their order.  Every module of :mod:`proofs_check.claims`
    registered its claims when ``proofs_check`` was imported (the package imports them)."""
    return dict(sorted(CLAIMS.items(), key=lambda kv: (kv[1].order, kv[0])))


def run_claims(ids=None, quick=True, seed=0, executor=None, progress=None, *,
               tiny=False, scale=1, reporter=None) -> list:
    """Run the selected claims; returns a list of JSON-able dicts.

    ``progress(row)`` is called after each claim.  ``reporter`` (optional) gets
    ``claim_started(id, index, total)``, ``claim_finished(row)`` and the trial
    hooks of :class:`Context`.
    """
    registry = discover()
    selected = list(registry) if not ids else list(ids)
    unknown = [i for i in selected if i not in registry]
    if unknown:
        raise KeyError(f"unknown claim id(s): {', '.join(unknown)}")
    out = []
    for n, cid in enumerate(selected):
        c = registry[cid]
        if reporter is not None:
            reporter.claim_started(cid, n, len(selected))
        ctx = Context(quick=quick, seed=seed, executor=executor, tiny=tiny, scale=scale,
                      progress=reporter)
        t0 = time.perf_counter()
        try:
            res = c.run(ctx)
        except Exception as exc:  # a crash is reported, never counted as verified
            res = ClaimResult(INCONCLUSIVE, {"crash": f"{type(exc).__name__}: {exc}",
                                             "traceback": traceback.format_exc(limit=4)})
        res.evidence.setdefault("trials", ctx.trials)
        res.evidence["seconds"] = round(time.perf_counter() - t0, 3)
        row = {"id": cid, "statement": c.statement, "status": res.status,
               "evidence": res.evidence}
        if scale != 1 and not quick:
            row["scaled"] = ctx.scaled
        out.append(row)
        if reporter is not None:
            reporter.claim_finished(row)
        if progress is not None:
            progress(row)
    return out
