"""Exact rationals from floats and intervals (docs: explanation/real-field.md; docs: howto/transformer.md).

:func:`mpf_to_mpq` is the exact dyadic value of an mpmath float (no rounding);
:func:`simplest_rational` the rational of smallest denominator in an interval,
by continued fractions -- the real field's snapping and the Transformer's
kink locations use it.

>>> import mpmath
>>> mpf_to_mpq(mpmath.mpf(-0.375)), mpf_to_mpq(mpmath.mpf(3) * 2 ** 70)
(mpq(-3,8), mpq(3541774862152233910272,1))
>>> simplest_rational(mpq(1, 3), mpq(2, 5)), simplest_rational(mpq(-7, 10), mpq(-2, 3))
(mpq(1,3), mpq(-2,3))
"""

from __future__ import annotations

from gmpy2 import mpq


def mpf_to_mpq(x) -> mpq:
    """The exact dyadic value of an mpmath ``mpf`` (any context) as an ``mpq``."""
    sign, man, exp, _ = x._mpf_
    v = mpq(int(man)) * (mpq(2) ** exp if exp >= 0 else mpq(1, 2 ** -exp))
    return -v if sign else v


def simplest_rational(lo, hi) -> mpq:
    """The rational with the smallest denominator (then the smallest |numerator|) in the
    closed interval ``[lo, hi]`` of exact rationals; ValueError when it is empty."""
    lo, hi = mpq(lo), mpq(hi)
    if lo > hi:
        raise ValueError("empty interval")
    if lo <= 0 <= hi:
        return mpq(0)
    if hi < 0:
        return -simplest_rational(-hi, -lo)
    fl = lo.numerator // lo.denominator
    if fl == lo:
        return mpq(fl)
    if fl + 1 <= hi:
        return mpq(fl + 1)
    # lo and hi share the integer part fl; recurse on the reciprocals of the fractional parts
    return fl + 1 / simplest_rational(1 / (hi - fl), 1 / (lo - fl))
