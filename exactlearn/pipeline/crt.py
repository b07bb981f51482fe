"""The multi-modular method's primes and reconstruction (:mod:`~exactlearn.pipeline.multimodular`;
docs: explanation/multimodular.md): the analysis primes (:func:`analysis_primes`), the random
confirmation prime (:func:`draw_confirmation_field`), rational heads from residues by CRT
(:func:`reconstruct_heads`, and within a declared height bound :func:`reconstruct_bounded`),
the stated bounds (:func:`log2_wrong_bound`, :func:`log2_plan_degeneracy`) and the report of
a run certified modulo one prime only (:func:`residue_report`).
"""

from __future__ import annotations

import math

import gmpy2
from gmpy2 import mpq

from exactlearn.errors import HeightExceeded
from exactlearn.fields.modular import (ConfirmationModular, DEFAULT_P, Modular,
                                       ReconstructionError, crt_reconstruct, rational_reconstruct)
from exactlearn.model import Head, HeadSet, constant_of


#: Analysis primes are ``c * 2**ANALYSIS_SHIFT + 1`` for odd c (p - 1 smooth: discrete logs).
ANALYSIS_SHIFT = 120

#: Default number of analysis primes before the height is declared out of reach.
DEFAULT_MAX_PRIMES = 12

#: The confirmation prime is uniform among the primes in [2^(CONFIRM_BITS-1), 2^CONFIRM_BITS).
CONFIRM_BITS = 127

#: log2 of the number of primes in [2^126, 2^127), from below (Rosser--Schoenfeld:
#: x/ln x < pi(x) < 1.25506 x/ln x).
LOG2_CONFIRM_PRIMES = 119

#: Bits of the true heights assumed in the stated bound: any model held in memory (32 GiB).
MODEL_BITS_LOG2 = 38


def analysis_primes(first: int = DEFAULT_P):
    """``first``, then the primes ``c * 2**120 + 1``, c = 3, 5, 7, ... that are prime (skipping ``first``).

    >>> from itertools import islice
    >>> [(p - 1) >> 120 for p in islice(analysis_primes(), 4)]
    [7, 231, 277, 315]
    """
    yield first
    c = 1
    while True:
        c += 2
        p = c * 2 ** ANALYSIS_SHIFT + 1
        if p != first and gmpy2.is_prime(p, 50):
            yield p


def draw_confirmation_field(rng, scale: int, bits: int = CONFIRM_BITS) -> ConfirmationModular:
    """A prime uniform among the primes in [2^(bits-1), 2^bits) (rejection sampling of odd
    numbers) and omega uniform in [2, p-2], from ``rng``."""
    while True:
        n = rng.getrandbits(bits - 1) | (1 << (bits - 1)) | 1
        if gmpy2.is_prime(n, 50):
            return ConfirmationModular(n, rng.randrange(2, n - 1), scale)


def log2_wrong_bound(heads, confirmations: int = 1) -> float:
    """log2 of the bound on the probability that a wrong reconstruction survives a
    confirmation: (max h(r) + 2^38 + 1) / (126 * 2^119), h in bits (module docstring),
    times the number of confirmations asked (a union bound over them)."""
    values = [x for hd in heads for x in hd.v] + [constant_of(heads)]
    h = max((height(x).bit_length() for x in values), default=1)
    return round(math.log2(h + 2 ** MODEL_BITS_LOG2 + 1) - math.log2(CONFIRM_BITS - 1)
                 - LOG2_CONFIRM_PRIMES + math.log2(max(1, confirmations)), 1)


def reconstruct_heads(W_set, residues, moduli):
    """Rational heads from per-prime residue vectors, or None when some value is past the
    reconstruction bound of the product of the moduli.  ``W_set``: each head's W, or with
    biases its (W, u) (exact from the logs).  A run with biases has one residue vector more than heads, the
    constant ``(c,)`` (docs: explanation/biases.md), and gives a
    :class:`~exactlearn.model.HeadSet`."""
    bias = len(residues[0]) == len(W_set) + 1
    try:
        vs = [tuple(crt_reconstruct([r[h][i] for r in residues], moduli)
                    for i in range(len(residues[0][h]))) for h in range(len(residues[0]))]
    except ReconstructionError:
        return None
    if not bias:                     # W_set: each head's W
        return tuple(Head(W, v) for W, v in zip(W_set, vs))
    heads = tuple(Head(W, v, u) for (W, u), v in zip(W_set, vs))
    return HeadSet(heads, vs[-1][0], True)


def height(x) -> int:
    """max(|numerator|, denominator) of a rational."""
    x = mpq(x)
    return max(abs(int(x.numerator)), int(x.denominator))


def reconstruct_bounded(W_set, residues, moduli, B: int) -> tuple:
    """The heads whose v are *the* rationals of height <= B congruent to the residues
    (unique since the product M of the moduli exceeds 2 B^2), their W checked against B.
    Raises :class:`HeightExceeded` when a value has no such preimage or a W entry is
    taller than B: the box breaks the declared bound."""
    M = math.prod(moduli)
    if M <= 2 * B * B:
        raise ValueError("reconstruct_bounded needs a product of moduli above 2 B^2")
    tall = [x for W in W_set for row in W for x in row if height(x) > B]
    if tall:
        raise HeightExceeded(f"W has an entry of height {height(tall[0])} > {B}: the black box "
                             f"breaks the declared height bound (--max-height / max_height)")
    try:
        return tuple(Head(W, tuple(crt_reconstruct([r[h][i] for r in residues], moduli, B)
                                   for i in range(len(residues[0][h]))))
                     for h, W in enumerate(W_set))
    except ReconstructionError:
        raise HeightExceeded(
            f"a value of v has no rational preimage of height <= {B} modulo the "
            f"{len(moduli)} prime(s) asked: the black box breaks the declared height bound "
            f"(--max-height / max_height)") from None


def worst_exponent_factor(plan) -> int:
    """max over the plan's configurations of ||e||_1 ||x||_1: |e^T W x| <= B times it when
    every entry of W has height <= B."""
    return max(sum(abs(a) for a in c.e) * sum(abs(a) for a in c.x) for c in plan.configs)


def log2_plan_degeneracy(plan, H: int) -> float:
    """log2 of the bound on the probability, over the draw of the plan, that a reduction
    modulo the analysis prime is degenerate in a way the analysis cannot see
    (docs/explanation/multimodular.md, "A declared height bound"):
    ((2d - 1) H + H (H - 1)) / (2R + 1), divided by the probability 1 - 2d/(2R + 1) that
    the draw is invertible; R the smallest largest entry of X and E (at most the range the
    entries were drawn from, so the bound is conservative)."""
    d = plan.d
    R = min(max(abs(a) for col in plan.X for a in col), max(abs(a) for col in plan.E for a in col))
    n = (2 * d - 1) * H + H * (H - 1)
    inv = 1 - 2 * d / (2 * R + 1)
    if inv <= 0:
        return 0.0
    return round(min(0.0, math.log2(n / (2 * R + 1) / inv)), 1)


#: The height-bound route certifies from its primes alone when the plan's degeneracy bound is
#: at most 2^MAX_LOG2_BOUNDED; otherwise it adds a confirmation prime.
MAX_LOG2_BOUNDED = -20


def residue_report(heads, K: Modular, queries=None) -> dict:
    """What a run modulo one fixed prime certifies: the heads reproduce every answer
    modulo p -- and no more.

    v is certified as residues modulo p (``v_residues``).  W is the exact rational
    whose exponents D e^T W x the discrete logs give, lifted to (-(p-1)/2, (p-1)/2]:
    it is the true W only if the box's exponents did not wrap, i.e.
    |D e^T W x| < (p-1)/2 on the plan's queries, which a box that answers modulo
    one prime cannot show (with its model at hand, ``Oracle.check_plan`` does).
    ``rational_guess`` reconstructs each v from p alone (None past the bound) and is
    **not** certified.
    """
    def guess(r):
        try:
            return str(rational_reconstruct(int(r), K.p))
        except ReconstructionError:
            return None

    return {"exact_over_Q": False, "modulus": str(K.p),
            "primes": [{"p": str(K.p), "role": "analysis", "queries": queries}],
            "v_residues": [[str(int(x)) for x in h.v] for h in heads],
            **({"constant_residue": str(int(constant_of(heads)))} if getattr(heads, "bias", False) else {}),
            "rational_guess": [[guess(x) for x in h.v] for h in heads],
            "note": "certified modulo p only: the black box answers modulo one prime. The heads "
                    "reproduce every answer modulo p; v is given as residues modulo p, and W is "
                    "exact only if the box's exponents D e^T W x stayed within (p-1)/2 (not "
                    "checkable from answers modulo one prime). The rationals are an uncertified "
                    "guess."}
