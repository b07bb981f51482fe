"""How much of ``oracle_seconds`` is the cyclic garbage collector (docs:
explanation/performance.md#scale): one ``exactlearn learn`` run in this process, the
collector's passes timed (``gc.callbacks``) and split by whether they fell inside a call of
the black box (:class:`exactlearn.oracle.counting.CountingOracle`).  The learner's stored
answers set off full collections over its heap while the box evaluates, timed as the box's;
the analysis and the certificate run with the collector paused (``pipeline/heap.py``).

    exactlearn random-model --d 32 --heads 16 --seed 3 --den 1 --out m.json
    python benchmarks/gc_in_box.py learn --model m.json --field modular --heads 16 --seed 1 --json [--max-height 1048576]

Prints the JSON's ``learner_seconds`` and ``oracle_seconds``, the collector's seconds and
full (generation 2) collections inside the box's calls and outside them, and the oracle's
seconds without the collections inside its calls.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import sys
import time

from exactlearn.cli import main
from exactlearn.oracle import counting

state = {"inside": False, "t0": 0.0}
totals = {True: [0.0, 0], False: [0.0, 0]}      # inside the box: [seconds, full collections]


def _timed(phase, info):
    if phase == "start":
        state["t0"] = time.perf_counter()
        return
    row = totals[state["inside"]]
    row[0] += time.perf_counter() - state["t0"]
    row[1] += info["generation"] == 2


def _inside(call):
    def wrapped(self, tokens):
        state["inside"] = True
        try:
            return call(self, tokens)
        finally:
            state["inside"] = False
    return wrapped


def run(argv) -> None:
    counting.CountingOracle.__call__ = _inside(counting.CountingOracle.__call__)
    gc.callbacks.append(_timed)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    if rc != 0:
        sys.exit(rc)
    got = json.loads(out.getvalue())
    box_gc, box_full = totals[True]
    print(f"learner_seconds {got['learner_seconds']:.3f}  oracle_seconds "
          f"{got['oracle_seconds']:.3f}  collector inside the box's calls {box_gc:.3f} s "
          f"({box_full} full)  outside {totals[False][0]:.3f} s ({totals[False][1]} full)  "
          f"oracle without the collections inside it {got['oracle_seconds'] - box_gc:.3f} s "
          f"({box_gc / got['oracle_seconds']:.1%} of oracle_seconds)")


if __name__ == "__main__":
    run(sys.argv[1:] if len(sys.argv) > 1 else ["--help"])
