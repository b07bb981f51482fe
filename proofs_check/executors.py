"""Where the seeded trials of a campaign run: this process, local processes, or Dask.

A claim hands its trials to ``ctx.map(fn, items)``; the context passes them to
an executor.  Every executor returns ``[fn(x) for x in items]``, in order, so a
claim sees the same rows -- and reaches the same verdict -- whichever executor
ran them, provided each trial is a pure function of its item (the claims derive
one ``random.Random`` per trial from the base seed, the claim id and the trial
index: :func:`proofs_check.models.trial_rng`).

``LocalExecutor(1)``
    runs the trials in this process, one after the other.
``LocalExecutor(n)``, n >= 2
    a pool of n worker processes (``forkserver`` start method where available,
    so a progress-bar thread in the parent is never forked).  A worker that dies
    (killed, out of memory) raises :class:`ExecutorError` and the pool is
    rebuilt for the next campaign.
``DaskExecutor("tcp://host:port")``
    an existing ``dask.distributed`` cluster.  The scheduler must be reachable
    and have at least one worker; every worker must import the same exactlearn
    and proofs_check code as this process (checked by a fingerprint of their
    source files), else :class:`ExecutorError`.

Both pools send the trials in *strided* chunks (chunk c holds items c, c+m,
c+2m, ...): a campaign's grid runs from cheap to costly trials, and striding
spreads the costly ones over the workers.  Each executor's ``map`` accepts
``progress=callable``, called with the number of trials just finished.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pickle
import sys
from contextlib import contextmanager
from pathlib import Path



def _place(out, idx, results, progress) -> None:
    """Put a finished chunk's results at their item positions (``fut.result()``
    has already re-raised any trial's exception) and report progress."""
    for i, r in zip(idx, results):
        out[i] = r
    if progress is not None:
        progress(len(results))

class ExecutorError(RuntimeError):
    """An executor could not start, reach its workers, or lost them (one-line message)."""


def run_chunk(fn, chunk):
    """Run ``fn`` on each item of a chunk (the unit of work sent to a worker)."""
    return [fn(x) for x in chunk]


def strided_chunks(n: int, slots: int, per_slot: int = 4) -> list:
    """Index lists covering range(n): about ``slots * per_slot`` strided chunks."""
    m = max(1, min(n, slots * per_slot))
    return [list(range(c, n, m)) for c in range(m)]


def _check_picklable(fn):
    try:
        pickle.dumps(fn)
    except Exception as exc:
        raise TypeError(f"trial function {getattr(fn, '__qualname__', fn)!r} cannot be sent to "
                        f"a worker: trials must be top-level functions ({exc})") from None


class LocalExecutor:
    """Trials in this process (``workers=1``) or in a pool of local worker processes."""

    name = "local"

    def __init__(self, workers: int = 1):
        self.workers = max(1, int(workers))
        self._pool = None

    def describe(self) -> dict:
        return {"executor": self.name, "workers": self.workers}

    def _get_pool(self):
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor
            method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
            mp = multiprocessing.get_context(method)
            if method == "forkserver":
                # import the heavy modules once in the server; each worker forks from it
                mp.set_forkserver_preload(["exactlearn", "proofs_check.claim", "proofs_check.models"])
            self._pool = ProcessPoolExecutor(self.workers, mp_context=mp)
        return self._pool

    def map(self, fn, items, progress=None) -> list:
        items = list(items)
        if self.workers == 1 or len(items) < 2:
            out = []
            for x in items:
                out.append(fn(x))
                if progress is not None:
                    progress(1)
            return out
        _check_picklable(fn)
        from concurrent.futures import FIRST_EXCEPTION, wait
        from concurrent.futures.process import BrokenProcessPool
        pool = self._get_pool()
        chunks = strided_chunks(len(items), self.workers)
        futures = {}
        try:
            for idx in chunks:
                futures[pool.submit(run_chunk, fn, [items[i] for i in idx])] = idx
            out = [None] * len(items)
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for fut in done:
                    _place(out, futures[fut], fut.result(), progress)
            return out
        except BrokenProcessPool:
            self._discard_pool()
            raise ExecutorError("a local worker process died (killed or out of memory); "
                                "try fewer --workers") from None
        except BaseException:
            for fut in futures:
                fut.cancel()
            if isinstance(sys.exc_info()[1], KeyboardInterrupt):
                self._discard_pool()
            raise

    def _discard_pool(self):
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---- Dask ----------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """sha256 over the source files of exactlearn and proofs_check (path and content).

    Computed once per process, when first asked (a Dask worker: at its first
    campaign), so a long-lived worker whose code changed on disk afterwards is
    still told apart from a client started on the new code."""
    import exactlearn
    h = hashlib.sha256()
    for root in (Path(list(exactlearn.__path__)[0]), Path(__file__).resolve().parent):
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root.parent)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _worker_fingerprint() -> str:
    """Run on each Dask worker: the fingerprint of the code it imports."""
    try:
        from proofs_check.executors import code_fingerprint as fp
        return fp()
    except Exception as exc:  # reported, not raised, so the client can say which worker
        return f"error: {type(exc).__name__}: {exc}"


@contextmanager
def _quiet_logs(names=("distributed", "tornado", "asyncio")):
    """Silence distributed's own logging (connection retries) while connecting."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


def _one_line(exc) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


class DaskExecutor:
    """Trials on an existing ``dask.distributed`` cluster, through a ``Client``."""

    name = "dask"

    def __init__(self, address: str, timeout: float = 10.0, check_code: bool = True):
        try:
            with _quiet_logs():
                from distributed import Client
        except ImportError:
            raise ExecutorError("--scheduler needs dask.distributed: "
                                "pip install 'exactlearn[dask]'") from None
        if isinstance(address, str) and "://" not in address and address.count(":") == 1:
            address = "tcp://" + address                    # HOST:PORT, as dask accepts it
        if not isinstance(address, str) or "://" not in address:
            raise ExecutorError(f"bad scheduler address {address!r}: expected tcp://HOST:PORT")
        self.address = address
        self.client = None
        try:
            with _quiet_logs():
                self.client = Client(address, timeout=timeout, set_as_default=False)
                self.client.wait_for_workers(1, timeout=timeout)
        except Exception as exc:
            self.close()
            if type(exc).__name__ == "TimeoutError" and "worker" in str(exc).lower():
                raise ExecutorError(f"the Dask scheduler at {address} has no workers "
                                    f"(waited {timeout:g} s)") from None
            raise ExecutorError(f"cannot reach the Dask scheduler at {address}: "
                                f"{type(exc).__name__}: {_one_line(exc)}") from None
        if check_code:
            self._check_code()

    def _check_code(self):
        mine = code_fingerprint()
        theirs = self.client.run(_worker_fingerprint)
        bad = {w: fp for w, fp in theirs.items() if fp != mine}
        if bad:
            w, fp = next(iter(bad.items()))
            self.close()
            raise ExecutorError(f"{len(bad)} Dask worker(s) run different exactlearn/proofs_check code "
                                f"than this process (e.g. {w}: {fp}, here {mine}); install the same "
                                f"version on every worker and restart the workers")

    def slots(self) -> int:
        info = self.client.scheduler_info()
        return max(1, sum(w.get("nthreads", 1) for w in info.get("workers", {}).values()))

    def describe(self) -> dict:
        info = self.client.scheduler_info()
        workers = info.get("workers", {})
        return {"executor": self.name, "scheduler": self.address, "workers": len(workers),
                "threads": sum(w.get("nthreads", 1) for w in workers.values())}

    def map(self, fn, items, progress=None) -> list:
        items = list(items)
        if not items:
            return []
        from distributed import as_completed
        chunks = strided_chunks(len(items), self.slots())
        futures = {}
        try:
            for idx in chunks:
                fut = self.client.submit(run_chunk, fn, [items[i] for i in idx], pure=False)
                futures[fut] = idx
            out = [None] * len(items)
            for fut in as_completed(list(futures), loop=self.client.loop):
                _place(out, futures[fut], fut.result(), progress)
            return out
        except BaseException:
            if self.client is not None and futures:
                try:
                    self.client.cancel(list(futures))
                except Exception:
                    pass
            raise

    def close(self):
        if self.client is not None:
            try:
                with _quiet_logs():
                    self.client.close()
            except Exception:
                pass
            self.client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def make_executor(scheduler: str | None = None, workers: int = 1, timeout: float = 10.0):
    """A :class:`DaskExecutor` when ``scheduler`` is given, else a :class:`LocalExecutor`."""
    if scheduler:
        return DaskExecutor(scheduler, timeout=timeout)
    return LocalExecutor(workers)


def strip_timings(obj, keys=("seconds",)):
    """A copy of ``obj`` (JSON-like) without timing entries, to compare verdicts and
    evidence across executors: every dict key in ``keys`` or ending in ``_seconds``."""
    if isinstance(obj, dict):
        return {k: strip_timings(v, keys) for k, v in obj.items()
                if k not in keys and not str(k).endswith("_seconds")}
    if isinstance(obj, (list, tuple)):
        return [strip_timings(v, keys) for v in obj]
    return obj


def default_workers() -> int:
    """The number of CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


__all__ = ["ExecutorError", "LocalExecutor", "DaskExecutor", "make_executor", "strip_timings",
           "code_fingerprint", "run_chunk", "strided_chunks", "default_workers"]
