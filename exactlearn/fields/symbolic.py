"""The symbolic field Q(T), T = e^(1/D): the exact ground truth (SPEC §4).

``Symbolic(scale=D)`` keeps ``T`` as an indeterminate (legitimately: ``T`` is
transcendental by Lindemann, so ``Q(T)`` is isomorphic to rational functions in
an indeterminate).  ``exp(s) = T^(D*s)`` needs ``D*s`` to be an integer
(otherwise :class:`~exactlearn.errors.ExactnessError`); ``log`` inverts it
on monomials ``T^n`` with coefficient 1 and returns ``n/D``.  Every other exact
field is a specialisation ``T -> b`` of this one (:meth:`Symbolic.specialize`).

Elements are :class:`QT`: a numerator and a denominator in ``Z[T]`` (python-flint
``fmpz_poly``), coprime in ``Z[T]`` -- contents included -- with a positive leading
coefficient of the denominator, so every element has exactly one representation
(equality and hashing are structural).  Arithmetic is flint's C code: a gcd of two
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

import math
from fractions import Fraction

import flint
import sympy
from flint import fmpq, fmpq_poly, fmpz, fmpz_poly
from gmpy2 import mpq, mpz
from sympy.polys.domains import QQ
from sympy.polys.fields import FracElement
from sympy.polys.polyerrors import PolynomialError
from sympy.polys.rings import PolyElement

from exactlearn.fields.base import ExactnessError, Field, FieldError, NotExponential, NotSplit, as_mpq, format_rational
from exactlearn.fields.rational import Rational

__all__ = ["Symbolic", "QT"]

_T = sympy.Symbol("T")
_DOMAIN = QQ.frac_field(_T)          # sympy's Q(T): only for reading and printing
_FIELD = _DOMAIN.field
_RING = _FIELD.ring
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
        o = _coerce(other)
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
        o = _coerce(other)
        if o is None:
            return NotImplemented
        return self + (-o)

    def __rsub__(self, other):
        o = _coerce(other)
        if o is None:
            return NotImplemented
        return o + (-self)

    def __mul__(self, other):
        o = _coerce(other)
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
        o = _coerce(other)
        if o is None:
            return NotImplemented
        return self * o.inverse()

    def __rtruediv__(self, other):
        o = _coerce(other)
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
        o = _coerce(other)
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
        return _FIELD(_to_ring(self.n)) / _FIELD(_to_ring(self.d))

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
    return _RING.from_dict({(e,): QQ(int(c)) for e, c in enumerate(p.coeffs()) if c != 0})


def _from_poly_element(p) -> tuple:
    """(fmpz_poly numerator, fmpz integer denominator) of a sympy PolyElement over QQ."""
    terms = p.terms()
    den = math.lcm(*(int(c.denominator) for _, c in terms)) if terms else 1
    deg = max((e for (e,), _ in terms), default=-1)
    cs = [0] * (deg + 1)
    for (e,), c in terms:
        cs[e] = int(c.numerator) * (den // int(c.denominator))
    return fmpz_poly(cs), den


def _from_frac(a: FracElement) -> QT:
    n, dn = _from_poly_element(a.numer)
    d, dd = _from_poly_element(a.denom)
    return QT(n * dd, d * dn)


def _coerce(x):
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
        return _coerce(mpq(int(x.p), int(x.q)))
    return None


class Symbolic(Field):
    """Q(T) with ``exp(s) = T^(D*s)``; :class:`QT` elements."""

    name = "symbolic"
    is_exact = True

    def __init__(self, scale: int | None = None):
        super().__init__(scale)
        self.T = QT.monomial(1)

    def __repr__(self):
        return f"Symbolic(scale={self.scale})"

    def __reduce__(self):
        return (Symbolic, (self.scale,))

    def with_scale(self, scale):
        return Symbolic(scale)

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
            if x.field != _FIELD:
                raise ValueError(f"{x} belongs to {x.field}, not to {_FIELD}")
            return _from_frac(x)
        if isinstance(x, PolyElement):
            if x.ring != _RING:
                raise ValueError(f"{x} belongs to {x.ring}, not to {_RING}")
            return _from_frac(_FIELD(x))
        if isinstance(x, sympy.Expr) and not isinstance(x, sympy.Rational):
            extra = x.free_symbols - {_T}
            if extra:
                raise ValueError(f"{x} involves symbols other than T: {sorted(map(str, extra))}")
            try:
                return _from_frac(_FIELD.from_expr(x))
            except (ValueError, PolynomialError, TypeError):
                raise ValueError(f"{x} is not a rational function of T over Q") from None
        got = _coerce(x) if not isinstance(x, (str, float, complex)) else None
        if got is not None:
            return got
        if isinstance(x, sympy.Rational):
            return _coerce(mpq(int(x.p), int(x.q)))
        return _coerce(as_mpq(x))

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

    def exp(self, s):
        """``T^(D*s)``."""
        return QT.monomial(self.exponent(s))

    def power(self, n: int):
        """``T^n`` (the oracle's hot path)."""
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
        linear factors over Q(T).

        Denominators are cleared to a primitive polynomial in ``Z[T][k]`` and factored
        there (flint); by Gauss's lemma its factors of positive degree in ``k`` are the
        factors over Q(T).  Each must be ``a(T) k + b(T)`` with multiplicity 1, giving
        the root ``-b/a``; otherwise :class:`NotSplit`.
        """
        cs = [self(c) for c in coeffs]
        while cs and not cs[-1]:
            cs.pop()
        deg = len(cs) - 1
        if deg <= 0:
            return []
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
