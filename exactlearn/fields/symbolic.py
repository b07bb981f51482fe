"""The symbolic field Q(T), T = e^(1/D): the exact ground truth (docs: howto/field-and-range.md#number-systems-fields).

``Symbolic(scale=D)`` keeps ``T`` as an indeterminate (legitimately: ``T`` is
transcendental by Lindemann, so ``Q(T)`` is isomorphic to rational functions in
an indeterminate).  ``exp(s) = T^(D*s)`` needs ``D*s`` to be an integer
(otherwise :class:`~exactlearn.errors.ExactnessError`); ``log`` inverts it
on monomials ``T^n`` with coefficient 1 and returns ``n/D``.  Every other exact
field is a specialisation ``T -> b`` of this one (:meth:`Symbolic.specialize`).

Elements are :class:`~exactlearn.algebra.ratfuncs.QT`: a numerator and a denominator
in ``Z[T]`` (python-flint ``fmpz_poly``), coprime in ``Z[T]`` -- contents included --
with a positive leading coefficient of the denominator, so every element has exactly
one representation (equality and hashing are structural).  Arithmetic is flint's C
code (:mod:`exactlearn.algebra.ratfuncs`): a gcd of two
polynomials of degree 3000 with 50-digit coefficients takes about 50 ms, which lets
the learner run over Q(T) on query ranges where the exponents ``D e^T W x`` reach
the hundreds.  :meth:`Symbolic.roots` factors the cleared polynomial in ``Z[T, k]``
with flint's ``fmpz_mpoly``.  sympy is used only to read and print: elements embed
sympy expressions in the symbol ``T`` and sympy ``FracElement``/``PolyElement`` of
``QQ.frac_field(T)``, and print as sympy does.  Elements pickle.

Weights live in the exact rationals: ``K.param`` is a
:class:`~exactlearn.fields.rational.Rational` and ``to_param`` accepts only
constants.  Meant for tiny models (d <= 2, H <= 2): sizes grow with ``D*|s|``.

>>> K = Symbolic(scale=2)
>>> T = K.T
>>> K.exp("3/2"), K.log(1 / T**4)
(T**3, mpq(-2,1))
>>> f = (3 * T + 1) / (T**2 - 1)
>>> K.format(f), K.to_param(K("5/3") * 2)
('(3*T + 1)/(T**2 - 1)', mpq(10,3))
>>> [K.format(r) for r in K.roots([1, 1 + T, T])]       # (1 + k)(1 + k T)
['-1', '-1/T']
"""

from __future__ import annotations

import sympy
from flint import fmpq_poly, fmpz_poly
from gmpy2 import mpq
from sympy.polys.fields import FracElement
from sympy.polys.polyerrors import PolynomialError
from sympy.polys.rings import PolyElement

from exactlearn.algebra.ratfuncs import (QT, SYMBOL, SYMPY_FIELD, SYMPY_RING, from_sympy_frac,
                                         roots_in_k, to_qt)
from exactlearn.fields.base import ExactnessError, Field, FieldError, NotExponential, NotSplit, as_mpq, format_rational
from exactlearn.fields.rational import Rational
from exactlearn.limits import MAX_SYMBOLIC_EXPONENT, readable_int

__all__ = ["Symbolic", "QT"]

_ONE = fmpz_poly([1])
_ZERO = fmpz_poly([])


class Symbolic(Field):
    """Q(T) with ``exp(s) = T^(D*s)``; :class:`QT` elements."""

    name = "symbolic"
    is_exact = True
    exponent_hint = " (polynomials in T past the size limit MAX_SYMBOLIC_EXPONENT): use a smaller --range"

    def __init__(self, scale: int | None = None):
        super().__init__(scale)
        self.T = QT.monomial(1)

    def describe(self):
        return {"field": self.name, "T": f"e^(1/{self.D})", "scale": self.D}

    # -- elements -----------------------------------------------------------------------
    def __call__(self, x):
        """Embed an exact rational (int, mpq, Fraction, ``"p/q"``/decimal string), an
        element of Q(T) (:class:`QT`, a flint ``fmpz_poly``/``fmpq_poly`` in T, a sympy
        ``FracElement``/``PolyElement`` of ``QQ.frac_field(T)``), or a sympy expression in
        the symbol ``T``."""
        if isinstance(x, QT):
            return x
        if isinstance(x, fmpz_poly):
            return QT(x, _ONE, True)
        if isinstance(x, fmpq_poly):
            return QT(x.numer(), fmpz_poly([int(x.denom())]))
        if isinstance(x, FracElement):
            if x.field != SYMPY_FIELD:
                raise ValueError(f"{x} belongs to {x.field}, not to {SYMPY_FIELD}")
            return from_sympy_frac(x)
        if isinstance(x, PolyElement):
            if x.ring != SYMPY_RING:
                raise ValueError(f"{x} belongs to {x.ring}, not to {SYMPY_RING}")
            return from_sympy_frac(SYMPY_FIELD(x))
        if isinstance(x, sympy.Expr) and not isinstance(x, sympy.Rational):
            extra = x.free_symbols - {SYMBOL}
            if extra:
                raise ValueError(f"{x} involves symbols other than T: {sorted(map(str, extra))}")
            try:
                return from_sympy_frac(SYMPY_FIELD.from_expr(x))
            except (ValueError, PolynomialError, TypeError):
                raise ValueError(f"{x} is not a rational function of T over Q") from None
        got = to_qt(x) if not isinstance(x, (str, float, complex)) else None
        if got is not None:
            return got
        if isinstance(x, sympy.Rational):
            return to_qt(mpq(int(x.p), int(x.q)))
        return to_qt(as_mpq(x))

    @property
    def zero(self):
        return QT(_ZERO, _ONE, True)

    @property
    def one(self):
        return QT(_ONE, _ONE, True)

    def is_zero(self, a):
        return not self(a)

    def eq(self, a, b):
        return self(a) == self(b)

    # -- exp / log ----------------------------------------------------------------------
    def exponent(self, s) -> int:
        """The integer D*s, or raise ExactnessError."""
        n = as_mpq(s) * self.D
        if n.denominator != 1:
            raise ExactnessError(f"exp({s}) is not in Q(T) with T = e^(1/{self.D}): D*s = {n} "
                                 f"is not an integer (use a scale D that clears the score "
                                 f"denominators)")
        return int(n.numerator)

    @property
    def max_exponent(self) -> int:
        """Largest |D*s| whose ``T^(D*s)`` the field builds: :data:`~exactlearn.limits.MAX_SYMBOLIC_EXPONENT`
        (a polynomial of that degree; the oracle refuses a plan beyond it before any query,
        docs: reference/cli.md#limits)."""
        return MAX_SYMBOLIC_EXPONENT

    def exp(self, s):
        """``T^(D*s)``."""
        return self.power(self.exponent(s))

    def power(self, n: int):
        """``T^n`` (the oracle's hot path); ExactnessError past :attr:`max_exponent`."""
        if abs(n) > MAX_SYMBOLIC_EXPONENT:
            raise ExactnessError(f"exp = T^{readable_int(n)} would exceed the degree limit "
                                 f"{MAX_SYMBOLIC_EXPONENT} (MAX_SYMBOLIC_EXPONENT); use a smaller "
                                 f"query range")
        return QT.monomial(n)

    def log(self, a):
        """``n/D`` when ``a`` is exactly ``T^n``; otherwise :class:`NotExponential`."""
        a = self(a)
        if not a:
            raise NotExponential("0 is not a power of T")
        num = [(e, c) for e, c in enumerate(a.n.coeffs()) if c != 0]
        den = [(e, c) for e, c in enumerate(a.d.coeffs()) if c != 0]
        if len(num) != 1 or len(den) != 1:
            raise NotExponential(f"{a} is not a power of T (not a monomial over a monomial)")
        if num[0][1] != den[0][1]:
            raise NotExponential(f"{a} is not a power of T (coefficient "
                                 f"{mpq(int(num[0][1]), int(den[0][1]))} is not 1)")
        return mpq(num[0][0] - den[0][0], self.D)

    # -- polynomials --------------------------------------------------------------------
    def roots(self, coeffs):
        """Roots in Q(T) of ``sum(coeffs[i] * k**i)`` when it splits into distinct
        linear factors over Q(T), else :class:`NotSplit`: the factorisation in
        ``Z[T, k]`` of :func:`exactlearn.algebra.ratfuncs.roots_in_k`."""
        cs = [self(c) for c in coeffs]
        while cs and not cs[-1]:
            cs.pop()
        deg = len(cs) - 1
        if deg <= 0:
            return []
        return roots_in_k(cs)

    # -- parameters ---------------------------------------------------------------------
    @property
    def param(self):
        return Rational(scale=self.scale)

    def to_param(self, a):
        """The rational value of a constant element; FieldError if ``a`` involves T."""
        a = self(a)
        if not a.is_constant:
            raise FieldError(f"{a} is not a rational constant: it depends on T = e^(1/{self.D})")
        return a.constant()

    def format(self, a) -> str:
        """``"p/q"`` for rationals and constants, sympy's string for other elements."""
        if isinstance(a, (QT, FracElement, PolyElement, fmpz_poly, fmpq_poly)):
            a = self(a)
            if a.is_constant:
                return format_rational(a.constant())
            return str(a)
        return format_rational(a)

    # -- specialisation -----------------------------------------------------------------
    def specialize(self, a, K: Field):
        """The image of ``a`` in the exact field ``K`` under ``T -> K.exp(1/D)``.

        ``K`` must have this field's scale (e.g. ``Rational(base=2, scale=D)`` sends T
        to 2).  Raises ZeroDivisionError when the denominator vanishes there (a bad
        reduction).
        """
        if K.D != self.D:
            raise ValueError(f"scale mismatch: {K!r} has D={K.D}, this field D={self.D}")
        a = self(a)
        t = K.exp(mpq(1, self.D))

        def ev(p):
            out = K.zero
            for c in reversed(p.coeffs()):               # Horner
                out = out * t + K(int(c))
            return out

        den = ev(a.d)
        if K.is_zero(den):
            raise ZeroDivisionError(f"the denominator of {a} vanishes at T = {t}")
        return ev(a.n) / den
