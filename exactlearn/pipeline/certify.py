"""The certificate (README, "What a failure means"): recompute every observed value from the recovered heads.

It costs no queries.  Exact fields compare with ``==``; the real field with its
own tolerance (``K.eq``).  The first mismatching observation is reported.
"""

from __future__ import annotations

from exactlearn.fields.base import ExactnessError
from exactlearn.errors import FieldError
from exactlearn.model import HeadEvaluator
from exactlearn.errors import CertificateError


def certify(heads, d: int, observations, K) -> int:
    """Check ``f_heads(tokens) == value`` for every ``(tokens, value)``.

    Returns the number of observations checked; raises :class:`CertificateError`.
    """
    ev = HeadEvaluator(heads, d, K)
    n = 0
    for tokens, value in observations:
        try:
            got = ev(tokens)
        except ExactnessError as exc:      # recovered heads the field cannot even evaluate
            raise CertificateError(
                f"the recovered heads cannot be evaluated exactly on an observed query ({exc}); "
                f"they do not describe the black box") from None
        if not K.eq(got, value):
            raise CertificateError(
                f"recovered heads do not reproduce the oracle on a query of length {len(tokens)} "
                f"(final token {list(map(str, tokens[-1]))})")
        n += 1
    return n


def verify_fresh(oracle, heads, d, H, K, convert, rng, R, n) -> tuple:
    """``n`` fresh random queries (length 1..2H+1, entries in [-R, R]) comparing
    ``heads`` with the black box (``--verify N``): ``(agreed, error or None)``.

    They are reported apart from the learning queries (``verify_queries``)."""
    ev = HeadEvaluator(heads, d, K)
    for _ in range(n):
        length = rng.randint(1, 2 * H + 1)
        tokens = [tuple(rng.randint(-R, R) for _ in range(d)) for _ in range(length)]
        try:
            y = oracle(tokens)
            if convert:
                y = K(y)
            agrees = K.eq(ev(tokens), y)
        except (FieldError, ValueError, TypeError) as exc:
            return False, f"verification failed: a fresh random query could not be compared ({exc})"
        if not agrees:
            return False, "verification failed: a fresh random query disagrees with the certified heads"
    return True, None
