"""Claims, their results, and the context (quick/full, seed, executor) they run in.

A claim module registers itself with the :func:`claim` decorator::

    @claim("query-count", "The learner asks exactly 4Hd^2 - 2H + 1 queries ...", order=30)
    def check(ctx):
        rows = ctx.map(one_trial, [(seed, d, H) for ...])   # seeded trials, any executor
        ...
        return ClaimResult(VERIFIED, {"runs": len(rows), ...})

Trials passed to ``ctx.map`` must be top-level (picklable) functions of one
argument so that every executor (in-process, local processes, Dask) gives the
same verdicts for the same seed.
"""

from __future__ import annotations

import importlib
import pkgutil
import time
import traceback
from dataclasses import dataclass, field

VERIFIED = "verified"
REFUTED = "refuted"
INCONCLUSIVE = "inconclusive"
NOT_CHECKED = "not checked"
STATUSES = (VERIFIED, REFUTED, INCONCLUSIVE, NOT_CHECKED)


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


class LocalExecutor:
    """Runs trials in this process (workers=1) or in a local process pool."""

    name = "local"

    def __init__(self, workers: int = 1):
        self.workers = max(1, int(workers))
        self._pool = None

    def map(self, fn, items):
        items = list(items)
        if self.workers == 1 or len(items) < 2:
            return [fn(x) for x in items]
        if self._pool is None:
            from concurrent.futures import ProcessPoolExecutor
            self._pool = ProcessPoolExecutor(self.workers)
        return list(self._pool.map(fn, items))

    def close(self):
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


@dataclass
class Context:
    """What a claim needs: campaign size, base seed and an executor."""

    quick: bool = True
    seed: int = 0
    executor: object = None
    trials: int = 0            # counted by map(), reported per claim

    def __post_init__(self):
        if self.executor is None:
            self.executor = LocalExecutor(1)

    def map(self, fn, items):
        items = list(items)
        self.trials += len(items)
        return self.executor.map(fn, items)

    def size(self, quick: int, full: int) -> int:
        return quick if self.quick else full


def discover() -> dict:
    """Import every module of proofs_check.claims (each registers its claims)."""
    from . import claims as pkg
    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{mod.name}")
    return dict(sorted(CLAIMS.items(), key=lambda kv: (kv[1].order, kv[0])))


def run_claims(ids=None, quick=True, seed=0, executor=None, progress=None) -> list:
    """Run the selected claims; returns a list of JSON-able dicts."""
    registry = discover()
    selected = list(registry) if not ids else list(ids)
    unknown = [i for i in selected if i not in registry]
    if unknown:
        raise KeyError(f"unknown claim id(s): {', '.join(unknown)}")
    out = []
    for cid in selected:
        c = registry[cid]
        ctx = Context(quick=quick, seed=seed, executor=executor)
        t0 = time.perf_counter()
        try:
            res = c.run(ctx)
        except Exception as exc:  # a crash is reported, never counted as verified
            res = ClaimResult(INCONCLUSIVE, {"crash": f"{type(exc).__name__}: {exc}",
                                             "traceback": traceback.format_exc(limit=4)})
        res.evidence.setdefault("trials", ctx.trials)
        res.evidence["seconds"] = round(time.perf_counter() - t0, 3)
        out.append({"id": cid, "statement": c.statement, "status": res.status,
                    "evidence": res.evidence})
        if progress is not None:
            progress(out[-1])
    return out
