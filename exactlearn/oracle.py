"""The black box: a model evaluated through a field, with a query counter.

``Oracle(model, field)`` is callable on a sequence of token vectors and returns
a field element.  It counts the queries (``.queries``), the longest query
(``.max_length``) and the time spent answering (``.seconds``).  A query of k
copies of one token costs work in the number of *distinct* tokens, not in k,
and each head's ``W_h x_n`` is computed once per final token.

When the field's scale D is left on auto (``scale=None``) the oracle fixes it to
the lcm of the W denominators of the model's *raw* heads, as written (docs: howto/field-and-range.md#number-systems-fields):
the black box evaluates every raw head -- cancelling and merging ones included
-- and never substitutes the canonical form for the model.  ``oracle.field`` is
the resolved field, which the learner uses by default.

>>> from exactlearn.model import MultiHeadAttention
>>> from exactlearn.fields import Rational
>>> o = Oracle(MultiHeadAttention([([["1/2", 0], [0, 1]], [1, 1])]), Rational())
>>> o([[2, 0], [2, 0], [0, 2]]), o.queries, o.max_length, o.field.scale
(mpq(2,1), 1, 3, 2)
"""

from __future__ import annotations

import time
from fractions import Fraction

import flint

from gmpy2 import mpq

from exactlearn.errors import BadBlackBox, DegenerateDraw, ExactnessError, FieldError, ModelError
from exactlearn.fields.base import Field
from exactlearn.limits import readable_int
from exactlearn.model import HeadEvaluator, MultiHeadAttention, evaluator
from exactlearn.transformer_model import OneLayerTransformer, TransformerEvaluator, require_ordered


class CountingOracle:
    """A black box that counts its queries (``.queries``), the longest query
    (``.max_length``) and the time spent answering (``.seconds``).

    ``evaluate(tokens)`` computes the answer in ``field``; subclasses bind it
    to a model (:class:`Oracle`, :class:`~exactlearn.transformer_model.TransformerOracle`).
    """

    #: Called with this oracle right after each count, answer or not (``None``: nothing
    #: to call); a Dask worker's ask task records its counts there, so that a worker that
    #: dies leaves them behind (:mod:`exactlearn.pipeline.distributed`).
    listener = None

    def __init__(self, d: int, field: Field, evaluate):
        self.d = d
        self.field = field
        self._eval = evaluate
        self.queries = 0
        self.max_length = 0
        self.seconds = 0.0
        self._parent = None

    def __call__(self, tokens):
        t0 = time.perf_counter()
        try:
            out = self._eval(tokens)
        except BaseException:
            self._count(None, time.perf_counter() - t0)      # time spent, but no answer
            raise
        self._count(len(tokens), time.perf_counter() - t0)
        return out

    def _count(self, length, seconds):
        """Count one answered query of ``length`` tokens (``None``: no answer, time only)."""
        if length is not None:
            self.queries += 1
            self.max_length = max(self.max_length, length)
        self.seconds += seconds
        if self.listener is not None:
            self.listener(self)
        if self._parent is not None:            # a view over another field counts here too
            self._parent._count(length, seconds)

    def add_remote(self, queries: int, max_length: int, seconds: float) -> None:
        """Count ``queries`` answered elsewhere by a copy of this black box (a Dask worker
        evaluating the same model: :mod:`exactlearn.pipeline.distributed`), the longest of
        ``max_length`` tokens, in ``seconds`` of the copy's time."""
        self.queries += queries
        self.max_length = max(self.max_length, max_length)
        self.seconds += seconds
        if self._parent is not None:
            self._parent.add_remote(queries, max_length, seconds)

    def reset(self):
        self.queries = 0
        self.max_length = 0
        self.seconds = 0.0


class Oracle(CountingOracle):
    """Counting black box over a multi-head attention model and a field."""

    def __init__(self, model: MultiHeadAttention, field: Field):
        if field.scale is None:
            field = field.with_scale(model.scale())
        model.check_scale(field)
        self.model = model
        self._heads = model.heads
        super().__init__(model.d, field, evaluator(self._heads, model.d, field, model.constant,
                                                   model.outputs))
        #: m for a model of vector outputs (the answer a list of m values), else None
        self.outputs = model.outputs

    def over(self, field: Field) -> "Oracle":
        """The same model evaluated through another field -- e.g. modulo another
        prime, for the multi-modular method (:mod:`exactlearn.pipeline.multimodular`).

        The view has its own counters, and every query it answers is counted by
        this oracle too, so ``oracle.queries`` is every call the model answered.
        A field on auto scale takes this oracle's D.

        >>> from exactlearn.model import MultiHeadAttention
        >>> from exactlearn.fields import Modular
        >>> o = Oracle(MultiHeadAttention([([["1/2", 0], [0, 1]], [1, 1])]), Modular())
        >>> o2 = o.over(Modular(p=97))
        >>> o2([[2, 0]]) == Modular(p=97)(2), o2.field.scale, o2.queries, o.queries
        (True, 2, 1, 1)
        """
        view = Oracle(self.model, field if field.scale is not None else field.with_scale(self.field.D))
        view._parent = self
        return view

    def check_plan(self, plan) -> int:
        """Largest |D e^T (W_h x + u_h)| over the plan; raise ExactnessError past the field's limit.

        Called by the learner before any query is asked (fail fast)."""
        D = self.field.D
        got = getattr(self, "_scaled", None)
        if got is None or got[0] != D:     # D W_h and D u_h, once per D (a run checks many plans)
            Ws = [[[D * x for x in row] for row in h.W] for h in self._heads]
            us = [[D * x for x in h.u] for h in self._heads]
            if all(x.denominator == 1 for W in Ws for row in W for x in row):
                Ws = [[[int(x.numerator) for x in row] for row in W] for W in Ws]   # fast ints
            self._scaled = got = (D, Ws, us)
        _, Ws, us = got
        biased = any(h.biased for h in self._heads)
        fast = None if biased else _worst_exponent_int(Ws, plan)
        if fast is not None:
            return self._check_worst(fast)
        worst = 0
        wxs: dict = {}                     # D (W_h x + u_h) per distinct final token
        for c in plan.configs:
            wx = wxs.get(c.x)
            if wx is None:
                wx = wxs[c.x] = [[sum(a * b for a, b in zip(row, c.x)) + b0 for row, b0 in zip(W, u)]
                                 for W, u in zip(Ws, us)]
            for w in wx:
                worst = max(worst, abs(sum(a * b for a, b in zip(c.e, w))))
        return self._check_worst(worst)

    def _check_worst(self, worst) -> int:
        limit = self.field.max_exponent
        if limit is not None and worst > limit:
            raise ExactnessError(
                f"the plan needs exp of exponents up to {readable_int(int(worst))} but the "
                f"{self.field.name} field "
                f"realises at most {limit}" + self.field.exponent_hint)
        return int(worst)


def _worst_exponent_int(Ws, plan) -> int:
    """max |e^T (D W_h) x| over the plan's configurations and the heads, for integer D W_h
    and integer tokens: per distinct final token x one python-flint ``fmpz_mat`` product
    of the stacked (D W_h x)^T with the directions e of its configurations (the same
    maximum as the dot products one by one).  None when some entry is not an int."""
    if not Ws or not all(type(x) is int for W in Ws for row in W for x in row):
        return None
    by_x: dict = {}
    for c in plan.configs:
        by_x.setdefault(c.x, []).append(c.e)
    if not all(type(a) is int for t in set(by_x) | {e for es in by_x.values() for e in es} for a in t):
        return None
    d = len(Ws[0])
    stacked = flint.fmpz_mat([row for W in Ws for row in W])            # (H d) x d
    worst = 0
    for x, es in by_x.items():
        wx = stacked * flint.fmpz_mat(d, 1, list(x))                    # the D W_h x, stacked
        WX = flint.fmpz_mat(len(Ws), d, wx.entries())                   # row h: (D W_h x)^T
        Em = flint.fmpz_mat(d, len(es), [e[r] for r in range(d) for e in es])
        worst = max(worst, max(abs(int(v)) for v in (WX * Em).entries()))
    return worst


class TransformerOracle(CountingOracle):
    """Counting black box over a :class:`OneLayerTransformer` and an ordered field.

    Like :class:`exactlearn.oracle.Oracle`: ``.queries``, ``.max_length``,
    ``.seconds``; a field left on auto scale gets D = lcm of the W denominators.
    """

    def __init__(self, model: OneLayerTransformer, field: Field):
        require_ordered(field)
        if field.scale is None:
            field = field.with_scale(model.scale())
        self.model = model
        super().__init__(model.d, field, TransformerEvaluator(model, field))


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
            raise
        except BaseException:
            self._count(None, time.perf_counter() - t0)
            raise
        self._count(len(tokens), time.perf_counter() - t0)
        return self._record(tokens, y)

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
        oracle, record = self.oracle, self._record
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
                    raise
                finally:
                    seconds += clock() - t0
                n += 1
                if len(tokens) > longest:
                    longest = len(tokens)
                out.append(record(tokens, y))
                if n == flush_at:           # the same sums, added in parts
                    self._count_many(n - sent, longest, seconds)
                    sent, seconds, flush_at = n, 0.0, n + tracker.step
        finally:
            self._count_many(n - sent, longest, seconds)
        return out

    def _progress(self):
        """The root recorder's progress tracker, or None."""
        rec = self
        while rec.parent is not None:
            rec = rec.parent
        return rec.progress

    def _count_many(self, n, longest, seconds):
        """``n`` answered queries, the longest of ``longest`` tokens, in ``seconds``."""
        self.seconds += seconds
        self.queries += n
        self.max_length = max(self.max_length, longest)
        if self.parent is not None:
            self.parent._count_many(n, longest, seconds)
        elif self.progress is not None and self.queries >= self.progress.next_at:
            self.progress.asked(self.queries)

    def _record(self, tokens, y):
        if self.convert:
            try:
                y = self.K.from_output(y)
            except (ValueError, TypeError, FieldError) as exc:
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
            raise
        except BaseException:
            self._count(None, time.perf_counter() - t0)
            raise
        seconds = time.perf_counter() - t0
        for n, q in enumerate(queries):
            self._count(len(q), seconds if n == 0 else 0.0)
        return [self._record(q, y) for q, y in zip(queries, ys)]


def box_name(box) -> str:
    """How a failure names a black box: its function's or class's name (the box inside a
    :class:`TokenAdapter`)."""
    box = box.box if isinstance(box, TokenAdapter) else box
    name = getattr(box, "__qualname__", None)
    return name if isinstance(name, str) else type(box).__qualname__


def checked_batch(box, batch, queries) -> list:
    """``batch(queries)`` as a list of exactly one answer per query; anything else raises
    :class:`~exactlearn.errors.BadBlackBox` naming ``box``, with ``answered`` the number of
    queries it answered: every query sent when it returned too many values (the extra ones
    answer nothing that was asked), the values it returned when too few."""
    out = batch(queries)
    longest = max((len(q) for q in queries), default=0)
    try:
        ys = list(out)
    except TypeError:
        raise BadBlackBox(f"the black box {box_name(box)}'s batch() returned "
                          f"{type(out).__name__}, not one value per query", 0, longest) from None
    if len(ys) != len(queries):
        raise BadBlackBox(f"the black box {box_name(box)}'s batch() answered {len(ys)} values "
                          f"for {len(queries)} queries (it must answer one value per query, in "
                          f"order)", min(len(ys), len(queries)), longest)
    return ys


#: What ``learn(tokens=...)`` sends a black box: the exact rationals (default), or floats.
TOKEN_KINDS = ("exact", "float", "float64", "float32")


class TokenAdapter:
    """A black box that takes float tokens, seen by the learner as one that takes exact
    rationals (``learn(tokens=...)``; docs: howto/float-black-box.md).

    ``kind``: ``"float"`` sends a list of lists of Python floats, ``"float64"`` /
    ``"float32"`` a 2-D numpy array (one row per token) of that dtype.  A token entry that
    the float type cannot hold exactly is refused (:class:`~exactlearn.errors.ModelError`),
    never rounded: the learner analyses the query it asked.  ``batch`` is forwarded, and
    must answer one value per query (else :class:`~exactlearn.errors.BadBlackBox`).

    >>> box = TokenAdapter(lambda X: float(X.sum()), "float64")
    >>> from gmpy2 import mpq
    >>> box([(mpq(1, 2), mpq(3))]), box.field is None
    (3.5, True)
    """

    def __init__(self, box, kind):
        if kind not in TOKEN_KINDS or kind == "exact":
            raise ModelError(f"tokens must be one of {', '.join(TOKEN_KINDS)}, got {kind!r}")
        self.box = box
        self.kind = kind
        self.field = getattr(box, "field", None)
        self.noise = getattr(box, "noise", None)
        self._cache: dict = {}
        if hasattr(box, "batch"):           # one value per query, checked (BadBlackBox)
            self.batch = lambda queries: checked_batch(
                box, box.batch, [self._convert(q) for q in queries])

    def _row(self, t):
        row = self._cache.get(t)
        if row is None:
            import numpy as np
            dtype = np.float32 if self.kind == "float32" else np.float64
            vals = [dtype(float(a)) for a in t]
            for a, f in zip(t, vals):
                if Fraction(float(f)) != Fraction(int(mpq(a).numerator), int(mpq(a).denominator)):
                    raise ModelError(f"the token entry {a} is not exactly a {self.kind} number "
                                     f"(the stable plan's tokens are: plan='stable')")
            row = self._cache[t] = [float(f) for f in vals]
        return row

    def _convert(self, tokens):
        tokens = list(tokens)       # alive while the ids below are used
        seen: dict = {}             # a query repeats its tokens: each distinct object once
        rows, runs = [], []         # runs of the same token object: [row index, copies]
        prev = None
        for t in tokens:
            if t is prev:
                runs[-1][1] += 1
                continue
            prev = t
            i = seen.get(id(t))
            if i is None:
                i = seen[id(t)] = len(rows)
                rows.append(self._row(tuple(t)))
            runs.append([i, 1])
        if self.kind == "float":
            return [rows[i] for i, n in runs for _ in range(n)]
        import numpy as np
        U = np.array(rows, dtype=np.float32 if self.kind == "float32" else np.float64)
        idx, counts = zip(*runs) if runs else ((), ())
        return np.repeat(U[list(idx)], list(counts), axis=0) if runs else U

    def __call__(self, tokens):
        return self.box(self._convert(tokens))


def resolve_field(oracle, field: Field | None) -> tuple:
    """The learner's field (scale filled in) and whether outputs need converting."""
    ofield = getattr(oracle, "field", None)
    if field is None:
        if ofield is None:
            raise ValueError("learn() needs field= for a black box without a .field")
        field = ofield
    if field.scale is None:
        field = field.with_scale(ofield.scale if isinstance(ofield, Field) and ofield.scale else 1)
    return field, not (isinstance(ofield, Field) and ofield == field)


def _is_row(y) -> bool:
    """True for an answer that is a sequence of values (a list, tuple or 1-d array)."""
    if isinstance(y, (list, tuple)):
        return True
    ndim = getattr(y, "ndim", None)
    return isinstance(ndim, int) and ndim >= 1


class OutputsView:
    """A black box of ``m`` outputs seen as the scalar box ``r . y`` (``learn(..., outputs=m)``;
    docs: explanation/biases.md#vector-outputs).

    Each query is asked of ``box`` once; its m answers are converted into ``K`` (with
    ``convert``), recorded in ``records`` as ``(tokens, [y_1, ..., y_m])``, and the
    combination ``sum_j r_j y_j`` is returned (a field element).  An answer that is not m
    values raises :class:`~exactlearn.errors.BadBlackBox` naming the box (the query was
    answered: ``answered`` counts it).  ``batch``, ``check_plan`` and ``over`` (a view modulo
    another prime, recording in its own ``records``; listed in ``views``) follow the box's.

    >>> from exactlearn.fields import QQ
    >>> view = OutputsView(lambda tokens: [len(tokens), 1], 2, QQ, True, [3, 5])
    >>> view([(1,), (2,)]), view.records
    (mpq(11,1), [([(1,), (2,)], [mpq(2,1), mpq(1,1)])])
    >>> view([(1,)] * 3 + [(2,)]) - 17, len(view.records)
    (mpq(0,1), 2)
    """

    def __init__(self, box, m: int, K: Field, convert: bool, r):
        self.box = box
        self.m = m
        self.K = K
        self.convert = convert
        self.r = list(r)
        self._rK = [K(x) for x in self.r]
        self.field = K
        self.records: list = []
        self.views: list = []
        self.__name__ = box_name(box)
        if hasattr(box, "batch"):
            self.batch = self._batch
        if hasattr(box, "check_plan"):
            self.check_plan = box.check_plan
        if hasattr(box, "over"):
            self.over = self._over

    def redraw(self, r) -> None:
        """A new combination r (a new attempt): the records and the views are cleared."""
        self.r = list(r)
        self._rK = [self.K(x) for x in self.r]
        self.records.clear()
        self.views.clear()

    def _over(self, field: Field) -> "OutputsView":
        sub = self.box.over(field)
        bf = getattr(sub, "field", None)
        view = OutputsView(sub, self.m, field, not (isinstance(bf, Field) and bf == field), self.r)
        self.views.append(view)
        return view

    def row(self, y, longest: int, answered: int = 1) -> list:
        """The m answers of one query as field elements (else BadBlackBox)."""
        m = self.m
        if not _is_row(y):
            if m == 1:
                y = [y]
            else:
                raise BadBlackBox(f"the black box {self.__name__} answered one value, not a vector "
                                  f"of outputs={m} values", answered, longest)
        try:
            ys = list(y)
        except TypeError:
            raise BadBlackBox(f"the black box {self.__name__} answered {type(y).__name__}, not a "
                              f"vector of outputs={m} values", answered, longest) from None
        if len(ys) != m:
            raise BadBlackBox(f"the black box {self.__name__} answered {len(ys)} values per query, "
                              f"not outputs={m}", answered, longest)
        if not self.convert:
            return ys
        K = self.K
        try:
            return [K.from_output(a) for a in ys]
        except (ValueError, TypeError, FieldError) as exc:
            err = DegenerateDraw(f"the black box returned a value that is not in the {K.name} "
                                 f"field: {exc}")
            err.answered, err.longest = answered, longest     # answered: the Recorder counts it
            raise err from None

    def _combine(self, tokens, ys):
        self.records.append((tokens, ys))
        acc = self.K.zero
        for a, b in zip(self._rK, ys):
            acc = acc + a * b
        return acc

    def __call__(self, tokens):
        return self._combine(tokens, self.row(self.box(tokens), len(tokens)))

    def _batch(self, queries) -> list:
        answers = checked_batch(self.box, self.box.batch, queries)
        longest = max((len(q) for q in queries), default=0)
        rows = [self.row(y, longest, len(queries)) for y in answers]
        return [self._combine(q, ys) for q, ys in zip(queries, rows)]
