"""The blocks of the polish's normal matrix
(:func:`~exactlearn.strategies.real.stable_normal.normal_equations`; docs/explanation/real-field.md,
step 5): the v-v block from the families' outer products, and the W-W and W-v blocks read
through each family's ``D_f = (a - x) (x) xt``, summed per distinct final token ``xt``; and two
block-wise passes over an n x n matrix that form no temporary of its size (:func:`inf_norm`,
:func:`mirror_lower`): a fresh array of the normal matrix's size costs its page faults, about
0.06 s at n = 1,632 on the 2-core sandbox the benchmarks run on, twice a Cholesky factor.
"""

from __future__ import annotations

import numpy as np


def vv_block(fam, per_family, wq, wp, q, p):
    """The v-v block of :func:`~exactlearn.strategies.real.stable_normal.normal_equations`: per
    family ``sum w (1 - p_h)(1 - p_g) x x^T``, ``(1 - p_h) p_g x a^T`` (and its transpose) and
    ``p_h p_g a a^T``, per head pair: one product of the four weights' stack with the families'
    outer products (:meth:`~exactlearn.strategies.real.stable_normal.Families.outer`)."""
    H, d = q.shape[1], fam.x.shape[1]
    F = len(fam.pairs)
    Txx = per_family(wq[:, :, None] * q[:, None, :])
    Txa = per_family(wq[:, :, None] * p[:, None, :])                     # [f, h, g]: (1-p_h) p_g
    Taa = per_family(wp[:, :, None] * p[:, None, :])
    L = np.concatenate([Txx, Txa, Txa.transpose(0, 2, 1), Taa]).reshape(4 * F, H * H)
    return (L.T @ fam.outer()).reshape(H, H, d, d).transpose(0, 2, 1, 3).reshape(H * d, H * d)


def w_blocks(A, fam, Nzz, Nzv):
    """The W-W blocks ``D^T diag(Nzz[:, h, g]) D`` and the W-v blocks ``D^T Nzv[:, h]`` of
    :func:`~exactlearn.strategies.real.stable_normal.normal_equations` over the live families,
    written into ``A`` (both triangles).  With ``D_f = (a - x) (x) xt``
    (:meth:`~exactlearn.strategies.real.stable_normal.Families.ends`) a W-W block is the sum
    over the X distinct final tokens of ``(sum_f n_f (a - x)(a - x)^T) (x) xt xt^T``: one
    product of ``d^2 x X`` by ``X x dc^2`` (the sum over families was ``F dd^2`` work).  On the
    float64 grid's 16 x 4 seed 5 run, 0.136 -> 0.056 s; the same matrix within 4e-17 of its
    largest entry."""
    H, nv = Nzz.shape[1], Nzv.shape[2]
    ends, diff, groups = fam.ends()
    if not groups:                      # no family sees W: its blocks stay 0
        return
    d, dc = diff.shape[1], ends.shape[1]
    dd = d * dc
    dd2 = np.einsum("fr,fs->frs", diff, diff).reshape(len(diff), -1)             # F x d^2
    M = np.stack([Nzz[g].reshape(len(g), -1).T @ dd2[g] for g in groups]).reshape(
        len(ends), H, H, d * d)                                         # X x H x H x d^2
    Gv = np.stack([(diff[g].T @ Nzv[g].reshape(len(g), -1)).reshape(d, H, nv)
                   for g in groups]).transpose(0, 2, 1, 3)                          # X x H x d x nv
    P = np.einsum("xc,xe->xce", ends, ends).reshape(len(ends), -1)                  # X x dc^2
    for h in range(H):
        rows = slice(h * dd, (h + 1) * dd)
        for g in range(h, H):
            blk = (M[:, h, g].reshape(len(ends), -1).T @ P).reshape(d, d, dc, dc)
            blk = blk.transpose(0, 2, 1, 3).reshape(dd, dd)
            A[rows, g * dd:(g + 1) * dd] = blk
            A[g * dd:(g + 1) * dd, rows] = blk.T
        cross = np.einsum("xrk,xc->rck", Gv[:, h], ends).reshape(dd, nv)
        A[rows, H * dd:] = cross
        A[H * dd:, rows] = cross.T


#: rows per block of :func:`inf_norm` and columns per block of :func:`mirror_lower`
BLOCK = 128


def inf_norm(As) -> float:
    """``np.abs(As).sum(axis=1).max()`` (the same row sums), a block of rows at a time.

    >>> inf_norm(np.array([[1.0, -2.0], [0.5, 0.25]]))
    3.0
    """
    return max(float(np.abs(As[i:i + BLOCK]).sum(axis=1).max()) for i in range(0, len(As), BLOCK))


def mirror_lower(low):
    """``low``'s lower triangle copied onto its strict upper one, in place, a block of
    columns at a time (``np.tril(low) + np.tril(low, -1).T`` without its temporaries).

    >>> mirror_lower(np.array([[1.0, 9.0], [2.0, 3.0]])).tolist()
    [[1.0, 2.0], [2.0, 3.0]]
    """
    n = len(low)
    for j in range(0, n, BLOCK):
        e = min(j + BLOCK, n)
        blk = low[j:e, j:e]
        blk[np.triu_indices(e - j, 1)] = blk.T[np.triu_indices(e - j, 1)]
        low[j:e, e:] = low[e:, j:e].T
    return low
