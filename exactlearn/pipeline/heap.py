"""The cyclic garbage collector paused over the learner's own exact work (docs: explanation/performance.md).

The analysis and the certificate of a plan allocate millions of short-lived tuples,
lists and field elements and make no reference cycles of their own, while the live
heap (the plan's queries, their answers, the model) is large.  CPython's generational
collector then keeps running full collections that traverse that heap and free
nothing: about a fifth of the analysis's time at d = 32, H = 16.  :func:`paused_gc`
turns it off for such a phase and restores the state it found; reference counting
frees every object as before, and a cycle made meanwhile (an exception's traceback)
waits for the first collection after the phase.  Results, counts and exceptions are
unchanged: only the collector's timing differs.  The black box's own evaluation is
never inside a pause (its time stays its own).

>>> import gc
>>> with paused_gc():
...     inside = gc.isenabled()
>>> gc.isenabled(), inside
(True, False)
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def paused_gc():
    """The cyclic garbage collector disabled within the block, then restored (also when
    the block raises; a collector already off stays off)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
