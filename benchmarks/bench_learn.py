"""Benchmarks of issues 2 and 3: whole CLI processes, wall time, learner vs oracle.

    python benchmarks/bench_learn.py            # the targets below, 3 runs each
    python benchmarks/bench_learn.py --sympy    # also the plain sympy reference (slow)

Each case runs ``--repeat`` times (default 3); the median and the range are printed
(a shared 2-core machine is noisy).  Over the modular field ``queries`` is the total
over the primes of the multi-modular method; the per-prime counts follow it.

Targets (2-core machine): rational d=4, H=3, --range 50 < 5 s (issue 2) and at
least 20x faster than the plain sympy reference, about 0.75 s (issue 3);
modular d=12, H=6 <= 15 s; d=16, H=8 <= 40 s; learner_seconds <= 2x oracle.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = [  # (name, field, d, H, range, target seconds)
    ("rational d=4 H=3 R=50", "rational", 4, 3, 50, 0.75),
    ("modular d=12 H=6", "modular", 12, 6, None, 15.0),
    ("modular d=16 H=8", "modular", 16, 8, None, 40.0),
]


def run(cmd):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return time.perf_counter() - t0, p


def med(xs, fmt="{:.2f}"):
    """median (min-max)"""
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sympy", action="store_true", help="also time benchmarks/sympy_reference.py")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (median and range)")
    args = ap.parse_args(argv)
    exe = [sys.executable, "-m", "exactlearn.cli"]
    tmp = tempfile.mkdtemp()
    print(f"median (min-max) of {args.repeat} runs; {os.cpu_count()} cores")
    print(f"{'case':24} {'wall s':>16} {'target':>7} {'learner s':>19} {'oracle s':>19} "
          f"{'learner/oracle':>16} {'queries':>8}  per prime  status")
    for name, field, d, H, R, target in CASES:
        path = os.path.join(tmp, f"m{d}.json")
        subprocess.run(exe + ["random-model", "--d", str(d), "--heads", str(H), "--seed", "3",
                              "--den", "1", "--out", path], check=True)
        cmd = exe + ["learn", "--model", path, "--field", field, "--heads", str(H),
                     "--seed", str(args.seed), "--json"] + (["--range", str(R)] if R else [])
        walls, rs = [], []
        for _ in range(args.repeat):
            wall, p = run(cmd)
            walls.append(wall)
            rs.append(json.loads(p.stdout))
        r = rs[0]
        per = [q["queries"] for q in (r.get("multimodular") or {}).get("primes", [])]
        print(f"{name:24} {med(walls):>16} {target:7.2f} {med([x['learner_seconds'] for x in rs], '{:.3f}'):>19} "
              f"{med([x['oracle_seconds'] for x in rs], '{:.3f}'):>19} "
              f"{med([x['learner_seconds'] / x['oracle_seconds'] for x in rs], '{:.1f}'):>16} "
              f"{r['queries']:8d}  {'+'.join(map(str, per)) or '-':9}  {r['status']}")
        if args.sympy and field == "rational":
            here = os.path.dirname(os.path.abspath(__file__))
            ws = [run([sys.executable, os.path.join(here, "sympy_reference.py"), path, str(H),
                       "--seed", str(args.seed), "--range", str(R)])[0] for _ in range(args.repeat)]
            print(f"{'  plain sympy reference':24} {med(ws):>16}   speed-up of exactlearn "
                  f"(median/median): {statistics.median(ws) / statistics.median(walls):.0f}x")


if __name__ == "__main__":
    main()
