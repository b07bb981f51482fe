"""The symbolic field Q(T), T = e^(1/D): the exact ground truth (SPEC §4).

``Symbolic(scale=D)`` keeps ``T`` as an indeterminate (legitimately: ``T`` is
transcendental by Lindemann, so ``Q(T)`` is isomorphic to rational functions in
an indeterminate).  ``exp(s) = T^(D*s)`` needs ``D*s`` to be an integer
(otherwise :class:`~exactlearn.fields.base.ExactnessError`); ``log`` inverts it
on monomials ``T^n`` with coefficient 1 and returns ``n/D``.  Every other exact
field is a specialisation ``T -> b`` of this one (:meth:`Symbolic.specialize`).

Elements are sympy ``FracElement`` of ``QQ.frac_field(T)`` (sympy's sparse
rational functions, kept in lowest terms; with python-flint installed their
coefficients are flint ``fmpq``).  python-flint 0.9 has no rational-function
type, so it is used only where it is much faster: :meth:`Symbolic.roots`
factors the cleared polynomial in ``Z[T, k]`` with flint's ``fmpz_mpoly``.
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

import flint
import sympy
from gmpy2 import mpq
from sympy.polys.domains import QQ
from sympy.polys.fields import FracElement
from sympy.polys.polyerrors import PolynomialError
from sympy.polys.rings import PolyElement

from .base import ExactnessError, Field, FieldError, NotExponential, NotSplit, as_mpq, format_rational
from .rational import Rational

__all__ = ["Symbolic"]

_T = sympy.Symbol("T")
_DOMAIN = QQ.frac_field(_T)          # sympy caches it: every Symbolic shares one element type
_FIELD = _DOMAIN.field
_RING = _FIELD.ring
_BIVARIATE = flint.fmpz_mpoly_ctx.get(("T", "k"), "lex")


class Symbolic(Field):
    """Q(T) with ``exp(s) = T^(D*s)``; sympy ``FracElement`` elements."""

    name = "symbolic"
    is_exact = True

    def __init__(self, scale: int | None = None):
        super().__init__(scale)
        self.T = _FIELD.gens[0]

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
        element of Q(T) or Q[T], or a sympy expression in the symbol ``T``."""
        if isinstance(x, FracElement):
            if x.field != _FIELD:
                raise ValueError(f"{x} belongs to {x.field}, not to {_FIELD}")
            return x
        if isinstance(x, PolyElement):
            if x.ring != _RING:
                raise ValueError(f"{x} belongs to {x.ring}, not to {_RING}")
            return _FIELD(x)
        if isinstance(x, sympy.Expr) and not isinstance(x, sympy.Rational):
            extra = x.free_symbols - {_T}
            if extra:
                raise ValueError(f"{x} involves symbols other than T: {sorted(map(str, extra))}")
            try:
                return _FIELD.from_expr(x)
            except (ValueError, PolynomialError, TypeError):
                raise ValueError(f"{x} is not a rational function of T over Q") from None
        q = as_mpq(x)
        return _FIELD(QQ(int(q.numerator), int(q.denominator)))

    @property
    def zero(self):
        return _FIELD.zero

    @property
    def one(self):
        return _FIELD.one

    def is_zero(self, a):
        return not self(a).numer

    def eq(self, a, b):
        return not (self(a) - self(b)).numer

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
        return self.T ** self.exponent(s)

    def log(self, a):
        """``n/D`` when ``a`` is exactly ``T^n``; otherwise :class:`NotExponential`."""
        a = self(a)
        num, den = a.numer, a.denom
        if not num:
            raise NotExponential("0 is not a power of T")
        if len(num.terms()) != 1 or len(den.terms()) != 1:
            raise NotExponential(f"{a} is not a power of T (not a monomial over a monomial)")
        n = int(num.degree()) - int(den.degree())
        if not self.eq(a, self.T ** n):
            raise NotExponential(f"{a} is not a power of T (coefficient "
                                 f"{num.LC / den.LC} is not 1)")
        return mpq(n, self.D)

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
        while cs and not cs[-1].numer:
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
                (a if ek == 1 else b)[(eT,)] = QQ(int(c))
            out.append(-_FIELD(_RING.from_dict(b)) / _FIELD(_RING.from_dict(a)))
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
        if not (a.numer.is_ground and a.denom.is_ground):
            raise FieldError(f"{a} is not a rational constant: it depends on T = e^(1/{self.D})")
        q = a.numer.LC / a.denom.LC if a.numer else QQ(0)
        return mpq(int(q.numerator), int(q.denominator))

    def format(self, a) -> str:
        """``"p/q"`` for rationals and constants, sympy's string for other elements."""
        if isinstance(a, (FracElement, PolyElement)):
            a = self(a)
            if a.numer.is_ground and a.denom.is_ground:
                return format_rational(self.to_param(a))
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
            for (e,), c in sorted(p.terms(), reverse=True):
                out = out + K(mpq(int(c.numerator), int(c.denominator))) * t ** e
            return out

        den = ev(a.denom)
        if K.is_zero(den):
            raise ZeroDivisionError(f"the denominator of {a} vanishes at T = {t}")
        return ev(a.numer) / den


def _clear_denominators(cs):
    """The primitive polynomial in ``Z[T, k]`` proportional to ``sum cs[i] k^i``."""
    lcm = cs[0].denom
    for c in cs[1:]:
        lcm = lcm.lcm(c.denom)
    terms = {}
    for i, c in enumerate(cs):
        p = c.numer * lcm.exquo(c.denom)
        for (eT,), coef in p.terms():
            terms[(eT, i)] = coef
    den = math.lcm(*(int(coef.denominator) for coef in terms.values()))
    poly = _BIVARIATE.from_dict({m: int(coef.numerator) * (den // int(coef.denominator))
                                 for m, coef in terms.items()})
    return poly.primitive()[1]
