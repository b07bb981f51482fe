"""Where the resident memory of a MiniLM coordinate-block learn grows (docs:
explanation/performance.md, "A MiniLM layer at full width").

    PYTHONPATH=$PWD python benchmarks/trace_rss_minilm.py 384
    PYTHONPATH=$PWD python benchmarks/trace_rss_minilm.py 192 --workers 2   # the paper plan's driver

Learns the first D coordinates of all-MiniLM-L6-v2's layer 0 as ``bench_minilm_full.py``
does (efficient plan, rank 32, modular field, seed 1; with ``--workers N`` the paper plan on a
loopback Dask cluster of N workers, this process its driver).  A thread reads the process's
resident size (``VmRSS``) every half second and, whenever it has grown by 5 % and 20 MB,
prints the time, the size and the main thread's innermost 12 Python frames.  Unlike
``trace_memory_minilm.py`` (tracemalloc) it sees python-flint's and GMP's C allocations
too, and it costs the run almost nothing.  The last line is the status, the queries, the
wall time and the peak resident size (``ru_maxrss``).
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def resident_mb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) >> 10
    return 0


def main() -> None:
    from bench_minilm_full import exact_layer
    from exactlearn import Modular, Oracle, learn
    args = sys.argv[1:]
    workers = int(args[args.index("--workers") + 1]) if "--workers" in args else None
    D = int(args[0]) if args and not args[0].startswith("--") else 64
    model, _ = exact_layer(0, D)
    main_id = threading.get_ident()
    done = threading.Event()
    best = [0]
    t0 = time.time()

    def watch():
        while not done.is_set():
            r = resident_mb()
            if r > best[0] * 1.05 + 20:
                best[0] = r
                stack = traceback.extract_stack(sys._current_frames()[main_id])
                where = " < ".join(f"{s.name}:{s.lineno}" for s in reversed(stack[-12:]))
                print(f"{time.time() - t0:7.1f}s RSS {r} MB  {where}", flush=True)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()
    if workers:
        from dask.distributed import Client, LocalCluster
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True) as cluster, \
                Client(cluster) as client:
            res = learn(Oracle(model, Modular()), D, heads=12, plan="paper", seed=1,
                        executor=client)
    else:
        res = learn(Oracle(model, Modular()), D, heads=12, plan="efficient", rank=32, seed=1)
    done.set()
    print(f"D={D} status {res.status} queries {res.queries} {time.time() - t0:.0f}s peak "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} MB")


if __name__ == "__main__":
    main()
