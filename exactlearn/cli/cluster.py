"""``exactlearn learn --workers N | --scheduler tcp://HOST:PORT``: one learn on a Dask
cluster (docs: explanation/performance.md#scale; :mod:`exactlearn.pipeline.distributed`).

``--workers N`` starts a loopback ``LocalCluster`` of N single-threaded worker processes
for the run (without the workers' statistical profiler); ``--scheduler`` connects to an existing cluster (every worker must import
the same exactlearn).  Either needs the paper plan over the modular field, and the
``dask`` extra (``pip install 'exactlearn[dask]'``).  A cluster that cannot start is
:class:`~exactlearn.errors.ClusterError` (exit 1); one that fails mid-run fails the run
(docs/explanation/performance.md, "A worker that dies").
"""

from __future__ import annotations

import contextlib
import logging

from exactlearn.cli.numbers import integer_option
from exactlearn.errors import ClusterError


def add_learn_options(lp) -> None:
    """The cluster options of ``exactlearn learn`` (additive: the serial run is the default)."""
    g = lp.add_mutually_exclusive_group()
    g.add_argument("--workers", type=integer_option("--workers"), default=None, metavar="N",
                   help="spread the configurations over N local Dask worker processes "
                        "(paper plan, modular field; same result and counts as serial, "
                        "a dead worker's recomputed answers counted too; default: serial)")
    g.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                   help="spread the configurations over an existing Dask cluster "
                        "(paper plan, modular field; same result and counts as serial, "
                        "a dead worker's recomputed answers counted too; default: serial)")


#: Tries at starting the local cluster of ``--workers`` (a worker process killed while it
#: starts fails the start).
STARTS = 2


@contextlib.contextmanager
def executor(args, bad_input):
    """A Dask ``Client`` for ``--workers`` / ``--scheduler`` (None without either); bad
    input (one line, exit 2) when the run cannot use one."""
    workers, address = getattr(args, "workers", None), getattr(args, "scheduler", None)
    if workers is None and address is None:
        yield None
        return
    flag = "--workers" if workers is not None else "--scheduler"
    if workers is not None and workers < 1:
        raise bad_input(f"--workers must be >= 1, got {workers}")
    from exactlearn import limits
    if workers is not None and workers > limits.MAX_LOCAL_WORKERS:
        raise bad_input(f"--workers must be <= {limits.MAX_LOCAL_WORKERS} (MAX_LOCAL_WORKERS: each "
                        f"is a process of its own on this machine), got {workers}")
    if args.field != "modular" or args.plan != "paper":
        raise bad_input(f"{flag} spreads the paper plan over the modular field: needs "
                        f"--field modular and --plan paper")
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise bad_input(f"{flag} needs Dask: pip install 'exactlearn[dask]'") from None
    # a worker that dies is the run's to report (docs/explanation/performance.md, "A worker
    # that dies"), not Dask's logs' tracebacks
    for name in ["distributed"] + [n for n in logging.root.manager.loggerDict
                                   if n.startswith("distributed.")]:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    stack = contextlib.ExitStack()
    try:
        if workers is not None:
            import dask
            # the workers' statistical profiler samples every thread's stack 100 times a
            # second, taking the GIL from the oracle and the analysis (about 15 % of a run at
            # d = 32)
            # a worker that stops answering (frozen, SIGSTOP) still looks alive until the
            # scheduler's worker-ttl (5 minutes by default) passes its last heartbeat: 60 s here,
            # then its tasks are recomputed elsewhere (review helper-74 F2: a run hung)
            stack.enter_context(dask.config.set({"distributed.worker.profile.enabled": False,
                                                 "distributed.scheduler.worker-ttl": "60s"}))
            for attempt in range(STARTS):   # a worker killed while it starts: start again
                inner = contextlib.ExitStack()
                try:
                    cluster = inner.enter_context(LocalCluster(
                        n_workers=workers, threads_per_worker=1, processes=True,
                        dashboard_address="127.0.0.1:0", silence_logs=logging.CRITICAL))
                    client = inner.enter_context(Client(cluster))
                    stack.push(inner.pop_all())
                    break
                except Exception as exc:    # distributed's own: a nanny that failed to start, ...
                    _close(inner)
                    if attempt == STARTS - 1:
                        raise ClusterError(f"{flag} {workers}: cannot start the local Dask "
                                           f"cluster, {STARTS} tries ({_one_line(exc)})") from None
        else:
            try:
                client = stack.enter_context(Client(address, timeout=10))
            except (OSError, TimeoutError, ValueError) as exc:
                raise bad_input(f"--scheduler {address}: cannot reach the Dask scheduler "
                                f"({exc})") from None
        yield client
    finally:
        _close(stack)


def _close(stack) -> None:
    """Close the client and the local cluster; the run's result is already made, so a
    cluster that fails to close (a nanny that cannot restart a killed worker, a scheduler
    gone) does not replace it with a traceback."""
    try:
        stack.close()
    except Exception:       # noqa: BLE001 -- distributed's errors on shutdown
        pass


def _one_line(exc) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
