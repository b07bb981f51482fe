"""Snapping real results to exact rationals of bounded height, certified against the oracle
(docs: explanation/real-field.md).

:func:`simplest_rational` finds the rational of smallest denominator in ``[x - B, x + B]``
(``B`` the parameter's certified bound; continued fractions on the exact binary endpoints) and
accepts it only within the height bound ``Q = floor(1 / sqrt(2 B))`` (or a smaller
``height=``): two rationals of height at most Q differ by at least ``1/Q^2 >= 2B``, so the
snapped value is the only candidate.  :func:`snap_heads` snaps every entry and certifies the
snapped model: every observation recomputed from the rationals
(:func:`~exactlearn.strategies.real.evaluate.evaluate_with_bounds`) must agree within
``eta_q`` plus rounding alone, so a wrong snap fails.

>>> from gmpy2 import mpq
>>> simplest_rational(mpq(3333, 10000), mpq(3334, 10000))
mpq(1,3)
>>> simplest_rational(mpq(-7, 4), mpq(-7, 4))
mpq(-7,4)
"""

from __future__ import annotations

import math

from gmpy2 import mpq

from exactlearn.algebra.rationals import mpf_to_mpq, simplest_rational
from exactlearn.fields.base import format_rational
from exactlearn.model import Head
from exactlearn.strategies.real.evaluate import evaluate_with_bounds
from exactlearn.strategies.real.sensitivity import LO, rounding


def height_bound(B) -> int:
    """``floor(1 / sqrt(2 B))``: the largest denominator that keeps a snap unique."""
    B = mpf_to_mpq(B) if hasattr(B, "_mpf_") else mpq(B)
    if B <= 0:
        raise ValueError("the error bound must be positive")
    return max(1, math.isqrt(int(1 / (2 * B))))


def snap_value(x, B, height=None):
    """The unique rational of height <= Q within ``B`` of ``x`` (module doc), or None."""
    Q = height_bound(B) if height is None else min(int(height), height_bound(B))
    xe, Be = mpf_to_mpq(x), (mpf_to_mpq(B) if hasattr(B, "_mpf_") else mpq(B))
    q = simplest_rational(xe - Be, xe + Be)
    return q if q.denominator <= Q else None


def snap_heads(heads, outcome, K, observations, start, height=None) -> dict:
    """Snap every entry of the real ``heads`` using the per-entry bounds of ``outcome``
    (a :class:`~exactlearn.strategies.real.certificate.RealOutcome`) and certify the snapped
    model against the ``observations`` (indices from ``start``) within the noise alone."""
    snapped, failed = [], []
    for h, (head, BW, Bv) in enumerate(zip(heads, outcome.W_bounds, outcome.v_bounds)):
        W = []
        for r, row in enumerate(head.W):
            out = []
            for c, x in enumerate(row):
                q = snap_value(x, BW[r][c], height)
                if q is None:
                    failed.append(f"head {h + 1} W[{r + 1}][{c + 1}]")
                out.append(q)
            W.append(tuple(out))
        v = []
        for r, x in enumerate(head.v):
            q = snap_value(x, Bv[r], height)
            if q is None:
                failed.append(f"head {h + 1} v[{r + 1}]")
            v.append(q)
        snapped.append((tuple(W), tuple(v)))     # a Head once every entry snapped
    info = {"height_bound": "floor(1/sqrt(2B)) per entry, B its error bound"
            + (f", at most {int(height)}" if height is not None else "")}
    if failed:
        info.update({"status": "not snapped", "exact": False,
                     "reason": f"no rational of bounded height within the error bound for "
                               f"{len(failed)} entries (e.g. {failed[0]})"})
        return info
    snapped = [Head(W, v) for W, v in snapped]
    worst = LO.zero
    ok = True
    for i, (tokens, y) in enumerate(observations):
        f, _, size = evaluate_with_bounds(snapped, tokens, K)
        tol = outcome.etas[start + i] + 2 * rounding(K, max(size, LO.convert(abs(y))))
        ratio = LO.convert(abs(f - y)) / tol
        worst = max(worst, ratio)
        ok = ok and ratio <= 1
    info.update({
        "status": "certified" if ok else "failed",
        "exact": False,
        "certificate": "the snapped exact model reproduces every observation within the noise "
                       "eta + rounding (no parameter uncertainty allowed)",
        "max_residual_over_tolerance": LO.nstr(worst, 3),
        "heads": [h.to_json(format_rational) for h in sorted(snapped)],
    })
    return info
