"""Benchmarks of issues 2 and 3: whole CLI processes, wall time, learner vs oracle.

    python benchmarks/bench_learn.py            # the targets below
    python benchmarks/bench_learn.py --sympy    # also the plain sympy reference (slow)

Targets (2-core machine): rational d=4, H=3, --range 50 < 5 s (issue 2) and at
least 20x faster than the plain sympy reference, about 0.75 s (issue 3);
modular d=12, H=6 <= 15 s; d=16, H=8 <= 40 s; learner_seconds <= 2x oracle.
"""

from __future__ import annotations

import argparse
import json
import os
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


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sympy", action="store_true", help="also time benchmarks/sympy_reference.py")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    exe = [sys.executable, "-m", "exactlearn.cli"]
    tmp = tempfile.mkdtemp()
    print(f"{'case':24} {'wall s':>8} {'target':>7} {'learner s':>10} {'oracle s':>9} {'queries':>8}  status")
    for name, field, d, H, R, target in CASES:
        path = os.path.join(tmp, f"m{d}.json")
        subprocess.run(exe + ["random-model", "--d", str(d), "--heads", str(H), "--seed", "3",
                              "--den", "1", "--out", path], check=True)
        cmd = exe + ["learn", "--model", path, "--field", field, "--heads", str(H),
                     "--seed", str(args.seed), "--json"] + (["--range", str(R)] if R else [])
        wall, p = run(cmd)
        r = json.loads(p.stdout)
        print(f"{name:24} {wall:8.2f} {target:7.2f} {r['learner_seconds']:10.3f} "
              f"{r['oracle_seconds']:9.3f} {r['queries']:8d}  {r['status']}")
        if args.sympy and field == "rational":
            here = os.path.dirname(os.path.abspath(__file__))
            wall_s, ps = run([sys.executable, os.path.join(here, "sympy_reference.py"), path, str(H),
                              "--seed", str(args.seed), "--range", str(R)])
            print(f"{'  plain sympy reference':24} {wall_s:8.2f}   speed-up of exactlearn: {wall_s / wall:.0f}x")


if __name__ == "__main__":
    main()
