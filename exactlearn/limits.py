"""Size limits: what exactlearn refuses, in one line, before it allocates anything.

Every limit is a named constant here (docs/reference/cli.md, "Limits"; docs/reference/model-files.md).
The plan limits are limits on what the paper plan *costs* (docs: explanation/algorithm.md#how-it-works),
computed from d and the head bound H before anything is drawn:

* ``queries``: ``4 H d^2 - 2H + 1``, the black box's calls per attempt (and per prime);
* ``tokens``: ``1 + (2d^2 - 1)(2H^2 + 3H)``, the tokens the box reads over the plan (the
  query of configuration c at k has k + 1 tokens, k = 1 .. 2H);
* ``bytes``: an estimate of the plan's memory, :data:`PLAN_BYTES_PER_QUERY` per query plus
  :data:`PLAN_BYTES_PER_D3` times d^3 (the 2d^2 - 1 configurations each keep d-entry tokens;
  measured with ``tracemalloc`` on paper plans at d = 64 and 128 over the modular field's
  default range 2^32).

The efficient plan asks fewer queries; the real field's stable plan at most about twice the
paper plan's.  :data:`MAX_DIMENSION` and :data:`MAX_HEADS` are *derived*: the largest d whose
plan fits with one head, and the largest H whose plan fits at d = 1.  Within them d and H
are limited jointly, by the cost:

>>> plan_cost(384, 12).queries           # all-MiniLM-L6-v2 at full width: accepted
7077865
>>> plan_size_problem(384, 12) is None, plan_size_problem(64, 32) is None
(True, True)
>>> print(plan_size_problem(2, 10 ** 6))
d = 2, H = 1000000: the plan would send 14000021000001 tokens, more than the limit 1073741824 (MAX_PLAN_TOKENS; docs/reference/cli.md, "Limits")
>>> MAX_DIMENSION, MAX_HEADS
(501, 23169)

Entries are limited in digits before any text becomes a number (Python itself refuses
integers of more than 4300 digits, and a decimal exponent builds its power of ten first):

>>> entry_digits("-12.5e3"), entry_digits("1/300"), entry_digits("1e100000")
(6, 3, 100001)
"""

from __future__ import annotations


import operator
from dataclasses import dataclass

from exactlearn.errors import ModelError

#: Most queries one plan may ask (per attempt, per prime).
MAX_PLAN_QUERIES = 2 ** 25
#: Most tokens the black box may be sent over one plan (the sum of the query lengths).
MAX_PLAN_TOKENS = 2 ** 30
#: Largest estimated memory of one plan, in bytes (16 GiB).
MAX_PLAN_BYTES = 2 ** 34
#: Bytes of one query in the plan's list (a slotted Query and its list slot).
PLAN_BYTES_PER_QUERY = 64
#: Bytes per d^3 of the configurations' tokens (measured: 129 at d = 128, 133 at d = 64).
PLAN_BYTES_PER_D3 = 136

#: Most numbers a model may hold: H (d^2 + d) for attention, plus r (d + 1) for a
#: Transformer's ReLU layer (and H m d for its O).
MAX_MODEL_ENTRIES = 2 ** 22
#: Most outputs of a vector-output box (``learn(outputs=m)``, ``--outputs``): the plan's
#: answers are recorded as m values each (docs: explanation/biases.md#vector-outputs).
MAX_OUTPUTS = 2 ** 16
#: Bytes one recorded value of a vector box's answers costs while a run holds it
#: (``learn(outputs=m)``: every query's m values are kept for the outputs step), by field:
#: the value itself and the outputs step's work on it, measured with ``tracemalloc`` on runs
#: at d = 2 and 4 (real: an mpf of about 240 bytes and the step's float64 arrays, 312; a
#: rational: 258; modular: 434 per value and prime; symbolic: 648 at its smallest).  Exact
#: values grow with their size: these are the least a value costs.
OUTPUT_VALUE_BYTES = {"real": 352, "rational": 320, "modular": 448, "symbolic": 1024}
#: Queries a vector run over the real field records, as a multiple of its plan's own count:
#: the probe, the rescued and supplementary families (1.3 to 2.1 times the stable plan's
#: count measured at d = 2, 4, 8; :class:`~exactlearn.oracle.OutputsView` stops a run that
#: records more than the budget allows).
OUTPUTS_REAL_QUERY_FACTOR = 2
#: Primes a vector run over the modular field records at least (one and its confirmation).
OUTPUTS_MODULAR_PRIMES = 2
#: Largest model file, in bytes (checked before it is read; 16 bytes per entry).
MAX_MODEL_FILE_BYTES = 16 * MAX_MODEL_ENTRIES
#: Most local Dask worker processes ``--workers`` starts (each is a Python process of its own).
MAX_LOCAL_WORKERS = 64
#: Most JSON values a model file may hold (checked on the text before it is parsed).
MAX_JSON_VALUES = MAX_MODEL_ENTRIES + 2 ** 20
#: Most JSON objects (``{``) a model file may hold: one per head and a few more (checked on
#: the text before it is parsed; an object costs hundreds of bytes once parsed).
MAX_JSON_OBJECTS = 2 ** 15
#: Most decimal digits of a number written as text (an entry, an option such as --noise):
#: of a numerator or a denominator, a decimal exponent counting as its size.
MAX_ENTRY_DIGITS = 4000
#: Most decimal digits of the common denominator D of a model's W (and u) entries, the
#: exact fields' scale: a few entries' worth; the lcm of many coprime denominators past it
#: (minutes and gigabytes to form, exponents no field can realise) is refused as it grows.
MAX_SCALE_DIGITS = 4 * MAX_ENTRY_DIGITS
#: Largest --dps (decimal digits of the real field): below :data:`MAX_ENTRY_DIGITS`, so that
#: a model written at that precision (``demo --minilm --write``) reads back as a model file.
MAX_DPS = 3_000
#: Most fresh verification queries (``--verify``, ``learn(verify=)``): as many as one plan.
MAX_VERIFY_QUERIES = MAX_PLAN_QUERIES
#: Most redraws after a failed or refused draw (``--retries``, ``learn(retries=)``): every
#: attempt may draw and ask a whole plan again.
MAX_RETRIES = 1000
#: The one default retry policy (docs: reference/api.md#retries): the redraws after a detected
#: failure when ``retries`` is not given, by field name (and ``"transformer"`` for
#: ``learn_transformer``), the same for ``learn()``, ``learn_transformer()`` and the command
#: line.  Over Q(T) the query range must stay small (degrees in T grow like the exponents),
#: where degenerate draws are common (about 10% at the default range 8 for d = H = 2); a
#: Transformer's kink path fails on an unlucky path.  Every redraw's queries are counted
#: (``extra_queries``).
DEFAULT_RETRIES = {"rational": 0, "modular": 0, "real": 0, "symbolic": 3, "transformer": 2}


def default_retries(kind: str) -> int:
    """The redraws ``retries=None`` (or no ``--retries``) means for ``kind``, a field name or
    ``"transformer"`` (:data:`DEFAULT_RETRIES`; 0 for a name it does not list).

    >>> default_retries("symbolic"), default_retries("rational"), default_retries("transformer")
    (3, 0, 2)
    """
    return DEFAULT_RETRIES.get(kind, 0)
#: Largest |D e^T W x| the symbolic field realises: ``T^n`` is a polynomial of n + 1
#: coefficients, and the interpolation multiplies 2H + 1 of them (a d = 2 model at
#: ``--range 300`` reaches about 10^5 and takes about 10 s).
MAX_SYMBOLIC_EXPONENT = 2 ** 17


@dataclass(frozen=True)
class PlanCost:
    """What the paper plan for (d, H) costs (see the module docstring)."""

    queries: int
    tokens: int
    bytes: int


def plan_cost(d: int, H: int) -> PlanCost:
    """The paper plan's cost for dimension d and head bound H, from the formulas alone.

    >>> plan_cost(2, 2)
    PlanCost(queries=29, tokens=99, bytes=2944)
    """
    queries = 4 * H * d * d - 2 * H + 1
    tokens = 1 + (2 * d * d - 1) * (2 * H * H + 3 * H)
    return PlanCost(queries, tokens, PLAN_BYTES_PER_QUERY * queries + PLAN_BYTES_PER_D3 * d ** 3)


def plan_size_problem(d: int, H: int) -> str | None:
    """None when the plan for (d, H) is within the limits, else a one-line reason naming
    the limit that is exceeded."""
    cost = plan_cost(d, H)
    for what, n, limit, name in (("ask", cost.queries, MAX_PLAN_QUERIES, "queries"),
                                 ("send", cost.tokens, MAX_PLAN_TOKENS, "tokens"),
                                 ("need about", cost.bytes, MAX_PLAN_BYTES, "bytes")):
        if n > limit:
            return (f"d = {d}, H = {H}: the plan would {what} {n} {name}, more than the limit "
                    f"{limit} (MAX_PLAN_{name.upper()}; docs/reference/cli.md, \"Limits\")")
    return None


def check_plan_size(d: int, H: int) -> None:
    """Refuse (ModelError, a ValueError, one line) a plan beyond the limits, before anything
    is drawn.

    >>> check_plan_size(3000, 1)
    Traceback (most recent call last):
    ...
    exactlearn.errors.ModelError: d = 3000, H = 1: the plan would ask 35999999 queries, more than the limit 33554432 (MAX_PLAN_QUERIES; docs/reference/cli.md, "Limits")
    """
    problem = plan_size_problem(d, H)
    if problem is not None:
        raise ModelError(problem)


def _largest(fits) -> int:
    """The largest n >= 1 with fits(n) (fits is monotone and fits(1))."""
    lo, hi = 1, 2
    while fits(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


#: Largest dimension d: the largest whose plan with one head is within the limits.
MAX_DIMENSION = _largest(lambda d: plan_size_problem(d, 1) is None)
#: Largest head count or bound H: the largest whose plan at d = 1 is within the limits.
MAX_HEADS = _largest(lambda h: plan_size_problem(1, h) is None)


def check_dimension(d: int, what: str = "d") -> None:
    """Refuse d > :data:`MAX_DIMENSION` (one-line ModelError)."""
    if d > MAX_DIMENSION:
        raise ModelError(f"{what} = {d} is more than the largest dimension {MAX_DIMENSION} "
                         f"(MAX_DIMENSION: a larger plan exceeds the limits; docs/reference/cli.md, "
                         f"\"Limits\")")


def check_heads(H: int, what: str = "H") -> None:
    """Refuse H > :data:`MAX_HEADS` (one-line ModelError)."""
    if H > MAX_HEADS:
        raise ModelError(f"{what} = {H} is more than the largest head count {MAX_HEADS} "
                         f"(MAX_HEADS: a larger plan exceeds the limits; docs/reference/cli.md, "
                         f"\"Limits\")")


def model_entries(d: int, H: int, neurons: int = 0, m: int | None = None) -> int:
    """Numbers in a model: H (d^2 + d) for attention; with ``neurons`` r (a Transformer of
    width m) H (d^2 + m d) + r (m + 1).

    >>> model_entries(2, 2), model_entries(2, 1, neurons=3, m=2)
    (12, 17)
    """
    if not neurons and m is None:
        return H * (d * d + d)
    m = d if m is None else m
    return H * (d * d + m * d) + neurons * (m + 1)


def check_outputs_size(d: int, H: int, outputs) -> None:
    """Refuse (one-line ModelError) ``outputs`` that is not an integer in [1, MAX_OUTPUTS], or a
    model of vector outputs, H (d^2 + m d + d) numbers, past :data:`MAX_MODEL_ENTRIES`, before
    anything is drawn.

    >>> check_outputs_size(100, 100, 1000)
    Traceback (most recent call last):
    ...
    exactlearn.errors.ModelError: model: d = 100 with 100 heads and 1000 outputs holds 11010000 numbers, more than the limit 4194304 (MAX_MODEL_ENTRIES; docs/reference/cli.md, "Limits")
    """
    if isinstance(outputs, bool) or not isinstance(outputs, int) or not 1 <= outputs <= MAX_OUTPUTS:
        raise ModelError(f"outputs must be an integer in [1, {MAX_OUTPUTS}] (MAX_OUTPUTS), got "
                         f"{outputs!r}")
    n = H * (d * d + outputs * d + d)
    if n > MAX_MODEL_ENTRIES:
        raise ModelError(f"model: d = {d} with {H} heads and {outputs} outputs holds {n} numbers, "
                         f"more than the limit {MAX_MODEL_ENTRIES} (MAX_MODEL_ENTRIES; "
                         f"docs/reference/cli.md, \"Limits\")")


def output_value_bytes(field: str) -> int:
    """:data:`OUTPUT_VALUE_BYTES` of a field's name (the largest for a name it does not list)."""
    return OUTPUT_VALUE_BYTES.get(field, max(OUTPUT_VALUE_BYTES.values()))


def outputs_values_limit(field: str) -> int:
    """Most values a vector run over ``field`` may record: :data:`MAX_PLAN_BYTES` at
    :func:`output_value_bytes` a value."""
    return MAX_PLAN_BYTES // output_value_bytes(field)


def outputs_memory_problem(d: int, H: int, outputs: int, field: str, plan_queries: int,
                           plan: str = "paper") -> str | None:
    """None when a vector run's recorded answers fit :data:`MAX_PLAN_BYTES`, else a one-line
    reason naming the sizes and the limit: ``plan_queries`` (the plan's own count) times
    :data:`OUTPUTS_REAL_QUERY_FACTOR` over the real field, or times
    :data:`OUTPUTS_MODULAR_PRIMES` over the modular field, each of ``outputs`` values at
    :func:`output_value_bytes`.

    >>> print(outputs_memory_problem(8, 4, 65536, "real", 2555, "stable"))
    d = 8, H = 4, outputs = 65536 over the real field: 5110 queries (the stable plan's 2555, twice) would record 334888960 values, about 117880913920 bytes at 352 bytes a value, more than the limit 17179869184 (MAX_PLAN_BYTES; docs/reference/cli.md, "Limits")
    >>> outputs_memory_problem(8, 4, 9000, "real", 2555, "stable") is None
    True
    """
    factor = {"real": OUTPUTS_REAL_QUERY_FACTOR, "modular": OUTPUTS_MODULAR_PRIMES}.get(field, 1)
    queries = plan_queries * factor
    values = queries * outputs
    need = values * output_value_bytes(field)
    if need <= MAX_PLAN_BYTES:
        return None
    how = {"real": ", twice", "modular": f", at {factor} primes"}.get(field, "")
    return (f"d = {d}, H = {H}, outputs = {outputs} over the {field} field: {queries} queries "
            f"(the {plan} plan's {plan_queries}{how}) would record {values} values, about {need} bytes at "
            f"{output_value_bytes(field)} bytes a value, more than the limit {MAX_PLAN_BYTES} "
            f"(MAX_PLAN_BYTES; docs/reference/cli.md, \"Limits\")")


def check_model_size(d: int, H: int, neurons: int = 0, m: int | None = None,
                     what: str = "model") -> None:
    """Refuse a model with d > :data:`MAX_DIMENSION`, more than :data:`MAX_HEADS` heads
    (no plan could learn it) or more than :data:`MAX_MODEL_ENTRIES` numbers, before any of
    them is read or drawn (one-line ModelError).

    >>> check_model_size(2, 10 ** 8)
    Traceback (most recent call last):
    ...
    exactlearn.errors.ModelError: model: 100000000 heads, more than the limit 23169 (MAX_HEADS; docs/reference/cli.md, "Limits")
    >>> check_model_size(400, 30)
    Traceback (most recent call last):
    ...
    exactlearn.errors.ModelError: model: d = 400 with 30 heads holds 4812000 numbers, more than the limit 4194304 (MAX_MODEL_ENTRIES; docs/reference/cli.md, "Limits")
    """
    check_dimension(d, f"{what}: d")
    if H > MAX_HEADS:
        raise ModelError(f"{what}: {H} heads, more than the limit {MAX_HEADS} (MAX_HEADS; "
                         f"docs/reference/cli.md, \"Limits\")")
    if m is not None:
        check_dimension(m, f"{what}: m")
    n = model_entries(d, H, neurons, m)
    if n > MAX_MODEL_ENTRIES:
        extra = f" and {neurons} neurons" if neurons else ""
        raise ModelError(f"{what}: d = {d} with {H} head{'s' if H != 1 else ''}{extra} holds {n} "
                         f"numbers, more than "
                         f"the limit {MAX_MODEL_ENTRIES} (MAX_MODEL_ENTRIES; "
                         f"docs/reference/cli.md, \"Limits\")")


_HUGE = 10 ** 15


def entry_digits(text: str) -> int:
    """An upper bound on the decimal digits of the numerator or the denominator that a
    number's text (``"p/q"``, ``"-1.25e-3"``, an integer) would build; a decimal exponent
    counts as its size.  Text that is not a number counts its characters (the reader then
    refuses it for what it is)."""
    s = text.strip().lower()
    if "/" in s:
        return max(len(part.strip().lstrip("+-")) for part in s.split("/"))
    mant, _, expo = s.partition("e")
    digits = sum(c.isdigit() for c in mant)
    expo = expo.strip().lstrip("+-")
    if not expo:
        return digits
    if not expo.isdigit():
        return len(s)
    if len(expo) > 15:                  # never convert a huge exponent's text
        return _HUGE
    return digits + int(expo)


def check_entry_text(text: str) -> None:
    """Refuse number text with more than :data:`MAX_ENTRY_DIGITS` digits, before it is
    converted (ValueError, one line; the caller names the entry)."""
    n = entry_digits(text)
    if n > MAX_ENTRY_DIGITS:
        shown = text if len(text) <= 40 else text[:20] + "..." + text[-10:]
        why = "decimal exponent out of range" if "e" in text.lower() and "/" not in text else "too many digits"
        size = "more than 10^15" if n >= _HUGE else str(n)
        raise ValueError(f"{why}: {shown!r} would have {size} digits; numbers are limited to {MAX_ENTRY_DIGITS} digits "
                         f"(MAX_ENTRY_DIGITS)")


def more_digits_than(n, digits: int) -> bool:
    """Whether the integer ``n`` has more than ``digits`` decimal digits, without printing it
    (its bit length first; near the bound, exactly against 10^digits).

    >>> more_digits_than(10 ** 4000, 4000), more_digits_than(10 ** 4000 - 1, 4000)
    (True, False)
    """
    n = abs(int(n))                     # 10^digits is formed only for numbers near it
    return n.bit_length() > 3.32 * digits and n >= 10 ** digits


def readable_int(n: int) -> str:
    """An integer for a message: its digits, or its size in bits when it has too many digits
    to print (Python refuses to print more than 4300).

    >>> readable_int(12345), readable_int(10 ** 5000)
    ('12345', 'about 2^16609')
    """
    if n.bit_length() <= 3 * MAX_ENTRY_DIGITS:
        return str(n)
    return f"{'-' if n < 0 else ''}about 2^{abs(n).bit_length() - 1}"


def count_problem(name: str, n, low: int, high: int | None, limit: str = "") -> str | None:
    """None when ``n`` is an integer (not a bool; anything with ``__index__``) in
    ``[low, high]``, else a one-line reason naming ``name`` and, past ``high``, the limit
    ``limit`` of this module.

    >>> print(count_problem("verify", 10 ** 12, 0, MAX_VERIFY_QUERIES, "MAX_VERIFY_QUERIES"))
    verify = 1000000000000 is more than the limit 33554432 (MAX_VERIFY_QUERIES; docs/reference/cli.md, "Limits")
    >>> print(count_problem("retries", 2.5, 0, MAX_RETRIES, "MAX_RETRIES"))
    retries must be an integer >= 0, got 2.5
    """
    shown = n if not isinstance(n, int) or n.bit_length() < 64 else readable_int(n)
    try:
        n = None if isinstance(n, bool) else operator.index(n)
    except TypeError:
        n = None
    if n is None or n < low:
        return f"{name} must be an integer >= {low}, got {shown!r}"
    if high is not None and n > high:
        return (f"{name} = {readable_int(n)} is more than the limit {high} ({limit}; "
                f"docs/reference/cli.md, \"Limits\")")
    return None


def check_dps(dps: int, what: str = "--dps") -> None:
    """Refuse more than :data:`MAX_DPS` digits for the real field (one-line ModelError)."""
    if dps > MAX_DPS:
        raise ModelError(f"{what} = {dps} is more than the limit {MAX_DPS} digits (MAX_DPS; "
                         f"docs/reference/cli.md, \"Limits\")")


__all__ = ["MAX_PLAN_QUERIES", "MAX_PLAN_TOKENS", "MAX_PLAN_BYTES", "PLAN_BYTES_PER_QUERY",
           "PLAN_BYTES_PER_D3", "MAX_MODEL_ENTRIES", "MAX_MODEL_FILE_BYTES", "MAX_JSON_VALUES",
           "MAX_ENTRY_DIGITS", "MAX_SCALE_DIGITS", "MAX_JSON_OBJECTS", "more_digits_than", "MAX_DPS", "MAX_DIMENSION", "MAX_HEADS", "PlanCost", "plan_cost",
           "plan_size_problem", "check_plan_size", "check_dimension", "check_heads",
           "model_entries", "check_model_size", "entry_digits", "check_entry_text", "readable_int",
           "check_dps", "OUTPUT_VALUE_BYTES", "OUTPUTS_REAL_QUERY_FACTOR", "OUTPUTS_MODULAR_PRIMES",
           "output_value_bytes", "outputs_values_limit", "outputs_memory_problem",
           "MAX_VERIFY_QUERIES", "MAX_RETRIES", "MAX_SYMBOLIC_EXPONENT", "count_problem"]
