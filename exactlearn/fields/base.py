"""The field protocol every algorithm in exactlearn is written against.

docs: howto/field-and-range.md#number-systems-fields; the exactness argument of arXiv:2608.03294
(outputs live in Q(T), T = e^(1/D)).

A *field* object is a small, immutable, hashable value that

* builds its elements (``K(3)``, ``K("1/2")``, ``K.zero``, ``K.one``);
* decides equality and zero (``K.eq``, ``K.is_zero``) -- exactly for the exact
  fields, with tolerances *taken from the field object* for the real field;
* realises the exponential of an exact score, ``K.exp(s)``, and its inverse on
  exact exponentials, ``K.log(a)``;
* finds the roots of a polynomial that splits into distinct linear factors,
  ``K.roots(coeffs)``;
* converts elements back to the *parameter domain* ``K.param`` in which the
  model's weights live (``K.to_param``): exact rationals for the exact fields,
  mpmath reals for the real field;
* declares its *capabilities* as class attributes that algorithms test instead of
  field names: ``is_exact``, ``is_ordered`` (with ``sign``/``relu``), ``is_rational``,
  ``multimodular``, ``exponent_hint``, and ``poly_ring`` -- a fast python-flint
  polynomial ring over the field, or None -- with the element conversions
  ``to_ring``/``from_ring``; a field with one gets the fast Cauchy interpolation
  :func:`flint_rational_interpolate`, written once.

Where the learner *analyses* a field's values is policy, not protocol:
:func:`exactlearn.fields.multimodular.analysis_fields` (the rational field's values
are analysed modulo primes and certified over Q; docs: explanation/multimodular.md).

Elements are plain numbers that support ``+ - * /`` with each other and with
Python ints (gmpy2 ``mpq``, python-flint ``fmpz_mod``, sympy ``FracElement``,
mpmath ``mpf``), in the style of sympy's ``Domain`` objects.  Algorithms take
the field as an argument and never inspect element types.

Scale ``D``
-----------
Every score that appears in a run is a rational whose denominator divides some
``D``; then ``e^s = T^(D*s)`` with ``T = e^(1/D)`` transcendental, and exact
outputs live in ``Q(T)``.  Each exact field is a specialisation of ``Q(T)``:
``T -> b`` (rational field), ``T -> omega`` in ``F_p`` (modular field) or ``T``
itself (symbolic field).  ``scale`` is that ``D``; ``scale=None`` means *auto*:
an :class:`~exactlearn.oracle.Oracle` built on a model fills it in from the
lcm of the model's W denominators (:meth:`Field.with_scale`).
"""

from __future__ import annotations

import re
from fractions import Fraction

import gmpy2
from gmpy2 import mpq, mpz

from exactlearn.algebra.cauchy import cauchy_flint
from exactlearn.errors import ExactnessError, FieldError, NotExponential, NotOrdered, NotSplit
from exactlearn.limits import (MAX_ENTRY_DIGITS, MAX_SCALE_DIGITS, check_entry_text,
                               more_digits_than, readable_int)


#: Largest |exponent| accepted in a decimal string such as "1e-30" (a bigger one
#: would build an enormous integer before anything else could object).  Since every
#: number written as text is limited to :data:`~exactlearn.limits.MAX_ENTRY_DIGITS`
#: digits (a decimal exponent counting as its size), this is that limit.
MAX_DECIMAL_EXPONENT = MAX_ENTRY_DIGITS

#: what :func:`as_mpq` reads from text: ``p/q`` with optional signs, or a decimal with an
#: optional exponent -- ASCII digits only (no ``_``, no other scripts' digits, no inner spaces)
_NUMBER_TEXT = re.compile(r"[+-]?[0-9]+/[+-]?[0-9]+|[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def as_mpq(x) -> mpq:
    """Exact rational from int, Fraction, mpq, mpz or a ``"p/q"``/decimal string.

    Decimal strings are read exactly: ``"0.1"`` is ``1/10``.  Floats, NaN and
    anything else raise ``ValueError`` naming the offending value.

    >>> as_mpq("0.1"), as_mpq("-3/6"), as_mpq(7)
    (mpq(1,10), mpq(-1,2), mpq(7,1))
    """
    if isinstance(x, bool):
        raise ValueError(f"not a rational number: {x!r}")
    if isinstance(x, (int, type(mpz(0)))):
        return mpq(x)
    if isinstance(x, type(mpq(0))):
        return x
    if isinstance(x, Fraction):
        return mpq(x.numerator, x.denominator)
    if isinstance(x, str):
        s = x.strip()
        check_entry_text(s)               # digits before any conversion (MAX_ENTRY_DIGITS)
        if s.lower() in {"nan", "inf", "-inf", "+inf", "infinity", "-infinity"}:
            raise ValueError(f"not a finite rational number: {x!r}")
        if not _NUMBER_TEXT.fullmatch(s):
            raise ValueError(f"not a rational number: {x!r} (an integer, p/q or a decimal "
                             f"such as 0.25 or 1e-3, in ASCII digits)")
        if s.isascii() and s.lstrip("+-").isdigit() and len(s) - len(s.lstrip("+-")) <= 1:
            return mpq(int(s))            # a plain integer, as Fraction reads it, faster
        try:
            if "/" in s:
                num, den = s.split("/")
                num, den = int(num), int(den)
                if den == 0:
                    raise ValueError(f"division by zero in {x!r}")
                return mpq(num, den)
            return mpq(Fraction(s))       # the grammar above holds: a decimal Fraction reads
        except ValueError as exc:
            if any(w in str(exc) for w in ("division by zero", "exponent out of range")):
                raise
            raise ValueError(f"not a rational number: {x!r}") from None
        except ZeroDivisionError:
            raise ValueError(f"division by zero in {x!r}") from None
    if hasattr(x, "numerator") and hasattr(x, "denominator") and not isinstance(x, float):
        return mpq(int(x.numerator), int(x.denominator))
    raise ValueError(f"not an exact rational number: {x!r}")


def format_rational(q) -> str:
    """``"p/q"`` (or ``"p"`` when q = 1) for an exact rational.

    >>> format_rational(mpq(-6, 4)), format_rational(mpq(5))
    ('-3/2', '5')
    """
    q = as_mpq(q)
    if q.denominator == 1:
        return str(q.numerator)
    return f"{q.numerator}/{q.denominator}"


class Field:
    """Abstract field (see the module docstring for the protocol).

    Subclasses set ``name``, ``is_exact`` and implement the element methods.
    Equality of field objects is equality of their ``_key()``; the identity, ``repr``,
    pickling and :meth:`with_scale` derive from :attr:`_identity`.
    """

    name = "abstract"

    # -- capabilities (docs: howto/field-and-range.md#number-systems-fields): algorithms test these, never names ------
    #: equality and zero are decided exactly (``==``); else with the field's tolerances
    is_exact = True
    #: a sign decision exists (:meth:`sign`, :meth:`relu`): the one-layer Transformer needs it
    is_ordered = False
    #: elements are gmpy2 ``mpq`` (exact rational matrices may run on python-flint ``fmpq_mat``)
    is_rational = False
    #: a reduction modulo one prime of Q(T): exact over Q needs several primes
    #: (:mod:`exactlearn.pipeline.multimodular`)
    multimodular = False
    #: what to suggest when a plan's exponents exceed :attr:`max_exponent`
    exponent_hint = ""
    #: python-flint polynomials over the field -- a constructor from a coefficient list
    #: (``flint.fmpq_poly``, an ``fmpz_mod_poly_ctx``) -- or None when it has no fast one;
    #: elements go in by :meth:`to_ring` and coefficients come out by :meth:`from_ring`
    poly_ring = None
    #: the hook of :func:`exactlearn.pipeline.interpolate.cauchy_interpolate`: a faster
    #: equivalent ``(ks, ys, H) -> (P, Q)``, or None for its generic algorithm; fields
    #: with a :attr:`poly_ring` set it to :func:`flint_rational_interpolate`
    rational_interpolate = None

    def __init__(self, scale: int | None = None):
        if scale is not None:       # an exact field's D: within MAX_SCALE_DIGITS
            scale = integer_arg(scale, "scale D", 1, MAX_SCALE_DIGITS if self.is_exact else None)
        self.scale = scale

    # -- identity ---------------------------------------------------------
    #: The constructor's arguments before ``scale``, as ``(attribute, format)`` pairs: a
    #: field ``F`` with ``_identity = (("p", str),)`` is built as ``F(p, scale)``, prints
    #: as ``F(p=..., scale=...)``, pickles as those arguments (flint contexts do not
    #: pickle) and is equal to another ``F`` with the same ``p`` and ``scale``.
    _identity = ()

    def _identity_args(self) -> tuple:
        return tuple(getattr(self, name) for name, _ in self._identity)

    def _key(self) -> tuple:
        return (type(self).__name__, *self._identity_args(), self.scale)

    def __eq__(self, other):
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        args = "".join(f"{name}={fmt(getattr(self, name))}, " for name, fmt in self._identity)
        return f"{type(self).__name__}({args}scale={self.scale})"

    def __reduce__(self):
        return (type(self), (*self._identity_args(), self.scale))

    def with_scale(self, scale: int) -> "Field":
        """The same field with ``D = scale`` (see module docstring)."""
        return type(self)(*self._identity_args(), scale)

    @property
    def D(self) -> int:
        """The scale D, defaulting to 1 when it was left on *auto*."""
        return 1 if self.scale is None else self.scale

    @property
    def max_exponent(self):
        """Largest |D*s| that exp() realises faithfully (None: no limit).

        The oracle checks a plan against it before any query is asked."""
        return None

    def describe(self) -> dict:
        """JSON-able description of the field (used in CLI/JSON output)."""
        return {"field": self.name, "scale": self.D}

    # -- elements -----------------------------------------------------------
    @property
    def zero(self):
        return self(0)

    @property
    def one(self):
        return self(1)

    def from_output(self, y):
        """A black box's answer as an element (the learner's Recorder converts with it).
        Exact fields embed what ``__call__`` embeds; the real field also takes binary
        floats (:meth:`exactlearn.fields.real.Real.from_output`)."""
        return self(y)

    def __call__(self, x):
        """Embed an exact rational (or a param-domain value) into the field."""
        raise NotImplementedError

    def is_zero(self, a) -> bool:
        return a == 0

    def eq(self, a, b) -> bool:
        return self.is_zero(a - b)

    # -- exp / log ------------------------------------------------------------
    def exp(self, s):
        """The field's image of e^s for a param-domain score s."""
        raise NotImplementedError

    def power(self, n: int):
        """T^n for an integer n, T = e^(1/D): the same as ``exp(n / D)``.

        Fields override it with a direct power (the oracle's hot path)."""
        return self.exp(mpq(n, self.D))

    def log(self, a):
        """The param-domain s with exp(s) == a, or raise :class:`NotExponential`."""
        raise NotImplementedError

    # -- polynomials --------------------------------------------------------
    def roots(self, coeffs):
        """Distinct roots of sum(coeffs[i] * k**i) when it splits into distinct
        linear factors over the field; otherwise raise :class:`NotSplit`."""
        raise NotImplementedError

    def to_ring(self, a):
        """``a`` as a scalar of :attr:`poly_ring` (by default the element itself)."""
        return self(a)

    def from_ring(self, c):
        """A coefficient of a :attr:`poly_ring` polynomial as an element (by default itself)."""
        return c

    # -- back to parameters ------------------------------------------------------
    def sign(self, z, scale=None):
        """-1, 0 or 1 (``None``: undecided within tolerance); ordered fields only."""
        raise NotOrdered(f"the {self.name} field has no order: a sign decision (ReLU) needs "
                         f"--field rational or --field real")

    def relu(self, z):
        """max(z, 0); ordered fields only."""
        raise NotOrdered(f"the {self.name} field has no order: a sign decision (ReLU) needs "
                         f"--field rational or --field real")

    @property
    def param(self) -> "Field":
        """The field in which weights (W, v) and scores live."""
        raise NotImplementedError

    def to_param(self, a):
        """Convert an element to the parameter domain (exact rational for the
        exact fields; may raise :class:`FieldError` if no such value exists)."""
        raise NotImplementedError

    def format(self, a) -> str:
        """String form of a param-domain value, for JSON output."""
        return format_rational(a)


def integer_arg(x, name: str, low: int, digits: int | None = MAX_ENTRY_DIGITS) -> int:
    """A field's integer argument: an integer (``__index__``, not a bool; an integral float
    or a string of ASCII digits is read, anything else never rounded), at least ``low``, of
    at most ``digits`` digits (None: any); otherwise a one-line ValueError naming ``name``
    (the value shown by its size when too long to print).

    >>> integer_arg(7, "p", 3)
    7
    >>> integer_arg(6.0, "p", 3), integer_arg("6", "p", 3)
    (6, 6)
    >>> integer_arg(2.5, "the base", 2)
    Traceback (most recent call last):
    ...
    ValueError: the base must be an integer >= 2, got 2.5
    """
    if isinstance(x, float) and x.is_integer():
        x = int(x)                      # 6.0 is 6 (as int() read it before)
    elif getattr(x, "denominator", None) == 1 and not hasattr(x, "__index__"):
        x = int(x.numerator)            # Fraction(6), mpq(6, 1)
    elif isinstance(x, str) and re.fullmatch(r"[+-]?[0-9]+", x.strip()):
        if len(x.strip().lstrip("+-")) > MAX_ENTRY_DIGITS:     # text's limit, before int()
            raise ValueError(f"{name} has more than {MAX_ENTRY_DIGITS} digits (MAX_ENTRY_DIGITS)")
        x = int(x)                      # "6", in ASCII digits
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        shown = repr(x) if len(repr(x)) <= 40 else repr(x)[:40] + "..."
        raise ValueError(f"{name} must be an integer >= {low}, got {shown}")
    n = int(x.__index__())
    if digits is not None and more_digits_than(n, digits):
        raise ValueError(f"{name} has more than {digits} digits: {readable_int(n)}")
    if n < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {readable_int(n)}")
    return n


def scale_limit(field) -> int | None:
    """The most digits of ``field``'s scale D when the model gives it: an exact field's is
    :data:`~exactlearn.limits.MAX_SCALE_DIGITS` (beyond it no exponential is realised), the
    real field's unbounded (it needs no exact scale)."""
    return MAX_SCALE_DIGITS if field.is_exact else None


def lcm_of_denominators(values, max_digits: int | None = None) -> int:
    """lcm of the denominators of some exact rationals (1 for none).  With ``max_digits``
    (an exact field's scale: :data:`~exactlearn.limits.MAX_SCALE_DIGITS`) it raises
    :class:`~exactlearn.errors.ExactnessError` as soon as the lcm gets past that many digits
    (the lcm of many coprime denominators grows with every entry: minutes and gigabytes,
    docs: reference/cli.md#limits).

    >>> lcm_of_denominators([mpq(1, 4), mpq(5, 6), 3])
    12
    """
    out = mpz(1)
    for v in values:
        out = gmpy2.lcm(out, as_mpq(v).denominator)
        if max_digits is not None and more_digits_than(out, max_digits):
            raise ExactnessError(f"the common denominator of the W (and u) entries has more "
                                 f"than {max_digits} digits (MAX_SCALE_DIGITS): no exact "
                                 f"field realises the model's exponentials at that scale")
    return int(out)


def flint_rational_interpolate(K, ks, ys, H):
    """``K.rational_interpolate`` of a field ``K`` with a :attr:`~Field.poly_ring`.

    The fast path of :func:`exactlearn.pipeline.interpolate.cauchy_interpolate`, the
    same algorithm (Newton interpolation, then the extended Euclidean algorithm stopped
    at degree <= H) in C on ``K.poly_ring``
    (:func:`exactlearn.algebra.cauchy.cauchy_flint`).  Returns (P, Q) as coefficient
    lists of elements, lowest degree first, Q not yet normalised.

    >>> from exactlearn.fields import QQ, Modular
    >>> ks = [0, 1, 2]                                # 2 + 1/(1 + 3k) = (3 + 6k)/(1 + 3k)
    >>> P, Q = flint_rational_interpolate(QQ, ks, [2 + mpq(1, 1 + 3 * k) for k in ks], 1)
    >>> [c / Q[0] for c in P + Q]
    [mpq(3,1), mpq(6,1), mpq(1,1), mpq(3,1)]
    >>> F = Modular(p=97)
    >>> P, Q = flint_rational_interpolate(F, ks, [F(2) + F(1) / (1 + 3 * k) for k in ks], 1)
    >>> [int(c / Q[0]) for c in P + Q]
    [3, 6, 1, 3]
    """
    to_ring, from_ring = K.to_ring, K.from_ring
    P, Q = cauchy_flint([to_ring(k) for k in ks], [to_ring(y) for y in ys], H, K.poly_ring)
    return [from_ring(c) for c in P.coeffs()], [from_ring(c) for c in Q.coeffs()]
