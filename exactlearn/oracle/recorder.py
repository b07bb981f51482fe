"""The learner's side of the black box: :class:`Recorder` counts, times and records every observation (docs: explanation/algorithm.md#how-it-works).
"""

from __future__ import annotations

import math
import time

from exactlearn.errors import (BadBlackBox, DegenerateDraw, FieldError, NonFiniteAnswer,
                               mark_box_failure)
from exactlearn.fields.base import Field
from exactlearn.oracle.adapt import box_name, checked_batch, non_finite


class Recorder:
    """The learner's side of the black box: counts, times and records every observation.

    Every learner asks through one Recorder, so ``queries``, ``max_length`` and
    ``seconds`` cover every call the black box answered (docs: explanation/algorithm.md#how-it-works).
    ``convert`` turns answers into elements of ``K``; an answer outside ``K``
    raises :class:`~exactlearn.errors.DegenerateDraw` (it was answered, so it
    is counted).  A :meth:`child` records its own observations (e.g. modulo
    another prime) and adds its counts to its parent's, so the root counts
    every call.

    >>> from exactlearn.fields import QQ
    >>> rec = Recorder(lambda tokens: len(tokens), QQ, convert=True)
    >>> rec([(1,), (2,)]), rec.queries, rec.max_length, rec.observations
    (mpq(2,1), 1, 2, [([(1,), (2,)], mpq(2,1))])
    """

    def __init__(self, oracle, K: Field, convert: bool, parent=None, keep: bool = True):
        self.oracle = oracle
        self.K = K
        self.convert = convert
        self.parent = parent
        self.keep = keep                  # False: count and convert, keep no observations
        self.observations = []
        self.queries = 0
        self.max_length = 0
        self.seconds = 0.0
        self.progress = None              # the root's exactlearn.progress.Progress, if any

    def child(self, oracle, K: Field, convert: bool = True, keep: bool = True) -> "Recorder":
        """A recorder of its own observations whose counts also go to this one (with
        ``keep=False`` it streams: counts, but keeps no observations)."""
        return Recorder(oracle, K, convert, parent=self, keep=keep)

    def _count(self, length, seconds):
        """One answered query of ``length`` tokens (``None``: time spent, no answer)."""
        self.seconds += seconds
        if length is not None:
            self.queries += 1
            self.max_length = max(self.max_length, length)
        if self.parent is not None:
            self.parent._count(length, seconds)
        elif self.progress is not None and self.queries >= self.progress.next_at:
            self.progress.asked(self.queries)       # every progress.step queries, not each

    def add_remote(self, queries: int, max_length: int, seconds: float) -> None:
        """Count ``queries`` answered by a copy of the black box elsewhere (a Dask worker:
        :mod:`exactlearn.pipeline.distributed`); they go to the parents too."""
        self.queries += queries
        self.max_length = max(self.max_length, max_length)
        self.seconds += seconds
        if self.parent is not None:
            self.parent.add_remote(queries, max_length, seconds)
        elif self.progress is not None and self.queries >= self.progress.next_at:
            self.progress.asked(self.queries)

    def __call__(self, tokens):
        t0 = time.perf_counter()
        try:
            y = self.oracle(tokens)
        except (BadBlackBox, DegenerateDraw) as exc:   # answered, not as it should be: counted
            answered = getattr(exc, "answered", 0)
            self._count(len(tokens) if answered else None, time.perf_counter() - t0)
            _number(exc, self._root().queries)
            raise
        except BaseException as exc:    # the box's own (RuntimeError, ...): it propagates
            self._count(None, time.perf_counter() - t0)
            mark_box_failure(exc, box_name(self.oracle))
            raise
        self._count(len(tokens), time.perf_counter() - t0)
        return self._record(tokens, y, self._root().queries)

    def ask_all(self, queries) -> list:
        """``[self(tokens) for tokens in queries]``: every query asked, in order, timed and
        counted as by ``__call__`` (each call of the box timed on its own), with the counts
        added to this recorder and its parents once at the end -- also when a query
        raises -- instead of query by query (a streamed plan's millions of queries).

        >>> from exactlearn.fields import QQ
        >>> rec = Recorder(lambda tokens: len(tokens), QQ, convert=True)
        >>> sub = rec.child(rec.oracle, QQ, keep=False)
        >>> sub.ask_all([[(1,)], [(1,), (2,)]]), sub.queries, rec.queries, rec.max_length
        ([mpq(1,1), mpq(2,1)], 2, 2, 2)
        """
        clock = time.perf_counter
        oracle, record, root = self.oracle, self._record, self._root()
        conv = self._converter()
        out = []
        n, longest, seconds = 0, 0, 0.0
        tracker = self._progress()          # with progress: counts go up every tracker.step
        flush_at, sent = (tracker.step if tracker is not None else 0), 0
        try:
            for tokens in queries:
                t0 = clock()
                try:
                    y = oracle(tokens)
                except (BadBlackBox, DegenerateDraw) as exc:   # answered, not as it should be
                    if getattr(exc, "answered", 0):
                        n, longest = n + 1, max(longest, len(tokens))
                    _number(exc, root.queries + n - sent)
                    raise
                except BaseException as exc:
                    mark_box_failure(exc, box_name(oracle))
                    raise
                finally:
                    seconds += clock() - t0
                n += 1
                if len(tokens) > longest:
                    longest = len(tokens)
                if conv is None:
                    out.append(record(tokens, y, root.queries + n - sent))
                else:                       # _record's conversion, inline; its errors there
                    try:
                        out.append(conv(y))
                    except (ValueError, TypeError, FieldError):
                        out.append(record(tokens, y, root.queries + n - sent))
                if n == flush_at:           # the same sums, added in parts
                    self._count_many(n - sent, longest, seconds)
                    sent, seconds, flush_at = n, 0.0, n + tracker.step
        finally:
            self._count_many(n - sent, longest, seconds)
        return out

    def _converter(self):
        """What :meth:`_record` does to an answer that converts, when that is all it does
        (``convert``, nothing kept): ``K.from_output`` -- an exact field's ``K(y)`` -- else None."""
        if not self.convert or self.keep:
            return None
        if type(self.K).from_output is Field.from_output:
            return self.K
        return self.K.from_output

    def _root(self) -> "Recorder":
        rec = self
        while rec.parent is not None:
            rec = rec.parent
        return rec

    def _progress(self):
        """The root recorder's progress tracker, or None."""
        return self._root().progress

    def _count_many(self, n, longest, seconds):
        """``n`` answered queries, the longest of ``longest`` tokens, in ``seconds``."""
        self.seconds += seconds
        self.queries += n
        self.max_length = max(self.max_length, longest)
        if self.parent is not None:
            self.parent._count_many(n, longest, seconds)
        elif self.progress is not None and self.queries >= self.progress.next_at:
            self.progress.asked(self.queries)

    def _record(self, tokens, y, at=None):
        """``y`` converted (with ``convert``) and kept; ``at``: the query's number in the run."""
        if self.convert:
            try:
                y = self.K.from_output(y)
            except (ValueError, TypeError, FieldError) as exc:
                bad = non_finite(y)
                if bad is not None:         # nan, inf: one line naming the query
                    err = NonFiniteAnswer(box_name(self.oracle), bad, longest=len(tokens))
                    err.at = at
                    raise err from None
                m = _values(y)
                if m > 1:                   # a vector answer: the caller forgot outputs=m
                    raise BadBlackBox(f"the black box {box_name(self.oracle)} answered {m} "
                                      f"values per query, not one: learn a box of m outputs "
                                      f"with outputs={m} (docs: explanation/biases.md"
                                      f"#vector-outputs)") from None
                raise DegenerateDraw(f"the black box returned a value that is not in the "
                                 f"{self.K.name} field: {exc}") from None
        if self.keep:
            self.observations.append((tokens, y))
        return y

    def ask_many(self, queries) -> list:
        """The answers to a list of queries: one call of the box's ``batch(queries)`` when
        it has one (a jitted or GPU model), else one call per query.  Every query is
        counted and recorded, as by ``__call__``.  A batch that does not answer one value
        per query is bad input (:class:`~exactlearn.errors.BadBlackBox`, naming the box);
        the queries it did answer are counted (every query sent when it returned one value
        too many, the values it returned when too few).

        >>> from exactlearn.fields import QQ
        >>> class Box:
        ...     def __call__(self, tokens): return len(tokens)
        ...     def batch(self, queries): return [len(q) for q in queries]
        >>> rec = Recorder(Box(), QQ, convert=True)
        >>> rec.ask_many([[(1,)], [(1,), (2,)]]), rec.queries, rec.max_length
        ([mpq(1,1), mpq(2,1)], 2, 2)
        >>> class OneTooMany(Box):
        ...     def batch(self, queries): return [len(q) for q in queries] + [0]
        >>> rec = Recorder(OneTooMany(), QQ, convert=True)
        >>> rec.ask_many([[(1,)], [(1,), (2,)]])
        Traceback (most recent call last):
        ...
        exactlearn.errors.BadBlackBox: the black box OneTooMany's batch() answered 3 values for 2 queries (it must answer one value per query, in order)
        >>> rec.queries, rec.observations
        (2, [])
        """
        batch = getattr(self.oracle, "batch", None)
        if batch is None or not queries:
            return [self(q) for q in queries]
        t0 = time.perf_counter()
        try:
            ys = checked_batch(self.oracle, batch, queries)
        except (BadBlackBox, DegenerateDraw) as exc:   # what it answered is counted, then it fails
            answered = getattr(exc, "answered", 0)
            self._count_many(answered, exc.longest if answered else 0, time.perf_counter() - t0)
            _number(exc, self._root().queries - answered + getattr(exc, "index", 0) + 1)
            raise
        except BaseException as exc:
            self._count(None, time.perf_counter() - t0)
            mark_box_failure(exc, box_name(self.oracle))
            try:                        # the note names the batch: none of it was answered
                exc.exactlearn_batch = len(queries)
            except AttributeError:
                pass
            raise
        seconds = time.perf_counter() - t0
        for n, q in enumerate(queries):
            self._count(len(q), seconds if n == 0 else 0.0)
        first = self._root().queries - len(queries) + 1
        return [self._record(q, y, first + i) for i, (q, y) in enumerate(zip(queries, ys))]




def _number(exc, at: int) -> None:
    """A non-finite answer's number in the run (:class:`~exactlearn.errors.NonFiniteAnswer`)."""
    if isinstance(exc, NonFiniteAnswer) and exc.at is None:
        exc.at = at


def _values(y) -> int:
    """How many values an answer holds: the length of a list or tuple, the size of an array
    (numpy, torch, JAX: anything with a ``shape`` of at least one axis), else 1."""
    if isinstance(y, (list, tuple)):
        return len(y)
    shape = getattr(y, "shape", None)
    if isinstance(shape, tuple) and shape and all(isinstance(n, int) for n in shape):
        return math.prod(shape)
    return 1
