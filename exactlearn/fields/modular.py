"""The modular field F_p: softmax realised exactly modulo a prime.

docs: howto/field-and-range.md#number-systems-fields and docs: explanation/multimodular.md.

``Modular(p, omega, scale=D)`` is the specialisation ``T -> omega`` of
``Q(T)``, ``T = e^(1/D)``, followed by reduction modulo ``p``:
``exp(s) = omega^(D*s)`` in ``F_p``.  ``p`` is a prime with smooth ``p - 1``
and ``omega`` a primitive root, so *every* nonzero element is an exponential
and ``log`` is a discrete logarithm.  The default is ``p = 7*2**120 + 1`` with
``omega = 3``.  Elements are python-flint ``fmpz_mod`` values of constant size,
whatever the size of the scores.

* ``exp(s)`` needs ``n = D*s`` to be an integer in the symmetric range
  ``(-(p-1)/2, (p-1)/2]``; outside it ``omega^n`` would not determine ``n`` and
  a wrapped score would pass every check in F_p, so it raises
  :class:`~exactlearn.errors.ExactnessError` instead.
* ``log(a)`` is a windowed Pohlig--Hellman discrete log written with gmpy2
  (:class:`DiscreteLog`); the exponent is lifted to the symmetric range and
  divided by ``D``.
* ``roots`` uses python-flint's ``fmpz_mod_poly`` and refuses anything that is
  not a product of distinct linear factors.
* ``to_param`` is rational reconstruction with a safety margin
  (:func:`rational_reconstruct`): a residue comes back as a rational only when
  one of height far below ``sqrt(p/2)`` exists, so a value whose true height is
  too large for ``p`` raises :class:`ReconstructionError` rather than
  returning a wrong small rational.  :func:`crt_reconstruct` recovers it from
  its residues modulo several primes.  The guarantee is exact for true heights
  up to ``sqrt((p-1)/2)`` (uniqueness) and probabilistic beyond: a *structured*
  value can collide, e.g. ``1/(2**78 - 1)`` is congruent modulo ``7*2**120+1``
  to ``-7*2**42/(7*2**42 + 1)``.  Certify a reconstructed answer outside F_p
  (over Q, or modulo a second prime).
* A rational whose denominator is divisible by ``p`` has no image in F_p
  (a bad reduction): embedding it raises :class:`BadReduction`.

>>> K = Modular(scale=2)
>>> K
Modular(p=7*2**120+1, omega=3, scale=2)
>>> K.exp(mpq(5, 2)) == K(3) ** 5
True
>>> K.log(K.exp(mpq(-7, 2))), K.log(K(9))                 # 9 = 3^(2*1)
(mpq(-7,2), mpq(1,1))
>>> K.to_param(K("-3/7") * K(2))
mpq(-6,7)
>>> [K.to_param(r) for r in K.roots([K(2), K(3), K(1)])]     # (k+1)(k+2)
[mpq(-2,1), mpq(-1,1)]
>>> len(K.roots([K(1), K(0), K(1), K(0)]))                    # k^2 + 1, p = 1 mod 4
2
>>> K.roots([K(1), K(2), K(1)])
Traceback (most recent call last):
...
exactlearn.errors.NotSplit: Q(k) has a repeated root over F_p (it is not squarefree)
>>> Modular(p=97).describe()
{'field': 'modular', 'p': '97', 'omega': 5, 'scale': 1}
>>> crt_reconstruct([int(Modular(p=p)("22/7")) for p in (97, 193)], [97, 193], bound=40)
mpq(22,7)
"""

from __future__ import annotations

import functools
import numbers

import flint
import gmpy2
from gmpy2 import mpq, mpz

from exactlearn.algebra import polys
# TABLE_BITS, SMOOTH_LIMIT, DiscreteLog, MARGIN_BITS, crt_reconstruct: re-exported (their old home)
from exactlearn.algebra.dlog import SMOOTH_LIMIT, TABLE_BITS, DiscreteLog, factor_smooth, is_primitive_root
from exactlearn.algebra.dlog_many import field_logs
from exactlearn.algebra.reconstruct import (MARGIN_BITS, crt_reconstruct, rational_reconstruct,
                                            reconstruction_bound)
from exactlearn.errors import BadReduction, ReconstructionError
from exactlearn.fields.base import (ExactnessError, Field, FieldError, NotExponential, NotSplit, as_mpq,
                                    flint_rational_interpolate, integer_arg)
from exactlearn.fields.rational import Rational
from exactlearn.limits import readable_int

#: The default prime ``7*2**120 + 1`` (p - 1 = 7 * 2^120) and its primitive root 3.
DEFAULT_P = 7 * 2**120 + 1
DEFAULT_OMEGA = 3

_FMPZ_MOD = flint.fmpz_mod
_MPZ = type(mpz(0))


@functools.lru_cache(maxsize=32)
def _setup(p: int, omega: int | None):
    """Validated (p, omega, factors of p-1, flint contexts); cached per (p, omega)."""
    if p < 3 or not gmpy2.is_prime(p, 50):
        raise ValueError(f"p must be an odd prime, got {readable_int(p)}")
    factors = factor_smooth(p - 1)
    if omega is None:
        omega = next(g for g in range(2, p) if is_primitive_root(g, p, factors))
    elif not is_primitive_root(omega, p, factors):
        raise ValueError(f"omega = {readable_int(omega)} is not a primitive root modulo p = "
                         f"{readable_int(p)}")
    return omega, factors, flint.fmpz_mod_ctx(p), flint.fmpz_mod_poly_ctx(p)


@functools.lru_cache(maxsize=32)
def discrete_log(p: int, omega: int) -> DiscreteLog:
    """The discrete-log tables, built on the first log and shared by all scales."""
    return DiscreteLog(p, omega, _setup(p, omega)[1])


def pretty_prime(p: int) -> str:
    """``"c*2**k+1"`` when that is shorter than the decimal digits."""
    n = p - 1
    k = (n & -n).bit_length() - 1
    c = n >> k
    s = (f"{c}*2**{k}+1" if c > 1 else f"2**{k}+1") if k >= 8 else str(p)
    return s if len(s) < len(str(p)) else str(p)


class Modular(Field):
    """F_p with ``exp(s) = omega^(D*s)``; python-flint ``fmpz_mod`` elements.

    ``omega=None`` takes the least primitive root modulo p (3 for the default
    prime, so ``Modular() == Modular(omega=3)``); an explicit ``omega`` is
    checked to be one.
    """

    name = "modular"
    is_exact = True
    multimodular = True
    _identity = (("p", pretty_prime), ("omega", str))

    def __init__(self, p: int = DEFAULT_P, omega: int | None = None,
                 scale: int | None = None):
        super().__init__(scale)
        if isinstance(p, bool) or not isinstance(p, (numbers.Integral, _MPZ)):    # numpy's too
            raise ValueError(f"p must be an integer prime, got {p!r}")
        if omega is not None and (isinstance(omega, bool)
                                  or not isinstance(omega, (numbers.Integral, _MPZ))):
            raise ValueError(f"omega must be an integer primitive root or None, got {omega!r}")
        p = integer_arg(p, "the prime p", 3)     # its size before any primality test
        omega, factors, ctx, polyctx = _setup(p, None if omega is None else int(omega))
        self.factors = dict(factors)
        self._arithmetic(p, omega, ctx, polyctx)

    def _arithmetic(self, p, omega, ctx, polyctx):
        """Element arithmetic of F_p with ``exp(s) = omega^(D*s)`` (no discrete log needed)."""
        self.p = p
        self.omega = omega
        self._ctx = ctx
        self.poly_ring = polyctx
        self._half = (p - 1) // 2
        self._omega_el = ctx(omega)
        self._omega_inv = self._omega_el.inverse()
        self._exp_cache = {}
        self._known_logs = None
        self.expected_exponents = None
        self._param = Rational(scale=self.scale)
        self._zero = ctx(0)
        self._one = ctx(1)

    # -- identity: _key, repr, pickling and with_scale derive from _identity (Field) ----
    def describe(self):
        return {"field": self.name, "p": str(self.p), "omega": self.omega, "scale": self.D}

    @property
    def order(self) -> int:
        """p - 1, the order of omega."""
        return self.p - 1

    @property
    def max_exponent(self) -> int:
        """(p-1)/2: exp(s) needs -(p-1)/2 < D*s <= (p-1)/2 (checked by plans before querying);
        None for a field without discrete log (any D*s)."""
        return self._half

    @property
    def height_bound(self) -> int:
        """|num| and den bound of the rationals :meth:`to_param` accepts."""
        return reconstruction_bound(self.p)

    # -- elements -----------------------------------------------------------
    @property
    def zero(self):
        return self._zero

    @property
    def one(self):
        return self._one

    def __call__(self, x):
        if type(x) is _FMPZ_MOD:
            try:
                return self._ctx(x)
            except ValueError:
                raise ValueError(f"{x!r} belongs to a different modular field, not F_{self.p}") from None
        if type(x) is int:
            return self._ctx(x)
        if type(x) is _MPZ:
            return self._ctx(int(x))
        q = as_mpq(x)
        num, den = int(q.numerator), int(q.denominator)
        if den == 1:
            return self._ctx(num)
        if den % self.p == 0:
            raise BadReduction(
                f"{x} has a denominator divisible by p = {self.p}, so it has no image in F_p "
                f"(bad reduction); use another prime")
        return self._ctx(num * int(gmpy2.invert(den, self.p)))

    def is_zero(self, a):
        return a == 0

    def eq(self, a, b):
        return a == b

    # -- exp / log ------------------------------------------------------------
    def exponent(self, s) -> int:
        """The integer n = D*s, or raise ExactnessError (D*s not an integer, or
        outside the symmetric range (-(p-1)/2, (p-1)/2] where log inverts exp)."""
        n = as_mpq(s) * self.D
        if n.denominator != 1:
            raise ExactnessError(
                f"exp({s}) is not exact over F_p with D={self.D}: D*s = {n} is not an integer "
                f"(use a field whose scale D clears the score denominators)")
        n = int(n.numerator)
        if not -self._half < n <= self._half:
            raise ExactnessError(
                f"exp({s}): exponent D*s = {n} is outside (-(p-1)/2, (p-1)/2] for p = "
                f"{pretty_prime(self.p)}, so log could not recover it; use a smaller query "
                f"range or a larger prime")
        return n

    def exp(self, s):
        """``omega^(D*s)`` (cached per exponent)."""
        return self.power(self.exponent(s))

    def power(self, n):
        """``omega^n`` for an integer n in (-(p-1)/2, (p-1)/2] -- any n when the field has
        no discrete log (``_half`` None, :class:`ConfirmationModular`) -- (cached)."""
        cache = self._exp_cache
        v = cache.get(n)
        if v is None:
            half = self._half
            if half is not None and not -half < n <= half:
                raise ExactnessError(
                    f"exponent {n} is outside (-(p-1)/2, (p-1)/2] for p = "
                    f"{pretty_prime(self.p)}, so log could not recover it; use a smaller query "
                    f"range or a larger prime")
            v = self._omega_el ** n if n >= 0 else self._omega_inv ** (-n)
            if len(cache) >= 1 << 16:
                cache.clear()
            cache[n] = v
        return v

    def log(self, a, max_exponent: int | None = None):
        """``mpq(n, D)`` with ``omega^n = a`` and n in (-(p-1)/2, (p-1)/2].

        Every nonzero element is an exponential; 0 raises NotExponential, and
        so does an ``n`` with ``|n| > max_exponent`` when that bound is given
        (a root that is not the exponential of a score in the plan's range).
        """
        el = self(a)
        x = int(el)
        if x == 0:
            raise NotExponential("0 is not an exponential in F_p")
        if self._known_logs is None and self.expected_exponents:
            half, om, inv = self._half, self._omega_el, self._omega_inv
            ns = {n for e in self.expected_exponents.values() for n in e}
            self._known_logs = {int(om ** n if n >= 0 else inv ** -n): n for n in ns if -half < n <= half}
        n = self._known_logs.get(x) if self._known_logs else None
        if n is None:                       # lifted to (-(p-1)/2, (p-1)/2]
            n, checked = discrete_log(self.p, self.omega).symmetric_checked(x, self.omega)
            cache = self._exp_cache
            if checked and len(cache) < 1 << 16:   # omega^n == a was tested: power(n) is a
                cache[n] = el                # (the certificate's weights T^n, a lookup)
        if max_exponent is not None and abs(n) > max_exponent:
            raise NotExponential(
                f"log of {x} is {n}/{self.D}: |D*s| exceeds the bound {max_exponent}, so it "
                f"is not the exponential of a score in range")
        return mpq(n, self.D)

    def logs(self, elements) -> list:
        """``[self.log(a) for a in elements]``, small logs at once (:func:`~exactlearn.algebra.dlog_many.field_logs`)."""
        return field_logs(self, elements, type(self).log is Modular.log and discrete_log, self._exp_cache)

    def know_exponents(self, exponents) -> None:
        """Remember exponents another prime's analysis found (``{configuration index: [n_h]}``,
        integers in (-(p-1)/2, (p-1)/2]): :meth:`log` of ``omega^n`` is then a lookup, and
        :attr:`expected_exponents` offers them to the analysis as candidate poles
        (:func:`~exactlearn.pipeline.interpolate.poles_expected`, each tested as a root).
        The logs are the same -- an n in that range with ``omega^n = a`` *is* the log of a
        -- and so are the poles, only found without Pohlig--Hellman or root finding.

        >>> K = Modular(p=97)
        >>> K.know_exponents({0: [5, -7]})
        >>> K.log(K.power(-7)), K.log(K.power(3)), K.expected_exponents
        (mpq(-7,1), mpq(3,1), {0: [5, -7]})
        """
        self._known_logs = None            # built on the first log (a cluster's driver takes none)
        self.expected_exponents = dict(exponents)

    # -- polynomials --------------------------------------------------------
    def roots(self, coeffs):
        """Distinct roots (sorted by residue) of sum(coeffs[i] k^i) when it splits
        into distinct linear factors over F_p (python-flint ``fmpz_mod_poly``)."""
        cs = polys.trim([self(c) for c in coeffs], self)
        deg = len(cs) - 1
        if deg <= 0:
            return []
        f = self.poly_ring(cs)
        if not f.is_squarefree():
            raise NotSplit("Q(k) has a repeated root over F_p (it is not squarefree)")
        rs = f.roots()
        if len(rs) != deg or any(mult != 1 for _, mult in rs):
            raise NotSplit(
                f"Q(k) of degree {deg} has only {len(rs)} roots in F_p: it has an "
                f"irreducible factor of degree >= 2")
        return sorted((r for r, _ in rs), key=int)

    # python-flint fmpz_mod_poly (poly_ring): the fast Cauchy interpolation
    rational_interpolate = flint_rational_interpolate

    @property
    def scalar_ctx(self):
        """The python-flint ``fmpz_mod_ctx`` of the elements (the batched steps of
        :mod:`exactlearn.pipeline.interpolate` build ``fmpz_mod_mat`` on it)."""
        return self._ctx

    # -- back to parameters ------------------------------------------------------
    @property
    def param(self):
        return self._param

    def to_param(self, a):
        """The rational of height <= :attr:`height_bound` congruent to ``a``, or
        :class:`ReconstructionError` (see :func:`rational_reconstruct`)."""
        return rational_reconstruct(int(self(a)), self.p)



class ResidueModular(Modular):
    """:class:`Modular` whose :meth:`to_param` keeps the residue: ``mpq(r)``, 0 <= r < p.

    The multi-modular method (:mod:`exactlearn.pipeline.multimodular`) analyses a run
    modulo each prime *without* rational reconstruction: W comes back exactly
    (discrete logs, lifted to the symmetric range), v as residues, represented
    by the integers ``r`` whose image in F_p they are.  Everything else is
    :class:`Modular`.

    >>> K = ResidueModular(p=97)
    >>> K.to_param(K("1/2"))
    mpq(49,1)
    """

    multimodular = False          # one prime of a multi-modular run

    def to_param(self, a):
        """The residue itself, as the integer in [0, p) whose image it is."""
        return mpq(int(self(a)))


class ConfirmationModular(Modular):
    """F_p for *any* prime p, with ``exp(s) = omega^(D*s)`` for a given omega != 0, 1.

    The multi-modular method confirms a reconstruction modulo a random prime
    that it draws itself (:func:`exactlearn.pipeline.multimodular.draw_confirmation_field`);
    such a prime has no smooth p - 1, so this field has no discrete log (its
    :meth:`log` raises :class:`NotExponential`) and omega need not be a
    primitive root.  Exponentials, arithmetic and equality are those of
    :class:`Modular`; ``exp`` accepts every integer exponent D*s.

    >>> K = ConfirmationModular(2**127 - 1, omega=5, scale=2)
    >>> K.exp(mpq(3, 2)) == K(125)
    True
    """

    multimodular = False          # one prime of a multi-modular run
    _identity = (("p", str), ("omega", str))

    def __init__(self, p: int, omega: int, scale: int | None = None):
        Field.__init__(self, scale)
        p, omega = int(p), int(omega)
        if p < 5 or not gmpy2.is_prime(p, 50):
            raise ValueError(f"p must be an odd prime, got {p}")
        if not 1 < omega < p - 1:
            raise ValueError(f"omega must lie in [2, p-2], got {omega}")
        self.factors = {}
        self._arithmetic(p, omega, flint.fmpz_mod_ctx(p), flint.fmpz_mod_poly_ctx(p))
        self._half = None             # no symmetric range: max_exponent None, power(n) for any n

    def describe(self):
        return {"field": self.name, "p": str(self.p), "omega": self.omega, "scale": self.D,
                "role": "confirmation"}

    def exponent(self, s) -> int:
        n = as_mpq(s) * self.D
        if n.denominator != 1:
            raise ExactnessError(f"exp({s}) is not exact with D={self.D}: D*s = {n}")
        return int(n.numerator)

    def log(self, a, max_exponent: int | None = None):
        raise NotExponential("the confirmation field has no discrete logarithm")

