"""Black boxes over a model that count their queries: :class:`Oracle`, :class:`TransformerOracle` (docs: howto/field-and-range.md#number-systems-fields).
"""

from __future__ import annotations

import time

import flint

from exactlearn.errors import ExactnessError
from exactlearn.fields.base import Field, scale_limit
from exactlearn.limits import readable_int
from exactlearn.model import MultiHeadAttention, evaluator
from exactlearn.transformer_model import OneLayerTransformer, TransformerEvaluator, require_ordered


class CountingOracle:
    """A black box that counts its queries (``.queries``), the longest query
    (``.max_length``) and the time spent answering (``.seconds``).

    ``evaluate(tokens)`` computes the answer in ``field``; subclasses bind it
    to a model (:class:`Oracle`, :class:`TransformerOracle`).
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
    """Counting black box over a multi-head attention model and a field: ``oracle(X)`` is the
    model's output at the final token of the token list X, computed in ``field``; every call
    is counted (``queries``, ``max_length``, ``seconds``).

    Parameters
    ----------
    model : MultiHeadAttention
        The model answering.
    field : Field
        The number system of the answers (docs: howto/field-and-range.md); a field on auto
        scale takes the model's D (``model.scale()``).
    like : Oracle, optional
        Keyword only: an oracle of the same model whose evaluator's field-independent parts
        the new one shares (:meth:`over`); one of another model is ignored.

    Raises
    ------
    ExactnessError
        An exact field whose chosen scale D does not clear the denominators of every raw
        head's W (and u).
    """

    def __init__(self, model: MultiHeadAttention, field: Field, *, like: "Oracle | None" = None):
        if not isinstance(model, MultiHeadAttention):
            raise TypeError(f"Oracle takes a MultiHeadAttention (MultiHeadAttention.from_file("
                            f"path) for a model file), got {type(model).__name__}")
        if not isinstance(field, Field):
            raise TypeError(f"Oracle takes a field object (Rational(), Modular(), Real(), ...), "
                            f"got {type(field).__name__ if not isinstance(field, type) else field.__name__}")
        if like is not None and not isinstance(like, Oracle):
            raise TypeError(f"like= takes another Oracle, got {type(like).__name__}")
        if field.scale is None:
            field = field.with_scale(model.scale(scale_limit(field)))
        model.check_scale(field)
        self.model = model
        self._heads = model.heads
        shared = like._eval if like is not None and like.model is model else None
        super().__init__(model.d, field, evaluator(self._heads, model.d, field, model.constant,
                                                   model.outputs, like=shared))
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
        view = Oracle(self.model, field if field.scale is not None else field.with_scale(self.field.D),
                      like=self)
        view._parent = self
        return view

    def check_plan(self, plan) -> int:
        """Largest |D e^T (W_h x + u_h)| over the plan; raise ExactnessError past the field's limit.

        Called by the learner before any query is asked (fail fast)."""
        D = self.field.D
        got = getattr(self, "_scaled", None)
        shared = getattr(self._eval, "integer_weights", lambda: None)()
        if shared is not None and (got is None or got[0] != D):   # the evaluator's own matrices
            self._scaled = got = (D, shared[0], shared[1])
        if got is None or got[0] != D:     # D W_h and D u_h, once per D (a run checks many plans)
            Ws = [[[D * x for x in row] for row in h.W] for h in self._heads]
            us = [[D * x for x in h.u] for h in self._heads]
            if all(x.denominator == 1 for W in Ws for row in W for x in row):
                Ws = [[[int(x.numerator) for x in row] for row in W] for W in Ws]   # fast ints
            self._scaled = got = (D, Ws, us)
        _, Ws, us = got
        fast = _worst_exponent_int(Ws, us, plan)
        if fast is not None:
            return self._check_worst(fast)
        Ws = [[[int(a) for a in row] for row in W.tolist()] if isinstance(W, flint.fmpz_mat)
              else W for W in Ws]                                        # rows of ints
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
            exc = ExactnessError(
                f"the plan needs exp of exponents up to {readable_int(int(worst))} but the "
                f"{self.field.name} field "
                f"realises at most {limit}" + self.field.exponent_hint)
            exc.worst, exc.limit = int(worst), int(limit)    # for the range adaptation
            raise exc
        return int(worst)


def _worst_exponent_int(Ws, us, plan) -> int:
    """max |e^T (D W_h x + D u_h)| over the plan's configurations and the heads, for integer
    D W_h, D u_h and integer tokens, from python-flint ``fmpz_mat`` products (the same maximum
    as the dot products one by one).  None when some entry is not an int.

    Plans repeat their final tokens x and directions e (the efficient plan at d = 384: 294,913
    configurations over 769 of each), so the values of every pair, E (D W_h) X with the
    distinct e as the rows of E and the distinct x as the columns of X, cost three fast
    matrix products per head, and the configurations' values are read off it; a plan with
    many more pairs than configurations multiplies per distinct x instead."""
    mats = all(isinstance(W, flint.fmpz_mat) for W in Ws)         # the evaluator's, integral
    ints = mats or all(type(x) is int for W in Ws for row in W for x in row)
    ints = ints and all(type(x) is int or getattr(x, "denominator", 0) == 1 for u in us for x in u)
    if not Ws or not ints:
        return None
    xs = list(dict.fromkeys(c.x for c in plan.configs))
    es = list(dict.fromkeys(c.e for c in plan.configs))
    if not all(type(a) is int for t in xs + es for a in t):
        return None
    d = Ws[0].nrows() if mats else len(Ws[0])
    if len(xs) * len(es) <= 4 * len(plan.configs) + 4096:
        return _worst_by_pairs(Ws, us, plan, xs, es)
    by_x: dict = {}
    for c in plan.configs:
        by_x.setdefault(c.x, []).append(c.e)
    stacked = flint.fmpz_mat(len(Ws) * d, d, [int(x) for W in Ws for x in (
        W.entries() if mats else (a for row in W for a in row))])        # (H d) x d
    U = flint.fmpz_mat(len(Ws), d, [int(x) for u in us for x in u])   # row h: (D u_h)^T
    worst = 0
    for x, es_x in by_x.items():
        wx = stacked * flint.fmpz_mat(d, 1, list(x))                    # the D W_h x, stacked
        WX = flint.fmpz_mat(len(Ws), d, wx.entries()) + U               # row h: (D W_h x + D u_h)^T
        Em = flint.fmpz_mat(d, len(es_x), [e[r] for r in range(d) for e in es_x])
        worst = max(worst, max(abs(int(v)) for v in (WX * Em).entries()))
    return worst


def _worst_by_pairs(Ws, us, plan, xs, es) -> int:
    """:func:`_worst_exponent_int` through E (D W_h) X + (E D u_h) 1^T, every pair at once."""
    ix = {x: i for i, x in enumerate(xs)}
    ie = {e: i for i, e in enumerate(es)}
    at = [ie[c.e] * len(xs) + ix[c.x] for c in plan.configs]
    E = flint.fmpz_mat([list(e) for e in es])
    X = flint.fmpz_mat([list(x) for x in xs]).transpose()
    ones = flint.fmpz_mat(1, len(xs), [1] * len(xs))
    worst = 0
    for W, u in zip(Ws, us):
        P = (E * (W if isinstance(W, flint.fmpz_mat) else flint.fmpz_mat(W))) * X
        if any(u):
            P += (E * flint.fmpz_mat(len(u), 1, [int(a) for a in u])) * ones
        vals = P.entries()
        worst = max(worst, max(abs(int(vals[k])) for k in at))
    return worst


class TransformerOracle(CountingOracle):
    """Counting black box over a :class:`OneLayerTransformer` and an ordered field.

    Like :class:`exactlearn.oracle.Oracle`: ``.queries``, ``.max_length``,
    ``.seconds``; a field left on auto scale gets D = lcm of the W denominators.
    """

    def __init__(self, model: OneLayerTransformer, field: Field):
        require_ordered(field)
        if field.scale is None:
            field = field.with_scale(model.scale(scale_limit(field)))
        self.model = model
        super().__init__(model.d, field, TransformerEvaluator(model, field))


