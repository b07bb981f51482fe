"""Peak resident memory of a command and of every process it starts (Dask workers included).

    python benchmarks/rss_tree.py python benchmarks/bench_minilm_full.py --plan paper --workers 2

Runs the command, samples the resident size (``psutil``) of it and all its descendants every
half second, and prints on stderr each process's peak and the peak of their sum, then exits
with the command's status.  ``ru_maxrss`` (what the benchmarks print) gives one process only;
a loopback Dask cluster's workers are other processes (docs/explanation/performance.md, "The
paper plan on two Dask workers").  Sampling can miss a spike shorter than half a second.
"""

from __future__ import annotations

import subprocess
import sys
import time

import psutil


def main(argv) -> int:
    if not argv:
        print("rss_tree: give a command to run", file=sys.stderr)
        return 2
    p = subprocess.Popen(argv)
    root = psutil.Process(p.pid)
    peaks: dict = {}
    names: dict = {}
    total_peak = 0
    while p.poll() is None:
        total = 0
        try:
            procs = [root] + root.children(recursive=True)
        except psutil.NoSuchProcess:
            break
        for q in procs:
            try:
                r = q.memory_info().rss
                total += r
                peaks[q.pid] = max(peaks.get(q.pid, 0), r)
                names.setdefault(q.pid, " ".join(q.cmdline())[:90])
            except psutil.Error:
                pass
        total_peak = max(total_peak, total)
        time.sleep(0.5)
    p.wait()
    for pid, r in sorted(peaks.items(), key=lambda t: -t[1]):
        print(f"peak {r / 2**20:8.0f} MB  pid {pid}  {names.get(pid, '')}", file=sys.stderr)
    print(f"peak of the sum {total_peak / 2**20:.0f} MB; rc {p.returncode}", file=sys.stderr)
    return p.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
