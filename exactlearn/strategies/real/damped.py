"""Levenberg--Marquardt on normal equations: the one damped least-squares iteration of the
stable plan's far starts (docs "The real field", "The stable plan for float black boxes",
steps 3b and 5).

``normal(theta)`` returns ``(A, b, cost)`` at ``theta``: ``A = J^T Sigma^-1 J``,
``b = J^T Sigma^-1 r`` with ``r`` the data minus the model, and the weighted cost ``r^T
Sigma^-1 r``, so the Gauss--Newton step is ``A^-1 b``.  :func:`levenberg` takes the damped
steps ``(A + lam diag A)^-1 b``, accepting one only when the cost decreases.

>>> normal = lambda th: (np.eye(1), 3.0 - th, float((3.0 - th[0]) ** 2))
>>> theta, how = levenberg(normal, np.zeros(1), 50)   # cost 0 reached: nothing decreases it
>>> round(float(theta[0]), 6), how
(3.0, 'stationary')
>>> levenberg(normal, np.array([3.0]), 50)[1]          # no step accepted at all
'stuck'
"""

from __future__ import annotations

import numpy as np

LAM_MAX = 1e12            # beyond this no damped step decreased the cost: stationary


def levenberg(normal, theta, steps, *, lam=1e-3, settle=1e-9):
    """``(theta, how)``: ``how`` is ``"settled"`` (the last accepted step decreased the cost by
    at most ``settle`` of it), ``"stationary"`` (after at least one accepted step, no damped
    step decreases the cost), ``"stuck"`` (not even one) or ``"steps"`` (``steps`` accepted
    steps and still decreasing)."""
    A, b, cost = normal(theta)
    for it in range(steps):
        damp = np.diag(np.diag(A) + 1e-300)
        while True:
            try:
                delta = np.linalg.solve(A + lam * damp, b)
            except np.linalg.LinAlgError:
                delta = None
            if delta is not None and np.all(np.isfinite(delta)):
                A1, b1, cost1 = normal(theta + delta)
                if cost1 < cost:
                    break
            lam *= 4
            if lam > LAM_MAX:
                return theta, "stationary" if it else "stuck"
        settled = cost - cost1 <= settle * cost
        theta, A, b, cost, lam = theta + delta, A1, b1, cost1, max(lam / 3, 1e-12)
        if settled:
            return theta, "settled"
    return theta, "steps"
