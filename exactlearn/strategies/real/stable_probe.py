"""The stable plan's scale probe (docs "The real field", "The stable plan for float black
boxes", step 2).

The basis families ``(x_i, e_i)`` of the unit (dyadic, near-orthogonal) plan --
:func:`probe_families` of them -- are asked as ratio families
(:mod:`~exactlearn.strategies.real.ratio`) at scale 1, then 4, 1/4, 16, 1/16 until at least
one fits; a family that does not fit is passed over, and so is an exponent whose first-order
bound exceeds ``max(1, |log rho|)`` (:func:`measured`).  ``log rho`` scales with ``sigma^2``,
so :func:`sigma_for` picks the ``sigma`` (a power of two or 3/2 of one: the tokens stay
dyadic) that brings their rms to about ``STABLE_TARGET = 3`` (the paper plan's: PAPER_TARGET = 1).
The paper plan's probe (``paper=True``) asks its own nodes and fits them in the field's
precision (:func:`~exactlearn.strategies.real.fit.fit_paper_family`).  With a head bound
(``max_heads``) the first probe family also fixes the number of heads (:func:`count_heads`).
Every probe query is counted (``probe_queries``) and certified with the rest.

>>> sigma_for(0.75), sigma_for(12.0), sigma_for(1e300), sigma_for(float("inf"))
(mpq(2,1), mpq(1,2), mpq(1,256), mpq(1,1))
"""

from __future__ import annotations

import math

import numpy as np
from gmpy2 import mpq

from exactlearn.errors import (DegenerateDraw, FieldError, InterpolationError, LearningFailure,
                               NoisierThanDeclared, clip)
from exactlearn.strategies.real.ratio import family_tokens, fit_ratio_family, node_t
from exactlearn.strategies.real.stable_plan import COARSE, PAPER_TARGET, PROBE_SAMPLES, token_norm

#: rms log rho the scale aims at (the paper plan's:
#: :data:`~exactlearn.strategies.real.stable_plan.PAPER_TARGET`, 1)
STABLE_TARGET = 3.0
PROBE_SCALES = (mpq(1), mpq(4), mpq(1, 4), mpq(16), mpq(1, 16))
MAX_PROBE_LOG = 40.0     # |log rho| beyond this is e^40 past the nodes: not a measurement


def sigma_for(rms: float, target: float = STABLE_TARGET) -> mpq:
    """The scale with ``sigma^2 rms`` closest to ``target`` among ``2^k`` and
    ``3 * 2^(k-1)``."""
    want = math.sqrt(target / rms) if 0 < rms < math.inf else 1.0
    want = min(max(want, 2.0 ** -8), 2.0 ** 8)          # the candidates' range
    cands = [mpq(2) ** k for k in range(-8, 9)] + [mpq(3, 2) * mpq(2) ** k for k in range(-8, 8)]
    return min(cands, key=lambda s: abs(math.log(float(s) / want)))


def ask_family(c, f, asker, noise, nodes, H, asked=None) -> tuple:
    """Configuration ``c`` asked with its tokens scaled by ``f`` at every node:
    ``(values, their error bounds eta_q, observation indices)``; ``asker`` asks each query
    once, ``noise`` gives ``eta_q`` (the stable plan's).  ``asked``: what ``asker.ask``
    answered for these queries already (``(value, observation index)`` per node, in order:
    the plan's first batch, :func:`~exactlearn.strategies.real.stable_families.fit_all`),
    taken as it is instead of forming and looking up the queries again."""
    x = tuple(f * a for a in c.x)
    a = tuple(f * b for b in c.a)
    part = asked if asked is not None else asker.ask([family_tokens(x, a, k, mm)
                                                      for k, mm in nodes])
    ys = [y for y, _ in part]
    size = H * max(abs(float(y)) for y in ys)
    norm = max(token_norm(x), token_norm(a))      # eta by the tokens' scale (noise="auto")
    return ys, [noise.of(y, size, norm) for y in ys], np.array([q for _, q in part])


def probe_families(d: int, H: int, paper: bool = False) -> int:
    """How many basis families the probe asks at each scale: enough to see ``PROBE_SAMPLES``
    exponents, ``ceil(6 / H)``, at most d, and at least 3 but on the paper plan's nodes.

    >>> probe_families(8, 4), probe_families(8, 4, paper=True), probe_families(2, 1)
    (3, 2, 2)
    """
    return min(d, max(1 if paper else 3, -(-PROBE_SAMPLES // H)))


def probe_scale(plan0, K, asker, noise, nodes, H, m_fixed, paper=False):
    """``(sigma, m, probe detail)`` from the probe families at the scales tried, towards the
    plan's rms ``log rho`` (``paper``: the paper plan's PAPER_TARGET, its family count and
    its fit)."""
    tries = []
    target = PAPER_TARGET if paper else STABLE_TARGET
    fams = [plan0.configs[plan0.index("basis", i, i)]
            for i in range(probe_families(plan0.d, H, paper))]
    ts = [node_t(k, mm) for k, mm in nodes]
    first = None                       # the first family's samples at the first scale
    for s0 in PROBE_SCALES:
        logs, m, failed = [], m_fixed, []
        for c in fams:                 # a family that cannot be resolved is passed over
            ys, etas, _ = ask_family(c, s0, asker, noise, nodes, H)
            first = first or (ys, etas)
            try:
                if m is None:
                    m = count_heads(K, ts, ys, etas, H, paper)
                fit = fit_ratio_family(K, ts, ys, etas, m, what="a probe family", paper=paper)
            except (FieldError, LearningFailure, ArithmeticError, ValueError,
                    np.linalg.LinAlgError) as exc:
                failed.append(exc)
                continue
            got = [float(x) for x in fit.logs]
            if not all(math.isfinite(x) and abs(x) <= MAX_PROBE_LOG for x in got):
                failed.append(InterpolationError(f"a probe family's exponents {got} lie far "
                                                 f"beyond its nodes"))
                continue
            got = measured(got, fit.bounds[1:m + 1])
            if not got:
                failed.append(InterpolationError("a probe family's samples determine none of "
                                                 "its exponents"))
                continue
            logs += got
        if not logs:
            if all(isinstance(e, NoisierThanDeclared) for e in failed) and s0 == PROBE_SCALES[-1]:
                raise failed[0]
            tries.append({"scale": str(s0), "failed": clip(failed[0], 120)})
            continue
        rms = math.sqrt(sum(x * x for x in logs) / len(logs)) / float(s0) ** 2
        tries.append({"scale": str(s0), "families": len(fams) - len(failed), "poles": len(logs),
                      "rms_exponent": f"{rms * float(s0) ** 2:.4g}"})
        return sigma_for(rms, target), m, tries
    raise DegenerateDraw(f"the scale probe failed at every scale tried "
                         f"({', '.join(t['scale'] for t in tries)}): its families never fit "
                         f"{H if m_fixed else 'at most ' + str(H)} heads within the declared "
                         f"noise{_fewer(K, ts, first, m_fixed, paper)}; first failure: "
                         f"{tries[0]['failed']}")


def _fewer(K, ts, first, m_fixed, paper) -> str:
    """With ``heads=H`` exact: whether the first probe family's samples fit fewer heads within
    the declared noise (no query asked), said in the message -- a layer with a pruned, zero or
    tied head has fewer canonical heads (review, helper-71: 10,149 queries and a message that
    named it only in a final note).  Not at a coarse eta (COARSE: a float32 box), where one
    head fits six heads' samples within float32's rounding."""
    if not m_fixed or m_fixed < 2 or first is None:
        return ""
    ys, etas = first
    if float(np.median(etas)) > COARSE * max(abs(float(y)) for y in ys):
        return ""                       # a coarse (float32) eta: fewer heads fit whatever it holds
    try:
        m = count_heads(K, ts, *first, m_fixed - 1, paper)
    except (FieldError, LearningFailure, ArithmeticError, ValueError, np.linalg.LinAlgError):
        return ""
    return (f", but a family's samples fit {m} head{'s' * (m > 1)} within it: the box may have "
            f"fewer canonical heads than heads={m_fixed} (a pruned, zero or tied head); "
            f"max_heads={m_fixed} learns up to that many")


def measured(logs, bounds) -> list:
    """The exponents ``log rho`` whose first-order bound is within ``max(1, |log rho|)`` (rho
    known to a factor e, or to its own order): a head the family's samples do not determine
    (a float32 box's fit of more heads than its samples resolve) is no measurement of the scale.

    >>> measured([-0.7, -6.3, 0.1, 2.0], [26.0, 7e3, 0.2, 1.5])
    [0.1, 2.0]
    """
    return [x for x, b in zip(logs, bounds) if float(b) <= max(1.0, abs(x))]


def count_heads(K, ts, ys, etas, H, paper=False):
    """The fewest heads m <= H whose least-squares fit keeps every residual within its bound."""
    for m in range(1, H + 1):
        try:
            fit_ratio_family(K, ts, ys, etas, m, paper=paper)
            return m
        except (NoisierThanDeclared, InterpolationError, ValueError, np.linalg.LinAlgError):
            if m == H:
                raise
    return H
