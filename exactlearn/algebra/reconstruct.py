"""Rational reconstruction and the Chinese remainder theorem (docs: explanation/multimodular.md).

A residue modulo m comes back as the rational n/d with n = a*d (mod m) and
|n|, d small (Wang's method), and residues modulo several primes combine by CRT
first, so that the height bound grows like the square root of their product.
"""

from __future__ import annotations

import gmpy2
from gmpy2 import mpq, mpz

from exactlearn.errors import ReconstructionError

#: Safety margin of rational reconstruction: accept |num|, den <= sqrt(m/2) / 2^16.
MARGIN_BITS = 16

# --------------------------------------------------------------------------
# rational reconstruction and CRT
# --------------------------------------------------------------------------

def reconstruction_bound(m) -> int:
    """Default acceptance bound for reconstruction modulo m:
    ``floor(sqrt(m/2)) / 2^MARGIN_BITS``.

    Among the m residues, only about 1.2 * bound^2 = 1.2 * m / 2^33 are images
    of a rational with |num|, den <= bound, so a random residue (the image of
    a rational of too large a height, or of a wrong value) is accepted with
    probability about 1.4e-10 instead of being turned into a plausible small
    rational.

    >>> reconstruction_bound(7 * 2**120 + 1).bit_length()
    45
    """
    return int(gmpy2.isqrt(mpz(m) // 2) >> MARGIN_BITS)


def rational_reconstruct(a, m, bound=None) -> mpq:
    """The rational ``n/d`` with ``n = a*d (mod m)`` and ``|n|, d <= bound``.

    ``bound`` defaults to :func:`reconstruction_bound` ``(m)`` and may be at most
    ``floor(sqrt((m-1)/2))``, the bound under which such a rational is unique.
    The extended Euclidean algorithm on ``(m, a)`` is stopped at the first
    remainder ``<= floor(sqrt((m-1)/2))`` (Wang); the candidate is then
    accepted only within ``bound``.  Otherwise :class:`ReconstructionError`.

    >>> m = 2**61 - 1
    >>> rational_reconstruct(5 * gmpy2.invert(-12, m) % m, m, bound=1000)
    mpq(-5,12)
    >>> rational_reconstruct(123456789, 1009)
    Traceback (most recent call last):
    ...
    exactlearn.errors.ReconstructionError: residue 594 mod 1009 has no rational preimage with |num|, den <= 0 (height bound exceeded); use a larger prime, or several primes and crt_reconstruct
    """
    m = mpz(m)
    if m < 2:
        raise ValueError(f"modulus must be >= 2, got {m}")
    a = mpz(int(a)) % m
    N = gmpy2.isqrt((m - 1) // 2)
    B = reconstruction_bound(m) if bound is None else mpz(bound)
    if B < 0 or B > N:
        raise ValueError(f"bound must lie in [0, floor(sqrt((m-1)/2))] = [0, {N}], got {B}")
    r0, r1, t0, t1 = m, a, mpz(0), mpz(1)
    while r1 > N:
        q, r = gmpy2.f_divmod(r0, r1)
        r0, r1 = r1, r
        t0, t1 = t1, t0 - q * t1
    num, den = (r1, t1) if t1 > 0 else (-r1, -t1)
    if (den > B or abs(num) > B or gmpy2.gcd(num, den) != 1
            or gmpy2.gcd(den, m) != 1):
        raise ReconstructionError(
            f"residue {a} mod {m} has no rational preimage with |num|, den <= {B} "
            f"(height bound exceeded); use a larger prime, or several primes and crt_reconstruct")
    return mpq(num, den)


def crt_reconstruct(residues, moduli, bound=None) -> mpq:
    """Combine residues modulo pairwise coprime moduli by the Chinese remainder
    theorem, then :func:`rational_reconstruct` modulo their product (so the
    height bound grows like the square root of the product).

    Residues may be ints or ``fmpz_mod`` values (``int()`` is taken).

    >>> ps = [2**31 - 1, 2**61 - 1, 2**89 - 1]
    >>> q = mpq(10**20 + 1, 3**30)
    >>> rational_reconstruct(q.numerator * gmpy2.invert(q.denominator, ps[2]) % ps[2], ps[2])
    Traceback (most recent call last):
    ...
    exactlearn.errors.ReconstructionError: residue ... (height bound exceeded); use a larger prime, or several primes and crt_reconstruct
    >>> crt_reconstruct([q.numerator * gmpy2.invert(q.denominator, p) % p for p in ps], ps)
    mpq(100000000000000000001,205891132094649)
    """
    residues, moduli = list(residues), list(moduli)
    if not moduli or len(residues) != len(moduli):
        raise ValueError("crt_reconstruct needs one residue per modulus and at least one modulus")
    x, M = mpz(0), mpz(1)
    for r, m in zip(residues, moduli):
        m = mpz(m)
        if m < 2 or gmpy2.gcd(M, m) != 1:
            raise ValueError(f"moduli must be pairwise coprime integers >= 2, got {moduli}")
        r = mpz(int(r)) % m
        x += M * ((r - x) * gmpy2.invert(M, m) % m)
        M *= m
    return rational_reconstruct(x, M, bound)
