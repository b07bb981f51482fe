"""``exactlearn learn --workers N | --scheduler tcp://HOST:PORT``: one learn on a Dask
cluster (docs: explanation/performance.md#scale; :mod:`exactlearn.pipeline.distributed`).

``--workers N`` starts a loopback ``LocalCluster`` of N single-threaded worker processes
for the run (without the workers' statistical profiler); ``--scheduler`` connects to an existing cluster (every worker must import
the same exactlearn).  Either needs the paper plan over the modular field, and the
``dask`` extra (``pip install 'exactlearn[dask]'``).
"""

from __future__ import annotations

import contextlib
import logging


def add_learn_options(lp) -> None:
    """The cluster options of ``exactlearn learn`` (additive: the serial run is the default)."""
    g = lp.add_mutually_exclusive_group()
    g.add_argument("--workers", type=int, default=None, metavar="N",
                   help="spread the configurations over N local Dask worker processes "
                        "(paper plan, modular field; same result and counts as serial; "
                        "default: serial)")
    g.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                   help="spread the configurations over an existing Dask cluster "
                        "(paper plan, modular field; same result and counts as serial; "
                        "default: serial)")


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
    if args.field != "modular" or args.plan != "paper":
        raise bad_input(f"{flag} spreads the paper plan over the modular field: needs "
                        f"--field modular and --plan paper")
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise bad_input(f"{flag} needs Dask: pip install 'exactlearn[dask]'") from None
    logging.getLogger("distributed").setLevel(logging.ERROR)
    if workers is not None:
        import dask
        # the workers' statistical profiler samples every thread's stack 100 times a second,
        # taking the GIL from the oracle and the analysis (about 15 % of a run at d = 32)
        with dask.config.set({"distributed.worker.profile.enabled": False}), \
                LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                             dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
            yield client
        return
    try:
        client = Client(address, timeout=10)
    except (OSError, TimeoutError, ValueError) as exc:
        raise bad_input(f"--scheduler {address}: cannot reach the Dask scheduler ({exc})") from None
    with client:
        yield client
