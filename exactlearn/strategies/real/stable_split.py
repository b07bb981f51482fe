"""The statistics of the resolution test
(:func:`~exactlearn.strategies.real.stable_checks.resolution_test`; docs/explanation/real-field.md,
"The resolution test"): how much the dimensions a split head
adds lower the residuals' sum of squares (:func:`split_gain`).
"""

from __future__ import annotations

import numpy as np

from exactlearn.strategies.real.lsq import EPS
from exactlearn.strategies.real.stable_normal import (Families, LD_EPS, MAX_DENSE,
                                                      family_values, head_arrays)


RESOLVE_DOF = 5          # observations beyond the columns' rank at least this (and the extra)
RESOLVE_RCOND = 1e-9     # columns' singular values below this of the largest add no dimension


def split_gain(heads, rec, start, etas, bias=False):
    """The resolution test's statistics (docs/explanation/real-field.md, "The resolution test")
    at ``heads``, the residuals ``y - f`` computed in ``np.longdouble``: a dict with ``extra``,
    the dimensions the columns a split head adds (below) add to the null model's -- the model's
    own gradient ``J`` and, for each family, the columns its own rounding of exponents and
    values would add (``p_h' (v_h . (a - x))``, ``p_h``, 1); ``gain``, ``rest``, ``dof`` and
    ``floor`` with each residual over its float64 rounding scale ``EPS (size + |y|)``: how
    much the sum of squares falls when those columns are fitted too, what is left, ``n`` (the
    observations) less the rank, and the mean square of the long-double rounding; ``n``; and
    ``gain_eta``, the fall with each residual over its declared ``eta_q`` instead.

    Two heads ``W +- delta Dir`` (``v_1, v_2``) against one ``W`` (``v_1 + v_2``) differ to
    second order by ``p''(z) (D . Dir)^2 (w . (a - x))`` and, where the centre is off, to first
    order by ``p'(z) (D . Dir) (w' . (a - x))`` for some vectors ``w, w'``: the columns are
    ``p_h'' D_i D_j (a - x)_k`` (``i <= j``) and ``p_h' D_i (a - x)_k`` for every head ``h``,
    those of the second kind dropped first, then the ``k`` contracted with ``v_h``, when they
    outnumber half the observations, or leave fewer than the extra dimensions (and
    ``RESOLVE_DOF``) observations beyond their rank.  None when even the last does."""
    m, d = len(heads), len(heads[0].v)
    fam = Families(rec, start, etas, bias)
    W, V, c = head_arrays(heads, bias)
    N = sum(len(y) for y in fam.y)
    dd = fam.D.shape[1]
    iu = np.triu_indices(dd)
    counts = {"full": m * dd * d + m * len(iu[0]) * d, "second": m * len(iu[0]) * d,
              "contracted": m * len(iu[0])}
    for mode in ("full", "second", "contracted"):
        if counts[mode] <= N // 2:
            got = _split_gain(fam, W, V, N, iu, mode, c)
            if got is not None:
                return got
    return None


def _split_columns(p1, p2, Dm, diff, quad, V, mode):
    """One family's columns of a split head (:func:`_split_gain`), head by head: with
    ``"full"`` the first-order ones ``p(1 - p) (D (x) diff)``, and the second-order ones
    ``p(1 - p)(1 - 2p)`` times the pairs of D (x) diff (``"full"``, ``"second"``) or times the
    pairs and ``v_h . diff`` (otherwise)."""
    n, cols = len(p1), []
    for h in range(V.shape[0]):
        if mode == "full":
            cols.append((p1[:, h:h + 1, None] * np.outer(Dm, diff).ravel()[None, None, :])
                        .reshape(n, -1))
        if mode in ("full", "second"):
            cols.append((p2[:, h:h + 1, None] * np.outer(quad, diff).ravel()[None, None, :])
                        .reshape(n, -1))
        else:
            cols.append(p2[:, h:h + 1] * quad[None, :] * float(V[h] @ diff))
    return np.concatenate(cols, axis=1)


def _residual_fit(M, s):
    """``(residual sum of squares, rank)`` of ``s`` against the column-normalised ``M``'s
    range, the rank cut at ``RESOLVE_RCOND`` of the largest singular value."""
    M = M / np.maximum(np.sqrt((M * M).sum(axis=0)), 1e-300)[None, :]
    U, sv, _ = np.linalg.svd(M, full_matrices=False)
    r = int(np.sum(sv > RESOLVE_RCOND * sv[0])) if len(sv) else 0
    U = U[:, :r]
    rr = s - U @ (U.T @ s)
    return float(rr @ rr), r


def _split_gain(fam, W, V, N, iu, mode, c=0.0):
    """:func:`split_gain` with the columns of ``mode``; None when too few observations are
    left beyond their rank."""
    m, d = V.shape
    s_all, J_all, Q_all, fl, B_all, tau_all = [], [], [], [], [], []
    for f in range(len(fam.pairs)):
        val, gz, gv, size = family_values(fam, f, W, V, c=c)
        ld = family_values(fam, f, W, V, np.longdouble, c)[0]
        eta = np.maximum(EPS * (size + np.abs(fam.y[f])), 1e-300)   # the weights (doc)
        tau_all.append(eta / fam.eta[f])      # from these weights to those of the declared eta
        s_all.append((np.asarray(fam.y[f], dtype=np.longdouble) - ld).astype(float) / eta)
        fl.append(8 * LD_EPS * (size + np.abs(fam.y[f])) / eta)
        Dm = fam.D[f]
        J = np.concatenate([gz[:, h:h + 1] * Dm[None, :] for h in range(m)]
                           + [gv.reshape(len(val), m * d)], axis=1)
        J_all.append(J / eta[:, None])
        z = W.reshape(m, -1) @ Dm
        with np.errstate(divide="ignore", over="ignore"):
            sz = np.log(fam.k[f])[:, None] - np.log(fam.m[f])[:, None] + z[None, :]
            p = np.where(fam.k[f][:, None] == 0, 0.0, 1 / (1 + np.exp(-sz)))      # n x m
        p1 = p * (1 - p)
        p2 = p1 * (1 - 2 * p)
        diff = fam.diff[f]
        quad = (Dm[:, None] * Dm[None, :])[iu]                                     # pairs
        Q_all.append(_split_columns(p1, p2, Dm, diff, quad, V, mode) / eta[:, None])
        B_all.append(np.concatenate([p1 * (V @ diff)[None, :], p, np.ones((len(val), 1))],
                                    axis=1) / eta[:, None])
    s = np.concatenate(s_all)
    nb = sum(b.shape[1] for b in B_all)
    if N * (nb + J_all[0].shape[1] + Q_all[0].shape[1]) > MAX_DENSE:
        return None
    Bf = np.zeros((N, nb))                  # each family's own columns, on its rows only
    r0 = c0 = 0
    for b in B_all:
        Bf[r0:r0 + len(b), c0:c0 + b.shape[1]] = b
        r0, c0 = r0 + len(b), c0 + b.shape[1]
    J = np.concatenate([np.concatenate(J_all), Bf], axis=1)
    Q = np.concatenate(Q_all)

    fit = _residual_fit
    JQ = np.concatenate([J, Q], axis=1)
    rss0, r0 = fit(J, s)
    rss1, r1 = fit(JQ, s)
    tau = np.concatenate(tau_all)             # the same fits with the declared eta's weights
    e0 = fit(J * tau[:, None], s * tau)[0]
    e1 = fit(JQ * tau[:, None], s * tau)[0]
    floor = float(np.mean(np.concatenate(fl) ** 2))
    if N - r1 < max(r1 - r0, RESOLVE_DOF):
        return None                         # too few observations left to estimate the noise
    return {"gain": rss0 - rss1, "extra": r1 - r0, "rest": rss1, "dof": N - r1, "n": N,
            "floor": floor, "gain_eta": e0 - e1}
