"""What a black box is sent and must answer: float tokens (:class:`TokenAdapter`) and checked batches (docs: howto/float-black-box.md).
"""

from __future__ import annotations

from fractions import Fraction

from gmpy2 import mpq

from exactlearn.errors import BadBlackBox, ModelError

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
