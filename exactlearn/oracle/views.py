"""The learner's field of a box (:func:`resolve_field`) and a box of m outputs seen as one scalar box (:class:`OutputsView`; docs: explanation/biases.md#vector-outputs).
"""

from __future__ import annotations

from exactlearn.errors import BadBlackBox, DegenerateDraw, FieldError, NonFiniteAnswer, TooLarge
from exactlearn.fields.base import Field
from exactlearn.oracle.adapt import box_name, checked_batch, non_finite


def resolve_field(oracle, field: Field | None) -> tuple:
    """The learner's field (scale filled in) and whether outputs need converting."""
    ofield = getattr(oracle, "field", None)
    if field is not None and not isinstance(field, Field):
        what = (f"the class {field.__name__}: call it, {field.__name__}()"
                if isinstance(field, type) else f"a {type(field).__name__}")
        raise ValueError(f"field must be a field object (Rational(), Modular(), Real(), ...) or "
                         f"a field's name, got {what}")
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

    def __init__(self, box, m: int, K: Field, convert: bool, r, limit: int | None = None,
                 parent: "OutputsView | None" = None):
        self.box = box
        self.m = m
        self.K = K
        self.convert = convert
        self.r = list(r)
        self._rK = [K(x) for x in self.r]
        self.field = K
        self.records: list = []
        self.views: list = []
        self.limit = limit                # most values recorded over every view, or None
        self.parent = parent
        self.__name__ = self.__qualname__ = box_name(box)
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
        view = OutputsView(sub, self.m, field, not (isinstance(bf, Field) and bf == field), self.r,
                           self.limit, self)
        self.views.append(view)
        return view

    def held(self) -> int:
        """Answers recorded by this view and its views modulo other primes (queries)."""
        top = self if self.parent is None else self.parent
        return len(top.records) + sum(len(v.records) for v in top.views)

    def _room(self, n: int) -> None:
        """Refuse (TooLarge, before asking) n more queries past ``limit`` values."""
        if self.limit is not None and (self.held() + n) * self.m > self.limit:
            from exactlearn.limits import MAX_PLAN_BYTES, output_value_bytes
            raise TooLarge(f"outputs={self.m}: the run has recorded {self.held()} answers of "
                           f"{self.m} values; more would pass {self.limit} values (about "
                           f"{MAX_PLAN_BYTES} bytes at {output_value_bytes(self.K.name)} bytes a "
                           f"value over the {self.K.name} field; MAX_PLAN_BYTES, "
                           f"docs/reference/cli.md, \"Limits\"): lower outputs=, d or the "
                           f"head bound")

    def _bad(self, what: str, answered: int, longest: int, sep: str = ", not "):
        m = self.m
        return BadBlackBox(f"the black box {self.__name__} answered {what}{sep}outputs={m} "
                           f"values (expected a list of {m} or an array of shape ({m},))",
                           answered, longest)

    def row(self, y, longest: int, answered: int = 1, index: int = 0) -> list:
        """The m answers of one query as field elements (else BadBlackBox, or NonFiniteAnswer
        naming the output; ``index``: its place in a batch)."""
        m = self.m
        shape = getattr(y, "shape", None)
        if isinstance(shape, tuple) and shape and shape != (m,):
            raise self._bad(f"an array of shape {shape} per query", answered, longest)
        if not _is_row(y):
            if m == 1:
                y = [y]
            else:
                raise self._bad("one value", answered, longest, ", not a vector of ")
        try:
            ys = list(y)
        except TypeError:
            raise self._bad(f"{type(y).__name__} per query", answered, longest) from None
        if len(ys) != m:
            raise self._bad(f"{len(ys)} value{'s' if len(ys) != 1 else ''} per query", answered,
                            longest)
        if not self.convert:
            return ys
        K = self.K
        try:
            return [K.from_output(a) for a in ys]
        except (ValueError, TypeError, FieldError) as exc:
            for j, a in enumerate(ys):
                bad = non_finite(a)
                if bad is not None:
                    raise NonFiniteAnswer(self.__name__, bad, j + 1, m, answered, longest,
                                          index) from None
            err = DegenerateDraw(f"the black box returned a value that is not in the {K.name} "
                                 f"field: {exc}")
            err.answered, err.longest = answered, longest     # answered: the Recorder counts it
            raise err from None
        except MemoryError:
            raise TooLarge(f"out of memory recording the answers of outputs={m} (after "
                           f"{self.held()} queries): lower outputs=, d or the head bound") from None

    def _combine(self, tokens, ys):
        self.records.append((tokens, ys))
        acc = self.K.zero
        for a, b in zip(self._rK, ys):
            acc = acc + a * b
        return acc

    def __call__(self, tokens):
        self._room(1)
        return self._combine(tokens, self.row(self.box(tokens), len(tokens)))

    def _batch(self, queries) -> list:
        self._room(len(queries))
        answers = checked_batch(self.box, self.box.batch, queries)
        longest = max((len(q) for q in queries), default=0)
        rows = [self.row(y, longest, len(queries), i) for i, y in enumerate(answers)]
        return [self._combine(q, ys) for q, ys in zip(queries, rows)]
