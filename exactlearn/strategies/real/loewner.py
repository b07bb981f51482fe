"""The Loewner start of a ratio family's fit (:mod:`~exactlearn.strategies.real.ratio`; docs
"The real field", "The stable plan for float black boxes"): the first values of ``log rho``
from which its Levenberg--Marquardt fit starts.

>>> import numpy as np
>>> zs = np.array([0.0, 0.25, 1.0, 4.0, 16.0, np.inf])
>>> ys = 3 + 2 / (1 + zs * 1.5)
>>> round(float(np.exp(loewner_start(zs, ys, np.ones(6), 1)[0])), 6)
1.5
"""

from __future__ import annotations

import numpy as np


def loewner_start(zs, ys, w, m, shift=0):
    """log rho from a Loewner least-squares fit in z = t/(1+t) (AAA with m+1 supports); None
    when it does not give m positive rho.  ``zs``: the nodes t (np.inf for t = oo), ``ys``
    the samples, ``w`` their weights, ``shift`` moves the inner supports."""
    z = np.where(np.isfinite(zs), zs / (1 + np.where(np.isfinite(zs), zs, 0)), 1.0)
    n = len(z)
    sup = sorted({min(n - 1, int(round(j * (n - 1) / m)) + (shift if 0 < j < m else 0))
                  for j in range(m + 1)})
    test = np.array([i for i in range(n) if i not in sup], dtype=np.intp)
    js = np.array(sup, dtype=np.intp)
    L = (ys[test][:, None] - ys[js][None, :]) / (z[test][:, None] - z[js][None, :])
    L = L * w[test][:, None]
    _, _, Vt = np.linalg.svd(L)
    wts = Vt[-1]
    poly = np.zeros(len(sup))
    for jj, j in enumerate(sup):
        poly += wts[jj] * poly_of_zeros([z[i] for i in sup if i != j])
    roots = np.roots(poly)
    roots = roots[np.abs(roots.imag) <= 1e-6 * np.maximum(1, np.abs(roots))].real
    rho = 1 - 1 / roots[np.abs(roots) > 0]
    rho = rho[rho > 0]
    if len(rho) != m:
        return None
    return np.sort(np.log(rho))


def poly_of_zeros(zeros):
    """``np.poly(zeros)`` of float64 zeros, by the same convolutions without its checks (a
    fifth of :func:`loewner_start`'s time), bit for bit: the polynomial with those zeros,
    highest power first; ``np.polyadd`` of such polynomials of one length is their sum, as
    ``poly +=`` above."""
    a = np.ones(1)
    for zero in zeros:
        a = np.convolve(a, np.array([1, -zero], dtype=float))
    return a
