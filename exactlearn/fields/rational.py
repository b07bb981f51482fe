"""The rational field: softmax at base b realised exactly over Q (docs: howto/field-and-range.md#number-systems-fields).

``Rational(base=2, scale=D)`` is the specialisation ``T -> b`` of ``Q(T)``,
``T = e^(1/D)``: ``exp(s) = b^(D*s)``, which must have ``D*s`` an integer
(otherwise :class:`~exactlearn.errors.ExactnessError`).  With the default
``scale=None`` an :class:`~exactlearn.oracle.Oracle` chooses D as the lcm of the
model's W denominators, so integer query tokens always give integer ``D*s``.

What "softmax at base 2" means: ``2^(D*s) = e^(s * D ln 2)``, so a model over
this field *is* the standard (natural-exp) softmax model with every W_h scaled
by ``D ln 2`` (by ``ln 2`` for integer W, where D = 1).  The learner recovers
the W_h of the model as given, not the scaled ones.

Elements are gmpy2 ``mpq``.  Bit sizes grow like ``|D * e^T W x|``: see
docs: howto/field-and-range.md#choosing-the-range for how the query range trades size against degenerate draws.

>>> K = Rational(scale=2)
>>> K.exp(mpq(3, 2)), K.log(mpq(1, 8))
(mpq(8,1), mpq(-3,2))
>>> sorted(K.roots([mpq(2), mpq(3), mpq(1)]))     # (k+1)(k+2)
[mpq(-2,1), mpq(-1,1)]
"""

from __future__ import annotations

import flint
import gmpy2
from gmpy2 import mpq, mpz

from exactlearn.algebra import polys
from exactlearn.fields.base import (ExactnessError, Field, NotExponential, NotSplit, as_mpq,
                                    flint_rational_interpolate, integer_arg)

#: exp() refuses to build numbers larger than this many bits (bit sizes grow with |s|:
#: docs: howto/field-and-range.md#choosing-the-range).  The CLI checks the whole plan against it before querying.
DEFAULT_MAX_BITS = 1_000_000


class Rational(Field):
    """Q with ``exp(s) = base^(D*s)``; gmpy2 ``mpq`` elements."""

    name = "rational"
    is_exact = True
    is_ordered = True
    is_rational = True
    exponent_hint = " (numbers past the size limit): use --field modular or a smaller --range"
    poly_ring = flint.fmpq_poly

    def __init__(self, base: int = 2, scale: int | None = None, max_bits: int = DEFAULT_MAX_BITS,
                 via_modular: bool = True):
        super().__init__(scale)
        if via_modular not in (True, False):        # numpy's bools and 0 / 1 too
            raise ValueError(f"via_modular must be True or False, got {via_modular!r}")
        self.via_modular = bool(via_modular)
        self.base = integer_arg(base, "the base", 2)
        self.max_bits = integer_arg(max_bits, "max_bits", 1)
        self._log2b = gmpy2.log2(self.base)

    def _key(self):
        return ("Rational", self.base, self.scale, self.max_bits, self.via_modular)

    def __repr__(self):
        return (f"Rational(base={self.base}, scale={self.scale}"
                + (")" if self.via_modular else ", via_modular=False)"))

    def __reduce__(self):
        return (Rational, (self.base, self.scale, self.max_bits, self.via_modular))

    def with_scale(self, scale):
        return Rational(self.base, scale, self.max_bits, self.via_modular)

    def describe(self):
        return {"field": self.name, "base": self.base, "scale": self.D}

    # elements
    def __call__(self, x):
        return as_mpq(x)

    zero = mpq(0)                 # gmpy2 mpq is immutable: one shared 0 and 1
    one = mpq(1)

    def sign(self, z, scale=None):
        """-1, 0 or 1, exactly."""
        return (z > 0) - (z < 0)

    def relu(self, z):
        return z if z > 0 else self.zero

    def is_zero(self, a):
        return a == 0

    def eq(self, a, b):
        return a == b

    @property
    def max_exponent(self):
        """|D*s| beyond which exp() would build numbers of more than max_bits bits."""
        return int(self.max_bits / self._log2b)

    # exp / log
    def exponent(self, s) -> int:
        """The integer D*s, or raise ExactnessError."""
        n = as_mpq(s) * self.D
        if n.denominator != 1:
            raise ExactnessError(
                f"exp({s}) is not exact over Q with D={self.D}: D*s = {n} is not an integer "
                f"(use a field whose scale D clears the score denominators)")
        return int(n.numerator)

    def exp(self, s):
        return self.power(self.exponent(s))

    def power(self, n):
        """``base^n`` for an integer n (T^n under T -> base)."""
        if abs(n) * self._log2b > self.max_bits:
            raise ExactnessError(
                f"exp = {self.base}^{n} would exceed {self.max_bits} bits; "
                f"use a smaller query range or the modular field (--field modular)")
        if n >= 0:
            return mpq(mpz(self.base) ** n)
        return mpq(1, mpz(self.base) ** (-n))

    def log(self, a):
        a = as_mpq(a)
        if a <= 0:
            raise NotExponential(f"{a} is not a power of {self.base}")
        num, den = a.numerator, a.denominator
        if num != 1 and den != 1:
            raise NotExponential(f"{a} is not a power of {self.base}")
        m, sign = (num, 1) if den == 1 else (den, -1)
        n = _exact_log(m, self.base)
        if n is None:
            raise NotExponential(f"{a} is not a power of {self.base}")
        return mpq(sign * n, self.D)

    # polynomials
    def roots(self, coeffs):
        """Rational roots via python-flint's factorisation over Z."""
        cs = polys.trim([as_mpq(c) for c in coeffs], self)
        deg = len(cs) - 1
        if deg <= 0:
            return []
        poly = self.poly_ring([self.to_ring(c) for c in cs])
        _, factors = poly.numer().factor()
        out = []
        for g, e in factors:
            if g.degree() != 1 or e != 1:
                raise NotSplit(f"Q(k) does not split into distinct linear factors over Q "
                               f"(factor of degree {g.degree()}, multiplicity {e})")
            c0, c1 = int(g[0]), int(g[1])
            out.append(mpq(-c0, c1))
        if len(out) != deg:
            raise NotSplit("Q(k) does not split over Q")
        return out

    # python-flint fmpq_poly: the fast Cauchy interpolation and the factorisation in roots
    rational_interpolate = flint_rational_interpolate

    def to_ring(self, a):
        """``a`` as a python-flint ``fmpq``."""
        a = as_mpq(a)
        return flint.fmpq(int(a.numerator), int(a.denominator))

    def from_ring(self, c):
        """A python-flint ``fmpq`` as an ``mpq``."""
        return mpq(int(c.p), int(c.q))

    # parameters
    @property
    def param(self):
        return self

    def to_param(self, a):
        return as_mpq(a)


def _exact_log(m, b):
    """n with b**n == m (m >= 1), else None."""
    m = mpz(m)
    if m == 1:
        return 0
    if b == 2:
        n = m.bit_length() - 1
        return n if m == mpz(1) << n else None
    n = int(gmpy2.floor(gmpy2.log(m) / gmpy2.log(b)))
    for cand in (n - 1, n, n + 1):
        if cand >= 0 and mpz(b) ** cand == m:
            return cand
    return None


QQ = Rational()
