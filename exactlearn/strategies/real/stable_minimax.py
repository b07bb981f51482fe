"""The smallest largest residual over its eta about the polish's fit
(:mod:`~exactlearn.strategies.real.stable_polish`; docs/explanation/real-field.md): a lower
bound from Lawson's reweighting (:func:`chebyshev_bound`) linearised about the least-squares
heads (:func:`minimax_bound`), so that a box noisier than declared fails.
"""

from __future__ import annotations

import numpy as np

from exactlearn.strategies.real.lsq import EPS
from exactlearn.strategies.real.stable_normal import (Families, LAWSON_STEPS, MAX_DENSE,
                                                      family_values, head_arrays, v_jacobian)


def minimax_bound(polished, rec, start, etas, limit=None):
    """A lower bound, to first order about the fit, on ``min max_q |y_q - f(q)| / eta_q`` over
    every model with as many heads as ``polished`` (a
    :class:`~exactlearn.strategies.real.stable_polish.Polished` with heads): above 1, no such model keeps
    every output within its eta (docs/explanation/real-field.md, "The residual test").  The fit's
    own largest ratio when that is at most 1 (no bound needed), None when the dense Jacobian would
    exceed ``MAX_DENSE``.

    With scaled residuals ``s = r / eta`` and Jacobian ``Js = J / eta``, every ``u`` with
    ``Js^T u = 0`` and ``|u|_1 = 1`` gives ``max_q |s_q - (Js d)_q| >= u.s`` for every step d
    (weak duality of the Chebyshev fit).  The residual ``rr`` of a least-squares fit with
    weights ``c`` gives ``u = c rr / |c rr|_1``, ``u.s = sum c rr^2 / sum c |rr|``; Lawson's
    reweighting ``c <- c |rr|`` drives it up to the Chebyshev value (``LAWSON_STEPS``).  The
    float64 rounding of the residuals is taken off; the linearisation and float64 solves are
    what the caller's margin covers.  ``limit``: the caller asks only whether the bound exceeds
    it (:func:`chebyshev_bound`)."""
    heads, bias = polished.heads, polished.bias
    W, V, c = head_arrays(heads, bias)
    H, d = V.shape
    fam = Families(rec, start, etas, bias)
    vals = [family_values(fam, f, W, V, c=c) for f in range(len(fam.pairs))]
    eta = np.concatenate(fam.eta)
    s = np.concatenate([fam.y[f] - v[0] for f, v in enumerate(vals)]) / eta
    err = float(np.max(np.concatenate([8 * EPS * (v[3] + np.abs(fam.y[f]))
                                       for f, v in enumerate(vals)]) / eta))
    if np.max(np.abs(s)) <= 1:
        return float(np.max(np.abs(s)))
    if len(s) * H * (fam.D.shape[1] + d) > MAX_DENSE:
        return None
    cols = [np.concatenate([np.concatenate([gz[:, h:h + 1] * fam.D[f][None, :] for h in range(H)],
                                           axis=1), v_jacobian(fam, gv, len(val))], axis=1)
            for f, (val, gz, gv, _) in enumerate(vals)]
    return chebyshev_bound(np.concatenate(cols) / eta[:, None], s, err, limit)


def chebyshev_bound(Js, s, err=0.0, limit=None) -> float:
    """Lawson's lower bound (:func:`minimax_bound`) on ``min_d max_q |s_q - (Js d)_q|``, less
    ``err`` (the rounding of ``s``).  With ``limit``, the reweighting stops once a step's
    largest residual, less ``err``, is at most ``limit``: that residual bounds the minimum from
    above, so no later step's bound could exceed ``limit`` (the bound so far is returned; a run
    of 12,305 observations and 936 unknowns took one least-squares solve there instead of 60).

    >>> import numpy as np
    >>> Js, s = np.array([[1.0], [1.0]]), np.array([1.0, -1.0])    # min_d max |s - d| = 1
    >>> round(chebyshev_bound(Js, s), 12), chebyshev_bound(Js, s, limit=1.5) <= 1.5
    (1.0, True)
    """
    c = np.full(len(s), 1.0 / len(s))
    best = 0.0
    for _ in range(LAWSON_STEPS):
        sq = np.sqrt(c)
        step = np.linalg.lstsq(Js * sq[:, None], s * sq, rcond=None)[0]
        rr = s - Js @ step
        a = np.abs(rr)
        if not a.sum() > 0:
            break
        if limit is not None and a.max() - err <= limit:
            return max(best, float(c @ (rr * rr)) / float(c @ a) - err)
        best = max(best, float(c @ (rr * rr)) / float(c @ a) - err)
        if best > 2:
            break
        c = c * a
        c = c / c.sum()
    return best
