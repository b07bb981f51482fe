"""The real field's certificate: within tolerance, never exact (docs: explanation/real-field.md,
the residual test; docs: explanation/algorithm.md#what-a-failure-means).

What the pipeline's certificate (:mod:`~exactlearn.strategies.real.stable_certificate`) and
its noise tests share: the run's :class:`RealOutcome`; the reported bound of each parameter,
``SAFETY B + r`` (``B`` its first-order bound, the factor 2 covering second-order terms, below
``1e-2`` of the first-order ones since a family fails beyond STABLE_LINEAR_LIMIT; ``r`` the
final solves' rounding); the residual test's ``SECOND_ORDER`` (a residual beyond ``SAFETY
b_q``, ``b_q = sum_p |(J S)_qp - [p = q]| eta_p``, plus ``SECOND_ORDER`` of the entry-by-entry
effect and the rounding, is :class:`~exactlearn.errors.ResidualsBeyondNoise`; formed by
:class:`~exactlearn.strategies.real.stable_checks.SolveAllowance`); the noise test of a fit of
every observation (:func:`beyond_noise`); and the fresh-query verification
(:func:`verify_real`).
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field as dc_field

from gmpy2 import mpq

from exactlearn.errors import FieldError, ResidualsBeyondNoise
from exactlearn.strategies.real import plural
from exactlearn.strategies.real.evaluate import evaluate_with_bounds
from exactlearn.strategies.real.sensitivity import LO, rounding

SAFETY = 2               # reported bound = SAFETY * first-order bound + rounding
#: the residual test's allowance for second-order terms, as a share of the entry-by-entry
#: first-order effect of the parameter errors (those terms are below STABLE_LINEAR_LIMIT, 1e-2,
#: of the first-order ones, or the family fails)
SECOND_ORDER = 0.02


@dataclass
class RealOutcome:
    """What :func:`~exactlearn.strategies.real.stable.run_stable` adds to a learning result."""

    sigma: object
    probe_queries: int
    error_bound: object
    head_bounds: list
    eta: object
    detail: dict
    snap: dict | None = None
    W_bounds: list = dc_field(default_factory=list, repr=False)   # [head][row][col]
    v_bounds: list = dc_field(default_factory=list, repr=False)   # [head][entry]
    etas: dict = dc_field(default_factory=dict, repr=False)       # observation index -> eta_q
    #: with biases (docs/explanation/biases.md): each head's u bounds, the constant, its bound
    u_bounds: list | None = dc_field(default=None, repr=False)    # [head][entry]
    constant: object = None
    c_bound: object = 0


def beyond_noise(m, N, excess, chebyshev, fit):
    """Both plans' tests of the declared noise on a least-squares fit of ``m`` heads to all
    ``N`` observations (module doc): a weighted residual sum of squares ``excess`` times ``N``
    with ``excess > 1``, or a Chebyshev bound (``chebyshev()``, asked only then; None: not
    formed) above ``1 + SECOND_ORDER``, is :class:`~exactlearn.errors.ResidualsBeyondNoise`
    (``fit`` names the fit in the message).

    >>> beyond_noise(2, 10, 1.5, lambda: None, "the fit leaves")
    Traceback (most recent call last):
    ...
    exactlearn.errors.ResidualsBeyondNoise: outputs noisier than the declared eta (or a black box outside the model class, or more heads than 2): the fit leaves a weighted residual sum of squares 1.5 times their number, at most 1 when every output is within its eta
    """
    why = (f"outputs noisier than the declared eta (or a black box outside the model class, or "
           f"more heads than {m}): ")
    if excess > 1:
        raise ResidualsBeyondNoise(
            f"{why}{fit} a weighted residual sum of squares {excess:.3g} times their number, at "
            f"most 1 when every output is within its eta", heads=m)
    bound = chebyshev()
    if bound is not None and bound > 1 + SECOND_ORDER:
        raise ResidualsBeyondNoise(
            f"{why}no model of {plural(m)} keeps every output within its eta -- about the "
            f"least-squares fit of all {N} observations the smallest largest residual over its "
            f"eta is at least {bound:.3g}", heads=m)


#: a fresh verification token's entries are ``sigma`` times multiples of ``2^-VERIFY_BITS``
VERIFY_BITS = 10


def verify_tokens(rng, d: int, H: int, sigma) -> list:
    """One fresh verification query at the plan's own scale (docs:
    explanation/real-field.md): 1 to ``2H + 1`` tokens, each entry ``sigma s k / 2^10`` with
    ``k`` uniform in ``[-2^10, 2^10]`` and ``s = 2^-floor(log2 sqrt(d / 3))`` (about
    ``sqrt(3 / d)``), so that a token's norm is about ``sigma`` like the plan's (its scores
    then of the order of 1, where every entry of W moves the answer).  Entries are dyadic: exact in
    float32 and float64.  (The query range R, thousands of times larger, saturated every
    softmax: a box whose W was off by any positive factor passed.)"""
    shift = VERIFY_BITS + max(0, int(math.floor(math.log2(math.sqrt(d / 3)))))
    step = sigma * mpq(1, 2 ** shift)
    top = 2 ** VERIFY_BITS
    length = rng.randint(1, 2 * H + 1)
    return [tuple(step * rng.randint(-top, top) for _ in range(d)) for _ in range(length)]


def verify_real(oracle, outcome, heads, d, H, K, convert, rng, R, n) -> tuple:
    """``n`` fresh random queries (:func:`verify_tokens`, at the plan's scale ``sigma``; the
    query range ``R`` is not used) compared with the heads within the certificate's
    tolerance."""
    eta = LO.convert(outcome.eta)
    for _ in range(n):
        tokens = verify_tokens(rng, d, H, outcome.sigma)
        y = oracle(tokens)
        try:
            if convert:                 # a float box's answer is its exact binary value
                y = K.from_output(y)
        except (ValueError, TypeError, FieldError) as exc:   # nan, a string, a list: as for a
            return False, (f"verification failed: a fresh random query could not be "  # vector
                           f"compared ({exc})")
        biased = outcome.u_bounds is not None
        if not within_tolerance(heads, tokens, y, K, eta, outcome.W_bounds, outcome.v_bounds,
                                outcome.u_bounds, outcome.constant if biased else 0,
                                outcome.c_bound):
            return False, ("verification failed: a fresh random query disagrees with the "
                           "certified heads beyond the tolerance")
    return True, None


def within_tolerance(heads, tokens, y, K, eta, BW, Bv, Bu, constant, Bc) -> bool:
    """One fresh answer ``y`` against the heads: ``|f - y|`` at most ``eta`` plus the
    first-order effect of the parameter bounds (``BW``, ``Bv``, ``Bu``, ``Bc``:
    :func:`~exactlearn.strategies.real.evaluate.evaluate_with_bounds`) plus twice the rounding
    of terms of the larger of their size and ``|y|``."""
    f, grad, size = evaluate_with_bounds(heads, tokens, K, BW, Bv, Bu, constant, Bc)
    return LO.convert(abs(f - y)) <= eta + grad + 2 * rounding(K, max(size, LO.convert(abs(y))))
