"""How far a long learn is: typed, throttled events to a callback (docs: howto/progress.md).

``learn(..., progress=callback)`` calls ``callback(event)`` with a
:class:`ProgressEvent`: the phase (``"probe"``, ``"ask"``, ``"analyse"``,
``"certify"``, ``"confirm"``, ``"verify"``, ``"polish"``), how much of it is done out of
its total (queries, or configurations, or 1 step), the multi-modular prime it belongs to
(1 for the first prime asked, 2 for the next, ...), the attempt, and a short detail.

The events are throttled: a phase's first and last events are always sent, the others
at most every ``min_interval`` seconds, and the black box's counter looks at the tracker
only every ``step`` queries (about a hundredth of the phase), never one Python call per
query.  Progress only reads the counts: it never changes a result or a count.

Within a phase ``done`` never decreases, and a phase that ends (the next phase starts,
or the run is certified) ends with ``done == total``: a phase that asked fewer queries
than planned (queries answered from memory) ends with its total lowered to what it did,
one that asked more with its total raised.

>>> events = []
>>> p = Progress(events.append, min_interval=0)
>>> p.phase("analyse", 3, unit="configurations"); p.advance(2); p.advance(); p.finish()
>>> [(e.phase, e.done, e.total) for e in events]
[('analyse', 0, 3), ('analyse', 2, 3), ('analyse', 3, 3)]

A tqdm bar (or anything with ``total``, ``update(n)`` and ``set_description(s)``)
follows the events through :func:`bar_callback`; see docs/howto/progress.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from dataclasses import dataclass

#: The phases the learner reports, in the order a run may meet them.
PHASES = ("probe", "ask", "analyse", "certify", "confirm", "verify", "polish")

_NEVER = float("inf")


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a learn's progress (docs: howto/progress.md).

    Attributes
    ----------
    phase : str
        One of :data:`PHASES`.
    done, total : int
        How much of the phase is done, out of its total (``0 <= done``; ``done == total``
        on the phase's last event).
    unit : str
        ``"queries"`` (the black box's answers), ``"configurations"`` or ``"steps"``.
    prime : int or None
        Modular field, multi-modular method: the prime's number in the order asked
        (1, 2, ...); None otherwise.
    attempt : int
        The draw (1, then 2, ... with ``retries``).
    detail : str
        ``"analysis"`` or ``"confirmation"`` for a prime; else empty.
    """

    phase: str
    done: int
    total: int
    unit: str = "queries"
    prime: int | None = None
    attempt: int = 1
    detail: str = ""

    def describe(self) -> str:
        """A one-line label: phase, prime or attempt.

        >>> ProgressEvent("ask", 5, 10, prime=2, detail="analysis", attempt=1).describe()
        'ask · prime 2 (analysis)'
        """
        where = "" if self.prime is None else f" · prime {self.prime}" + (
            f" ({self.detail})" if self.detail else "")
        return f"{self.phase}{where}" + (f" · attempt {self.attempt}" if self.attempt > 1 else "")


class Progress:
    """Turns the learner's steps into throttled :class:`ProgressEvent` calls of ``callback``.

    ``bind(recorder)`` attaches it to the root :class:`~exactlearn.oracle.Recorder`; a
    phase counted in ``"queries"`` then follows that recorder's count: the recorder calls
    :meth:`asked` when its count reaches :attr:`next_at`.
    """

    def __init__(self, callback, min_interval: float = 0.1, steps: int = 100):
        self.callback = callback
        self.min_interval = min_interval
        self.steps = steps
        self.root = None
        self.attempt = 1
        self.prime = None
        self.detail = ""
        self.asking = "ask"             # what asking the plan is called now ("confirm")
        self.next_at = _NEVER            # the root recorder's count at which to call asked()
        self.step = 256                  # queries between two looks
        self._phase = None
        self._unit = "queries"
        self._done = self._total = self._start = 0
        self._last = 0.0
        self._sent = None                # (phase, done, total) of the last event sent
        self._where = (None, 1, "")

    # -- where the run is ------------------------------------------------------------
    def bind(self, recorder) -> None:
        """Count this recorder's queries (the root: it sees every query)."""
        self.root = recorder
        recorder.progress = self

    def at(self, prime=None, detail: str = "", asking: str = "ask", attempt: int | None = None) -> None:
        """The prime (its number in the order asked) and role of what follows."""
        self.prime, self.detail, self.asking = prime, detail, asking
        if attempt is not None:
            self.attempt = attempt

    # -- phases ----------------------------------------------------------------------
    def phase(self, name: str, total: int, unit: str = "queries") -> None:
        """Start a phase of ``total`` units; the open phase ends first (:meth:`finish`)."""
        self.finish()
        self._phase, self._unit, self._total, self._done = name, unit, max(0, int(total)), 0
        self._where = (self.prime, self.attempt, self.detail)     # a phase keeps its own
        self.step = max(1, -(-self._total // self.steps))      # at most `steps` looks
        if unit == "queries" and self.root is not None:
            self._start = self.root.queries
            self.next_at = self._start + (min(self.step, self._total) or self.step)
        else:
            self.next_at = _NEVER
        self._emit(force=True)

    def stage(self, name: str) -> None:
        """A phase of one step, done when the next phase starts; nothing when that phase is
        the open one already (of the same prime and attempt)."""
        if (self._phase, self._unit, self._total) == (name, "steps", 1) and \
                self._where == (self.prime, self.attempt, self.detail) and self._done == 0:
            return
        self.phase(name, 1, unit="steps")

    def asked(self, queries: int) -> None:
        """The root recorder has answered ``queries`` in all (called every :attr:`step`)."""
        if self._phase is None or self._unit != "queries":
            self.next_at = _NEVER
            return
        end = self._start + self._total         # look again at the phase's last query too
        self.next_at = queries + self.step if queries >= end else min(queries + self.step, end)
        self._set(queries - self._start)

    def advance(self, n: int = 1) -> None:
        """``n`` more units of a phase not counted in queries."""
        if self._phase is not None and self._unit != "queries":
            self._set(self._done + n)

    def finish(self) -> None:
        """End the open phase: its last event, ``done == total`` (the total corrected to
        what was done for a phase counted in queries)."""
        if self._phase is None:
            return
        if self._unit == "queries" and self.root is not None:
            self._done = max(self._done, self.root.queries - self._start)
            self._total = self._done
        else:
            self._done = self._total
        self._emit(force=True)
        self._phase, self.next_at = None, _NEVER

    def _set(self, done: int) -> None:
        if done <= self._done:
            return
        self._done = done
        if done > self._total:
            self._total = done
        self._emit(force=done == self._total)

    def _emit(self, force: bool) -> None:
        now = time.perf_counter()
        sent = (self._phase, self._done, self._total, self._where)
        if sent == self._sent or (not force and now - self._last < self.min_interval):
            return
        self._last, self._sent = now, sent
        prime, attempt, detail = self._where
        self.callback(ProgressEvent(self._phase, self._done, self._total, self._unit,
                                    prime, attempt, detail))


class _Off(Progress):
    """No progress: every hook does nothing."""

    def __init__(self):
        super().__init__(None)

    def bind(self, recorder) -> None:
        pass

    def at(self, prime=None, detail: str = "", asking: str = "ask", attempt: int | None = None) -> None:
        pass

    def phase(self, name: str, total: int, unit: str = "queries") -> None:
        pass

    def asked(self, queries: int) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def finish(self) -> None:
        pass


OFF = _Off()

_CURRENT: contextvars.ContextVar = contextvars.ContextVar("exactlearn_progress", default=OFF)


def current() -> Progress:
    """The tracker of the learn running in this context (:data:`OFF` when none)."""
    return _CURRENT.get()


@contextlib.contextmanager
def using(tracker):
    """Make ``tracker`` (a :class:`Progress`, or None for none) the current one inside."""
    token = _CURRENT.set(OFF if tracker is None else tracker)
    try:
        yield tracker
    finally:
        _CURRENT.reset(token)


def bar_callback(bar):
    """A ``progress=`` callback that drives a tqdm-style bar: ``bar.total`` is set to each
    phase's total, ``bar.update(n)`` advances it, ``bar.set_description`` (when the bar
    has one) names the phase, and a new phase starts the bar again from 0.

    >>> class Bar:                         # what tqdm.tqdm() offers, in brief
    ...     def __init__(self): self.n, self.total = 0, None
    ...     def update(self, k): self.n += k
    ...     def reset(self, total=None): self.n, self.total = 0, total
    >>> bar = Bar()
    >>> cb = bar_callback(bar)
    >>> for e in [ProgressEvent("ask", 0, 8), ProgressEvent("ask", 5, 8), ProgressEvent("ask", 8, 8)]:
    ...     cb(e)
    >>> bar.n, bar.total
    (8, 8)
    """
    state = {"key": None, "done": 0}

    def callback(event: ProgressEvent) -> None:
        key = (event.phase, event.prime, event.attempt, event.detail)
        if key != state["key"] or event.done < state["done"]:     # a new phase
            state["key"], state["done"] = key, 0
            reset = getattr(bar, "reset", None)
            if reset is not None:
                reset(total=event.total)
            else:
                bar.n = 0
            describe = getattr(bar, "set_description", None)
            if describe is not None:
                describe(event.describe())
        bar.total = event.total
        if event.done > state["done"]:
            bar.update(event.done - state["done"])
            state["done"] = event.done

    return callback
