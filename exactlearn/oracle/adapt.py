"""What a black box is sent and must answer: float tokens (:class:`TokenAdapter`) and checked batches (docs: howto/float-black-box.md).
"""

from __future__ import annotations

import math
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
        self._arrays: dict = {}
        self.coarse = None                  # "float32 values", ...: coarse answers, named
        self._typed = 0                     # answers looked at (the first FIRST_ANSWERS)
        if hasattr(box, "batch"):           # one value per query, checked (BadBlackBox)
            self.batch = lambda queries: self._typed_answers(checked_batch(
                box, box.batch, [self._convert(q) for q in queries]))

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

    def _array(self, t):
        """:meth:`_row` as a numpy row of the kind's dtype (kept per token)."""
        row = self._arrays.get(t)
        if row is None:
            import numpy as np
            row = self._arrays[t] = np.array(self._row(t), dtype=np.float32 if self.kind ==
                                             "float32" else np.float64)
        return row

    def _convert(self, tokens):
        rows, idx, counts = [], [], []   # each distinct token object once, and its runs
        seen: dict = {}
        runs = token_runs(tokens)       # holds its tokens: their ids stay theirs meanwhile
        for t, n in runs:
            i = seen.get(id(t))
            if i is None:
                i = seen[id(t)] = len(rows)
                rows.append(self._row(tuple(t)) if self.kind == "float" else self._array(tuple(t)))
            idx.append(i)
            counts.append(n)
        if self.kind == "float":        # fresh lists: a box may write into what it is given
            return [list(rows[i]) for i, n in zip(idx, counts) for _ in range(n)]
        import numpy as np
        dtype = np.float32 if self.kind == "float32" else np.float64
        if not runs:
            return np.array(rows, dtype=dtype)
        out = np.empty((sum(counts), len(rows[0])), dtype=dtype)
        at = 0
        for i, n in zip(idx, counts):   # each run: its row, broadcast (exact: _row checked it)
            out[at:at + n] = rows[i]
            at += n
        return out

    def __call__(self, tokens):
        y = self.box(self._convert(tokens))
        if self._typed < FIRST_ANSWERS:
            self._typed_answers([y])
        return y

    def _typed_answers(self, ys: list) -> list:
        """``ys`` as they are.  Among the first ``FIRST_ANSWERS`` answers, one typed float32
        (or coarser), or all of them float32 numbers in value (a float32 layer's answer
        passed through ``float()``), sets ``coarse`` for a failure to name it."""
        for y in ys[:max(0, FIRST_ANSWERS - self._typed)]:
            self._typed += 1
            try:                            # a note only: never the run's failure
                dtype = coarse_dtype(y)
            except Exception:               # noqa: BLE001 (an answer's own dtype property)
                dtype = None
            if dtype is not None:
                self.coarse = f"{dtype} values"
            elif self.coarse is None and not float32_valued(y):
                self._typed = FIRST_ANSWERS     # a float64 number: nothing more to look at
            elif self._typed == FIRST_ANSWERS and self.coarse is None:
                self.coarse = (f"values that are all float32 numbers (its first "
                               f"{FIRST_ANSWERS} answers)")
        return ys



def token_runs(tokens) -> list:
    """``[(token, copies)]``: the runs of equal adjacent tokens in a query, each given by its
    first token, in order.  A stable-plan query -- ``k`` copies of a token, then ``m`` of
    another (tuples) -- is recognised in a few list operations in C, however long; any other
    query is read token by token (identity first, then ``tuple(t)`` equality).

    >>> a, b = (1, 2), (3, 4)
    >>> token_runs([a, a, b, a]), token_runs([a, (1, 2), b]), token_runs([])
    ([((1, 2), 2), ((3, 4), 1), ((1, 2), 1)], [((1, 2), 2), ((3, 4), 1)], [])
    """
    tokens = tokens if isinstance(tokens, (list, tuple)) else list(tokens)
    if not tokens:
        return []
    first, last = tokens[0], tokens[-1]
    if type(first) is tuple and type(last) is tuple:
        m = tokens.count(last)
        k = len(tokens) - m
        if k == 0:
            return [(last, m)]
        if list(tokens[k:]) == [last] * m and list(tokens[:k]) == [first] * k:
            return [(first, k), (last, m)]
    runs: list = []
    prev = prev_key = None
    for t in tokens:
        if t is prev:                   # the same object: one more copy (no comparison)
            runs[-1][1] += 1
            continue
        key = tuple(t)
        if runs and key == prev_key:
            runs[-1][1] += 1
        else:
            runs.append([t, 1])
            prev_key = key
        prev = t
    return [(t, n) for t, n in runs]


#: How many first answers :class:`TokenAdapter` looks at for a coarse float type.
FIRST_ANSWERS = 8


def float32_valued(y) -> bool:
    """True when an answer (a number, or a sequence or array of them) holds a nonzero value
    and every value is exactly a float32 number: float64 arithmetic lands there by chance
    about once in 2^29 answers, a float32 layer's answer always.

    >>> import numpy as np
    >>> float32_valued(float(np.float32(0.1))), float32_valued(0.1), float32_valued([0.0, 0.5])
    (True, False, True)
    """
    import numpy as np
    try:
        vals = np.asarray(y.tolist() if callable(getattr(y, "tolist", None)) else y,
                          dtype=np.float64).ravel()
    except Exception:                   # noqa: BLE001 (an answer's own tolist or __array__)
        return False
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(vals.size and np.any(vals != 0) and np.all(vals.astype(np.float32) == vals))


def coarse_dtype(y) -> str | None:
    """``"float32"``, ``"float16"`` or ``"bfloat16"`` when an answer (a numpy, torch or JAX
    scalar or array, or a list of them) is typed as that float, else None: such a box rounds
    its answers to about 2^-24 of their size or worse, whatever its tokens.

    >>> import numpy as np
    >>> coarse_dtype(np.float32(1)), coarse_dtype([np.zeros(2, np.float16)]), coarse_dtype(1.0)
    ('float32', 'float16', None)
    """
    if isinstance(y, (list, tuple)) and y:
        y = y[0]
    name = str(getattr(y, "dtype", "")).rsplit(".", 1)[-1]
    return name if name in ("float32", "float16", "bfloat16") else None


def box_name(box) -> str:
    """How a failure names a black box: its function's or class's name (the box inside a
    :class:`TokenAdapter`)."""
    box = box.box if isinstance(box, TokenAdapter) else box
    name = getattr(box, "__qualname__", None)
    return name if isinstance(name, str) else type(box).__qualname__


def non_finite(y) -> str | None:
    """``'nan'``, ``'inf'`` or ``'-inf'`` for an answer that is a float that is not finite (a
    Python or numpy float, a 0-d array or a torch/JAX scalar through ``.item()``, an mpmath
    mpf), else None.

    >>> import numpy as np
    >>> non_finite(float("nan")), non_finite(np.float32("-inf")), non_finite(0.5), non_finite("x")
    ('nan', '-inf', None, None)
    """
    if not isinstance(y, (float, int)) and callable(getattr(y, "item", None)):
        try:
            y = y.item()
        except (TypeError, ValueError, RuntimeError):
            return None
    if not isinstance(y, float) and type(y).__name__ != "mpf":
        return None
    try:
        f = float(y)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if math.isfinite(f) else repr(f)


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
