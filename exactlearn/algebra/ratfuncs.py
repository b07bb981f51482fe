"""Q(T) on python-flint: fractions of integer polynomials in one indeterminate T.

The symbolic field's elements (:class:`QT`; docs: howto/field-and-range.md#number-systems-fields):
a numerator and a denominator in ``Z[T]`` (python-flint ``fmpz_poly``), coprime in
``Z[T]`` -- contents included -- with a positive leading coefficient of the
denominator, so every element has exactly one representation (equality and hashing
are structural).  Arithmetic is flint's C code.  :func:`roots_in_k` finds the roots
in Q(T) of a polynomial in a second variable k by factoring in ``Z[T, k]``
(``fmpz_mpoly``).  sympy is used only to read and print (``QQ.frac_field(T)``).

>>> T = QT.monomial(1)
>>> (3 * T + 1) / (T**2 - 1), (T**2 - 1) / (T + 1), QT.monomial(-2)
((3*T + 1)/(T**2 - 1), T - 1, 1/(T**2))
>>> roots_in_k([to_qt(1), 1 + T, T])                      # (1 + k)(1 + k T)
[-1, -1/T]
"""

from __future__ import annotations

import math
from fractions import Fraction

import flint
import sympy
from flint import fmpq, fmpz, fmpz_poly
from gmpy2 import mpq, mpz
from sympy.polys.domains import QQ
from sympy.polys.fields import FracElement

from exactlearn.errors import NotSplit

__all__ = ["QT", "SYMBOL", "SYMPY_FIELD", "SYMPY_RING", "to_qt", "from_sympy_frac", "roots_in_k"]

#: The indeterminate T as a sympy symbol, and sympy's Q(T) and Q[T] (only for reading and printing).
SYMBOL = sympy.Symbol("T")
SYMPY_FIELD = QQ.frac_field(SYMBOL).field
SYMPY_RING = SYMPY_FIELD.ring
_BIVARIATE = flint.fmpz_mpoly_ctx.get(("T", "k"), "lex")
_ONE = fmpz_poly([1])
_ZERO = fmpz_poly([])


class QT:
    """An element ``n/d`` of Q(T) in lowest terms (module doc); immutable."""

    __slots__ = ("n", "d")

    def __init__(self, n, d=_ONE, _normal=False):
        if not _normal:
            n, d = _normalise(n, d)
        self.n = n
        self.d = d

    # -- construction ---------------------------------------------------------------
    @classmethod
    def monomial(cls, e: int) -> "QT":
        """``T^e`` for any integer e."""
        x = fmpz_poly([0] * abs(e) + [1])
        return cls(x, _ONE, True) if e >= 0 else cls(_ONE, x, True)

    @classmethod
    def from_coeffs(cls, num, den=(1,)) -> "QT":
        return cls(fmpz_poly(list(num)), fmpz_poly(list(den)))

    def __reduce__(self):
        return (QT.from_coeffs, ([int(c) for c in self.n.coeffs()],
                                 [int(c) for c in self.d.coeffs()]))

    # -- arithmetic ------------------------------------------------------------------
    def __add__(self, other):
        o = to_qt(other)
        if o is None:
            return NotImplemented
        if self.d == o.d:
            return QT(self.n + o.n, self.d)
        # Henrici: with g = gcd(d1, d2), only factors of g can cancel
        g = self.d.gcd(o.d)
        if g.is_one():
            return QT(self.n * o.d + o.n * self.d, self.d * o.d, True)
        d1, d2 = self.d // g, o.d // g
        n = self.n * d2 + o.n * d1
        if n.is_zero():
            return QT(_ZERO, _ONE, True)
        h = n.gcd(g)
        if not h.is_one():
            n, g = n // h, g // h
        d = d1 * d2 * g
        if d.leading_coefficient() < 0:
            n, d = -n, -d
        return QT(n, d, True)

    __radd__ = __add__

    def __neg__(self):
        return QT(-self.n, self.d, True)

    def __pos__(self):
        return self

    def __sub__(self, other):
        o = to_qt(other)
        if o is None:
            return NotImplemented
        return self + (-o)

    def __rsub__(self, other):
        o = to_qt(other)
        if o is None:
            return NotImplemented
        return o + (-self)

    def __mul__(self, other):
        o = to_qt(other)
        if o is None:
            return NotImplemented
        if self.n.is_zero() or o.n.is_zero():
            return QT(_ZERO, _ONE, True)
        g1 = self.n.gcd(o.d)
        g2 = o.n.gcd(self.d)
        n = (self.n // g1) * (o.n // g2)
        d = (self.d // g2) * (o.d // g1)
        if d.leading_coefficient() < 0:
            n, d = -n, -d
        return QT(n, d, True)

    __rmul__ = __mul__

    def inverse(self) -> "QT":
        if self.n.is_zero():
            raise ZeroDivisionError("division by zero in Q(T)")
        n, d = self.d, self.n
        if d.leading_coefficient() < 0:
            n, d = -n, -d
        return QT(n, d, True)

    def __truediv__(self, other):
        o = to_qt(other)
        if o is None:
            return NotImplemented
        return self * o.inverse()

    def __rtruediv__(self, other):
        o = to_qt(other)
        if o is None:
            return NotImplemented
        return o * self.inverse()

    def __pow__(self, e):
        if not isinstance(e, int) or isinstance(e, bool):
            return NotImplemented
        if e < 0:
            return self.inverse() ** (-e)
        return QT(self.n ** e, self.d ** e, True)

    # -- comparison ------------------------------------------------------------------
    def __eq__(self, other):
        o = to_qt(other)
        if o is None:
            return NotImplemented
        return self.n == o.n and self.d == o.d

    def __hash__(self):
        if self.is_constant:
            return hash(self.constant())
        return hash((tuple(int(c) for c in self.n.coeffs()), tuple(int(c) for c in self.d.coeffs())))

    def __bool__(self):
        return not self.n.is_zero()

    # -- inspection ------------------------------------------------------------------
    @property
    def is_constant(self) -> bool:
        return self.n.degree() <= 0 and self.d.degree() == 0

    def constant(self) -> mpq:
        """The rational value of a constant element."""
        if not self.is_constant:
            raise ValueError(f"{self} is not a constant")
        return mpq(int(self.n.coeffs()[0]) if not self.n.is_zero() else 0, int(self.d.coeffs()[0]))

    @property
    def numer(self):
        """The numerator (an ``fmpz_poly`` in T)."""
        return self.n

    @property
    def denom(self):
        return self.d

    def as_frac(self) -> FracElement:
        """The same element as a sympy ``FracElement`` of ``QQ.frac_field(T)``."""
        return SYMPY_FIELD(_to_ring(self.n)) / SYMPY_FIELD(_to_ring(self.d))

    def as_expr(self):
        """A sympy expression in the symbol ``T``."""
        return self.as_frac().as_expr()

    def __str__(self):
        return str(self.as_frac())

    __repr__ = __str__


def _normalise(n, d):
    """Coprime numerator and denominator (contents too), positive leading coefficient of d."""
    if d.is_zero():
        raise ZeroDivisionError("zero denominator in Q(T)")
    if n.is_zero():
        return _ZERO, _ONE
    g = n.gcd(d)
    if not g.is_one():
        n, d = n // g, d // g
    if d.leading_coefficient() < 0:
        n, d = -n, -d
    return n, d


def _to_ring(p):
    return SYMPY_RING.from_dict({(e,): QQ(int(c)) for e, c in enumerate(p.coeffs()) if c != 0})


def _from_poly_element(p) -> tuple:
    """(fmpz_poly numerator, fmpz integer denominator) of a sympy PolyElement over QQ."""
    terms = p.terms()
    den = math.lcm(*(int(c.denominator) for _, c in terms)) if terms else 1
    deg = max((e for (e,), _ in terms), default=-1)
    cs = [0] * (deg + 1)
    for (e,), c in terms:
        cs[e] = int(c.numerator) * (den // int(c.denominator))
    return fmpz_poly(cs), den


def from_sympy_frac(a: FracElement) -> QT:
    n, dn = _from_poly_element(a.numer)
    d, dd = _from_poly_element(a.denom)
    return QT(n * dd, d * dn)


def to_qt(x):
    """QT from int, mpz, mpq, Fraction, fmpz, fmpq or QT; None for anything else."""
    if isinstance(x, QT):
        return x
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, fmpz, type(mpz(0)))):
        return QT(fmpz_poly([int(x)]), _ONE, True)
    if isinstance(x, (type(mpq(0)), Fraction)):
        n, d = int(x.numerator), int(x.denominator)
        return QT(fmpz_poly([n]), fmpz_poly([d]), True) if n else QT(_ZERO, _ONE, True)
    if isinstance(x, fmpq):
        return to_qt(mpq(int(x.p), int(x.q)))
    return None


def roots_in_k(cs) -> list:
    """Roots in Q(T) of ``sum(cs[i] * k**i)`` (``cs``: :class:`QT`, trimmed, degree >= 1)
    when it splits into distinct linear factors over Q(T); otherwise :class:`NotSplit`.

    Denominators are cleared to a primitive polynomial in ``Z[T][k]`` and factored
    there (flint); by Gauss's lemma its factors of positive degree in ``k`` are the
    factors over Q(T).  Each must be ``a(T) k + b(T)`` with multiplicity 1, giving
    the root ``-b/a``.
    """
    deg = len(cs) - 1
    poly = _clear_denominators(cs)
    _, factors = poly.factor()
    out = []
    for g, e in factors:
        dk = g.degrees()[1]
        if dk == 0:
            continue                         # content in T alone: no root
        if dk != 1 or e != 1:
            raise NotSplit(f"the polynomial in k does not split into distinct linear "
                           f"factors over Q(T): factor {g} of degree {dk} in k, "
                           f"multiplicity {e}")
        a, b = {}, {}
        for (eT, ek), c in g.to_dict().items():
            (a if ek == 1 else b)[eT] = int(c)
        out.append(-QT(_dense(b), _dense(a)))
    if len(out) != deg:
        raise NotSplit(f"found {len(out)} roots of a polynomial of degree {deg} in k")
    return out


def _dense(terms: dict):
    deg = max(terms, default=-1)
    return fmpz_poly([terms.get(e, 0) for e in range(deg + 1)])


def _clear_denominators(cs):
    """The primitive polynomial in ``Z[T, k]`` proportional to ``sum cs[i] k^i``."""
    lcm = cs[0].d
    for c in cs[1:]:
        lcm = (lcm * c.d) // lcm.gcd(c.d)
    terms = {}
    for i, c in enumerate(cs):
        p = c.n * (lcm // c.d)
        for eT, coef in enumerate(p.coeffs()):
            if coef != 0:
                terms[(eT, i)] = int(coef)
    poly = _BIVARIATE.from_dict(terms)
    return poly.primitive()[1]
