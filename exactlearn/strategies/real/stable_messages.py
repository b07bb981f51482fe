"""How coarse a box's declared eta is, in the stable plan's failures
(:mod:`~exactlearn.strategies.real.stable`, "Coarse boxes"; docs/explanation/real-field.md):
the declared eta against the outputs (:func:`declared_level`), its wording
(:func:`coarseness`) and what a coarse box's unresolved families say about its precision
(:func:`precision_failure`).
"""
from __future__ import annotations

import numpy as np

from exactlearn.errors import NoisierThanDeclared
from exactlearn.strategies.real import plural
from exactlearn.strategies.real.stable_families import NEAR_COARSE
from exactlearn.strategies.real.stable_plan import COARSE, query_norm


def declared_level(nz, rec, start) -> float:
    """The declared eta against the outputs: the median of ``eta_q / |y_q|`` over the
    observations since ``start`` (0 when there are none); above COARSE the box is coarse."""
    obs = [(t, abs(float(y))) for t, y in rec.observations[start:] if float(y) != 0]
    if not obs:
        return 0.0
    norms: dict = {}                    # eta by the query's scale (noise="auto", Noise.by_scale)
    return float(np.median([nz.of(y, 0, query_norm(t, norms) if nz.table else None) / y
                            for t, y in obs]))


def coarseness(nz, rec, start) -> str:
    """``"; the declared eta (noise=..., noise_rel=...) is L of the typical output, KIND"``
    (with eta per scale, ``noise="auto"``: "measured at each scale of the plan (at most ...)"):
    below a float32 box's rounding (L < 2^-24), about it (L < 2^-10: the float32 layers
    measured declare 1e-6 to 3e-4), or coarser than float32."""
    level = declared_level(nz, rec, start)
    kind = ("below a float32 box's rounding (2^-24 = 6e-08)" if level < 2.0 ** -24 else
            "about a float32 box's rounding" if level < 2.0 ** -10 else "coarser than float32")
    which = (f"measured at each scale of the plan (at most noise={nz.eta:.3g}, "
             f"noise_rel={nz.rel:.3g})" if nz.table else
             f"(noise={nz.eta:.3g}, noise_rel={nz.rel:.3g})")
    return f"; the declared eta {which} is {level:.2g} of the typical output, {kind}"


def precision_failure(bad, nz, rec, start, H) -> tuple:
    """What a coarse box's unresolved families say about its precision (module doc, "Coarse
    boxes"): ``(verdict, detail)``, both ``""`` for a box declared at float64 rounding -- but
    one within ``NEAR_COARSE`` below COARSE where half the unresolved families missed a
    sample: on that edge the level moves with the observations asked (a float32 box declared
    at 8e-10 fell below COARSE once no family was rescued at 1/4 or 4 any more,
    tests/test_coarse_unresolved.py; a noisy exact box of crowded heads keeps its own
    message, tests/test_real_merged_heads.py).  The
    detail: how coarse the declared eta is against the outputs, how many families missed a
    sample by more than it or did not converge, and how many fitted H heads within it but
    could not resolve them.  The verdict, which the failure leads with: when half of them
    missed, or the eta is below float32 rounding, the box's rounding exceeds the declared eta
    (declare a larger ``noise=``, or ``noise='auto'``); else the box's precision is the limit
    (evaluate the layer in float64)."""
    level = declared_level(nz, rec, start)
    miss = sum(1 for e in bad.values() if isinstance(e, NoisierThanDeclared))
    if not (level > COARSE or level > COARSE / NEAR_COARSE and 2 * miss >= len(bad)):
        return "", ""
    crowd = sum(1 for e in bad.values() if "relative first-order error bound" in str(e))
    other = len(bad) - miss - crowd
    detail = (f"{coarseness(nz, rec, start)}: of the {len(bad)} unresolved, {miss} missed a "
              f"sample by more than it, {other} did not converge, {crowd} fitted {plural(H)} "
              f"within it but left their exponents unresolved at that precision")
    if 2 * miss >= len(bad) or level < 2.0 ** -24:
        return ("the box's rounding likely exceeds the declared eta (declare a larger noise=, "
                "or use noise='auto'): ", detail)
    return (f"the box's precision cannot resolve {plural(H)} (evaluate the layer in float64; "
            f"float32 layers resolved 4 heads at d <= 16, docs/howto/float-black-box.md): ",
            detail)
