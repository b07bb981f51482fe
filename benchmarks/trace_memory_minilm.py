"""Where the memory of a MiniLM coordinate-block learn goes (docs: explanation/performance.md,
"A MiniLM layer at full width").

    PYTHONPATH=$PWD python benchmarks/trace_memory_minilm.py 128

Learns the first D coordinates of all-MiniLM-L6-v2's layer 0 as ``bench_minilm_full.py`` does
(efficient plan, rank 32, modular field, seed 1) under ``tracemalloc`` (8 frames), snapshots the
traced Python allocations whenever they grow by 10 % (a thread, every 2 s), and prints the
status, the queries, the traced peak, the process's peak resident size, and the largest
allocation sites of the last snapshot (by traceback, then by line).  tracemalloc sees Python
objects only (not python-flint's C allocations) and slows the run several times (D = 16:
148 s here against 13 s without it).
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    from bench_minilm_full import exact_layer
    from exactlearn import Modular, Oracle, learn
    D = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    model, _ = exact_layer(0, D)
    tracemalloc.start(8)
    best = [0, None]
    done = threading.Event()

    def watch():
        while not done.is_set():
            cur, _ = tracemalloc.get_traced_memory()
            if cur > best[0] * 1.1:
                best[0], best[1] = cur, tracemalloc.take_snapshot()
            time.sleep(2)

    threading.Thread(target=watch, daemon=True).start()
    t = time.time()
    res = learn(Oracle(model, Modular()), D, heads=12, plan="efficient", rank=32, seed=1)
    done.set()
    print(f"D = {D}: status {res.status}, queries {res.queries}, {time.time() - t:.0f} s; traced "
          f"peak {tracemalloc.get_traced_memory()[1] >> 20} MB, last snapshot at {best[0] >> 20} "
          f"MB; peak resident {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} MB")
    for st in best[1].statistics("traceback")[:6]:
        print(f"{st.size >> 20} MB in {st.count} blocks")
        for line in st.traceback.format()[-8:]:
            print("   ", line)
    for st in best[1].statistics("lineno")[:12]:
        print(f"{st.size >> 20} MB in {st.count} blocks at {st.traceback.format()[0].strip()}")


if __name__ == "__main__":
    main()
