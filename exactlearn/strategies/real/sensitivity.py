"""Bounds and the noise check over the real field (docs: explanation/real-field.md; the
paper's approximate-oracle conditions, arXiv:2608.03294).

Every observation ``y_q`` differs from the true ``f(q)`` by at most ``eta_q = eta + u_q``, the
declared noise plus its rounding ``u_q = 2^-prec * 512 * Y`` (:func:`rounding`, ``Y`` the size
of its terms); a derived quantity is bounded to first order by ``sum_q |S_z[q]| eta_q``.  A
quantity the observations fix more than once is checked against its first-order bound
(:func:`check_noise`; a fit's residuals: :func:`check_residuals`;
docs: explanation/algorithm.md#what-a-failure-means).  Bounds are computed in :data:`LO`, a fixed
20-digit mpmath context used read-only, so that they stay comparable across a run.

>>> from exactlearn.fields.real import Real
>>> LO.nstr(rounding(Real(dps=30), 1), 3)
'5.05e-29'
"""

from __future__ import annotations

import numpy as np

from exactlearn.algebra.contexts import context
from exactlearn.errors import NoisierThanDeclared, ResidualsBeyondNoise

#: The bounds' context: 20 digits, read-only (module doc).
LO = context(dps=20)

#: A residual beyond NOISE_FACTOR first-order bounds from eta: noisier than declared.
NOISE_FACTOR = 10


def rounding(K, Y):
    """Rounding allowance of one oracle output whose terms have size Y."""
    return LO.ldexp(64 * 8, -K.prec) * LO.convert(Y)


def check_noise(residual, bound, slack, what, heads=None):
    """Raise :class:`NoisierThanDeclared` when ``|residual| > NOISE_FACTOR * bound + slack``
    (with ``heads``, the number of heads fitted: :class:`ResidualsBeyondNoise`, so that the
    learner may fit more).

    ``residual`` is a quantity the observations determine more than once (zero for exact
    outputs of a multi-head attention), ``bound`` its first-order worst case when every
    output is within its ``eta_q`` of the truth, ``slack`` the rounding of computing it."""
    r = LO.convert(abs(residual))
    allow = NOISE_FACTOR * bound + slack
    if r > allow:
        times = f"{LO.nstr(r / bound, 3)} times" if bound else "above"
        more = "" if heads is None else f", or more heads than {heads}"
        text = (f"outputs noisier than the declared eta (or not those of a multi-head "
                f"attention{more}): {what} by {LO.nstr(r, 3)}, {times} its first-order bound "
                f"{LO.nstr(bound, 3)} from eta (outputs within eta of the model class stay "
                f"within {NOISE_FACTOR})")
        raise NoisierThanDeclared(text) if heads is None else ResidualsBeyondNoise(text, heads)


def check_residuals(K, res, rbound, ys, cs, what) -> float:
    """Every residual ``res`` of a family's fit (its samples ``ys``, its ``c_h`` ``cs``) against
    its first-order bound ``rbound`` plus the rounding of terms of size ``64 (|y| + sum |c|)``
    (:func:`check_noise`); the largest ratio ``|residual| / bound``.  A residual clearly inside
    its allowance in float64 passes as it would in :data:`LO`; the others are checked there,
    in order."""
    r = np.abs(np.asarray(res, dtype=float))
    Y = 64 * (np.abs(np.asarray(ys, dtype=float)) + sum(abs(float(c)) for c in cs))
    allow = NOISE_FACTOR * rbound + np.ldexp(64 * 8 * Y, -K.prec)   # rounding(K, Y) in float64
    for q in np.flatnonzero(~(r <= allow * (1 - 1e-9))):
        check_noise(float(r[q]), LO.convert(float(rbound[q])),
                    LO.convert(float(rounding(K, float(Y[q])))), f"{what} misses its sample {q}")
    return float(np.max(r / np.maximum(rbound, 1e-300)))
