"""The multi-modular policy of the rational field: analyse modulo primes, certify over Q.

The rational field's exact values grow to thousands of bits; its learner
analyses them instead in :class:`ModularImage` -- the reduction of Q (T -> b)
modulo a large prime, where interpolation, roots and discrete logs are fast --
and certifies the result back over Q exactly, so a bad reduction can only cause
a failure, never a wrong certified answer (docs: howto/field-and-range.md#choosing-the-range).
:func:`analysis_fields` is the policy: the reductions modulo
:data:`ANALYSIS_PRIMES` in turn, then Q itself.

This module sits above :mod:`~exactlearn.fields.rational` and
:mod:`~exactlearn.fields.modular`, which therefore do not import each other
both ways.

>>> from exactlearn.fields.rational import Rational
>>> [type(A).__name__ for A in analysis_fields(Rational(scale=1))]
['ModularImage', 'ModularImage', 'Rational']
>>> analysis_fields(Rational(scale=1, via_modular=False)) == [Rational(scale=1, via_modular=False)]
True
"""

from __future__ import annotations

import gmpy2
from gmpy2 import mpq

from exactlearn.errors import ExactnessError, NotExponential
from exactlearn.fields.base import Field, as_mpq
from exactlearn.fields.modular import DEFAULT_P, Modular, discrete_log, pretty_prime
from exactlearn.fields.rational import Rational


#: Primes c*2^k + 1 used, in order, when a reduction modulo the previous one is bad.
ANALYSIS_PRIMES = (DEFAULT_P, 81 * 2 ** 121 + 1)


class ModularImage(Modular):
    """The reduction modulo p of :class:`~exactlearn.fields.rational.Rational` (base b).

    ``exp(s) = b^(D*s) mod p`` and ``log`` is the logarithm to base b inside the
    subgroup <b> of order ``ord(b) = (p-1)/g``, g = gcd(log_omega b, p-1),
    lifted to ``(-ord(b)/2, ord(b)/2]``.  The learner over the rational field
    analyses its exact values here (the multi-modular method) and certifies the
    result back over Q, so a bad reduction can only cause a failure, never a
    wrong certified answer.

    >>> F = ModularImage(base=2)
    >>> F.log(F(mpq(1, 2 ** 40))), F.exp(mpq(5)) == F(32)
    (mpq(-40,1), True)
    """

    multimodular = False          # the rational field certifies over Q itself
    _identity = (("base", str), ("p", pretty_prime))

    def __init__(self, base: int = 2, p: int = DEFAULT_P, scale: int | None = None):
        super().__init__(p, None, scale)
        self.base = int(base)
        L = discrete_log(self.p, self.omega)(self.base % self.p)
        g = int(gmpy2.gcd(L, self.p - 1))
        self._g = g
        self._border = (self.p - 1) // g
        self._Lg_inv = int(gmpy2.invert(L // g, self._border))
        self._b_el = self._ctx(self.base)
        self._b_inv = self._b_el.inverse()

    def describe(self):
        return {"field": self.name, "p": str(self.p), "base": self.base, "scale": self.D}

    @property
    def order(self) -> int:
        """ord(b), the order of the base in F_p^*."""
        return self._border

    @property
    def max_exponent(self) -> int:
        return self._border // 2

    def exponent(self, s) -> int:
        n = as_mpq(s) * self.D
        if n.denominator != 1:
            raise ExactnessError(f"exp({s}): D*s = {n} is not an integer")
        n = int(n.numerator)
        if abs(n) > self.max_exponent:
            raise ExactnessError(f"exp({s}): |D*s| exceeds ord(b)/2 modulo p")
        return n

    def power(self, n):
        if abs(n) > self.max_exponent:
            raise ExactnessError(f"exponent {n}: |n| exceeds ord(b)/2 modulo p")
        return self._b_el ** n if n >= 0 else self._b_inv ** (-n)

    def log(self, a, max_exponent: int | None = None):
        x = int(self(a))
        if x == 0:
            raise NotExponential("0 is not an exponential in F_p")
        t = discrete_log(self.p, self.omega)(x)
        if t % self._g:
            raise NotExponential(f"{x} is not a power of {self.base} modulo p")
        n = (t // self._g) * self._Lg_inv % self._border
        if n > self._border // 2:
            n -= self._border
        if max_exponent is not None and abs(n) > max_exponent:
            raise NotExponential(f"log_{self.base} is {n}: beyond the bound {max_exponent}")
        return mpq(n, self.D)


def analysis_fields(K: Field) -> list:
    """Where the learner analyses ``K``'s values, in order (the multi-modular method).

    For a :class:`~exactlearn.fields.rational.Rational` field with ``via_modular``
    (the default): its reductions modulo the primes of :data:`ANALYSIS_PRIMES`,
    tried in turn, then -- when every reduction failed (a rational past the
    reconstruction bound, about 2^44 in height) -- Q itself; the result is
    always certified back over Q exactly.  Any other field: itself."""
    if isinstance(K, Rational) and K.via_modular:
        exact = Rational(K.base, K.D, K.max_bits, via_modular=False)
        return [ModularImage(K.base, p, K.D) for p in ANALYSIS_PRIMES] + [exact]
    return [K]
