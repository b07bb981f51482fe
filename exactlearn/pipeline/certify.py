"""The certificate (SPEC §5): recompute every observed value from the recovered heads.

It costs no queries.  Exact fields compare with ``==``; the real field with its
own tolerance (``K.eq``).  The first mismatching observation is reported.
"""

from __future__ import annotations

from exactlearn.fields.base import ExactnessError
from exactlearn.model import HeadEvaluator


class CertificateError(ArithmeticError):
    """The recovered heads do not reproduce an observed oracle value."""


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
