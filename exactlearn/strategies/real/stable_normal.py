"""The polish's model of every observation at once
(:mod:`~exactlearn.strategies.real.stable_polish`; docs/explanation/real-field.md, step 5): the
observations grouped by family (:class:`Families`), the model's values and derivatives per family
(:func:`family_values`), the normal equations (:func:`normal_equations`), the weakly determined
directions (:class:`Weak`; their Jacobi-scaled solve is :mod:`~exactlearn.strategies.real.stable_scaled`),
the heads as float64 arrays (:func:`head_arrays`) and the polish's constants.
"""

from __future__ import annotations

import weakref

import numpy as np

from exactlearn.strategies.real import lsq
from exactlearn.strategies.real.stable_blocks import vv_block, w_blocks
from exactlearn.strategies.real.stable_certificate import family_keys

MAX_PARAMETERS = 4400    # H (d^2 + d) (+ H d + 1 with biases) at most this: d = 32, H = 4 with
#                          biases (4,353); the normal matrix 155 MB, the polish ~2.4 GB at its peak
MAX_STEPS = 8            # Gauss--Newton steps
LAWSON_STEPS = 60        # reweightings of stable_minimax.minimax_bound
MAX_DENSE = 2 * 10 ** 7  # N P at most this for the dense Jacobian of stable_minimax.minimax_bound
LM_STEPS = 100           # Levenberg--Marquardt steps from a far start
LD_EPS = float(np.finfo(np.longdouble).eps)   # 2^-63 where long double is x87's, else EPS


class Families:
    """The observations grouped by their token pair ``(a, x)``, as float64 arrays; with
    ``bias`` ``D`` is formed with ``(x; 1)`` (module doc)."""

    def __init__(self, rec, start, etas, bias=False):
        self.bias = bool(bias)
        groups = _grouped(rec, start)
        self.pairs = list(groups)
        self.a = np.array([[float(t) for t in a] for a, _ in self.pairs])
        self.x = np.array([[float(t) for t in x] for _, x in self.pairs])
        self.diff = self.a - self.x
        xt = np.concatenate([self.x, np.ones((len(self.pairs), 1))], axis=1) if bias else self.x
        self.D = np.einsum("fr,fc->frc", self.diff, xt).reshape(len(self.pairs), -1)
        # the families that see W (a != x): a single token repeated has a zero row of D
        self.live = np.flatnonzero(np.any(self.diff != 0, axis=1))
        self.q, self.k, self.m, self.y, self.eta = [], [], [], [], []
        for key in self.pairs:
            rows = groups[key]
            idx = np.array([r[0] for r in rows])
            self.q.append(idx)
            self.k.append(np.array([r[1] for r in rows], dtype=float))
            self.m.append(np.array([r[2] for r in rows], dtype=float))
            self.y.append(np.array([r[3] for r in rows]))
            self.eta.append(np.asarray(etas)[idx])
        # the same, flat: every observation in family order, ``starts`` where each begins
        sizes = np.array([len(q) for q in self.q], dtype=np.intp)
        self.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
        self.fi = np.repeat(np.arange(len(self.pairs)), sizes)
        flat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0))
        self.k_all, self.m_all = flat(self.k), flat(self.m)
        self.y_all, self.eta_all = flat(self.y), flat(self.eta)
        with np.errstate(divide="ignore"):
            self.logkm = np.log(self.k_all) - np.log(self.m_all)
        self._outer = self._ends = None

    def ends(self):
        """``(xt, diff, groups)``: the distinct final tokens ``xt`` (``(x; 1)`` with biases) of the
        live families, their ``a - x``, and each token's live families (indices into
        :attr:`live`), formed once: ``D_f = vec((a - x) xt^T)`` is read through them."""
        if self._ends is None:
            x = self.x[self.live]
            xt = np.concatenate([x, np.ones((len(x), 1))], axis=1) if self.bias else x
            ends, back = np.unique(xt, axis=0, return_inverse=True)
            self._ends = (ends, self.diff[self.live],
                          [np.flatnonzero(back.ravel() == j) for j in range(len(ends))])
        return self._ends

    def outer(self):
        """``x x^T``, ``x a^T``, ``a x^T``, ``a a^T`` of every family, stacked (4F x d^2),
        formed once (the v-v block of :func:`normal_equations`)."""
        if self._outer is None:
            xs, as_ = self.x, self.a
            self._outer = np.concatenate([np.einsum("fi,fj->fij", u, w) for u, w in
                                          ((xs, xs), (xs, as_), (as_, xs), (as_, as_))]
                                         ).reshape(4 * len(xs), -1)
        return self._outer


_GROUPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _grouped(rec, start) -> dict:
    """The observations since ``start`` grouped by their token pair: ``{(a, x): [(q, k, m,
    y)]}``.  A recorder's observations are only ever appended, so the grouping of its first
    ``n`` is kept (per recorder, while it lives) for the polish, its hat and its tests, which
    group the same observations again."""
    n = len(rec.observations)
    try:
        memo = _GROUPED.setdefault(rec, {})
    except TypeError:                   # a recorder without weak references: not kept
        memo = {}
    got = memo.get((start, n))
    if got is None:
        got = {}
        obs = rec.observations
        for q, (a, x, k, m) in enumerate(family_keys(rec, start, n), start):
            got.setdefault((a, x), []).append((q, k, m, float(obs[q][1])))
        memo.clear()                    # the latest grouping only
        memo[(start, n)] = got
    return got


def family_values(fam, f, W, V, dt=np.float64, c=0.0):
    """Per query of family ``f``: the model's value, ``df/dz`` (n x H), ``df/dv`` (n x H x d)
    and the size of its terms (for the rounding of the residual); computed in the float type
    ``dt`` (``np.longdouble``: the residuals of
    :func:`~exactlearn.strategies.real.stable_split.split_gain`).  ``W`` is ``[W | u]`` (H x d x
    (d + 1)) and ``c`` the constant for a biased family set (module doc)."""
    W, V = np.asarray(W, dtype=dt), np.asarray(V, dtype=dt)
    z = W.reshape(len(W), -1) @ np.asarray(fam.D[f], dtype=dt)    # H
    ua, ux = V @ np.asarray(fam.a[f], dtype=dt), V @ np.asarray(fam.x[f], dtype=dt)
    k, m = np.asarray(fam.k[f], dtype=dt), np.asarray(fam.m[f], dtype=dt)
    with np.errstate(divide="ignore", over="ignore"):
        s = np.log(k)[:, None] - np.log(m)[:, None] + z[None, :]     # n x H
        p = np.where(k[:, None] == 0, 0.0, 1 / (1 + np.exp(-s)))
    du = ua - ux
    val = (ux[None, :] + p * du[None, :]).sum(axis=1)
    gz = p * (1 - p) * du[None, :]
    gv = (1 - p)[:, :, None] * fam.x[f][None, None, :] + p[:, :, None] * fam.a[f][None, None, :]
    size = (np.abs(ux)[None, :] + p * np.abs(du)[None, :]).sum(axis=1)
    if fam.bias:
        val = val + dt(c)
        size = size + abs(float(c))
    return val, gz, gv, size


def v_jacobian(fam, gv, n):
    """The v block of the Jacobian (n x H d), and with biases the constant's column of ones."""
    Jv = gv.reshape(n, -1)
    return np.concatenate([Jv, np.ones((n, 1))], axis=1) if fam.bias else Jv


def normal_equations(fam, W, V, c=0.0, out=None):
    """``A``, ``b`` (module doc), the per-family reduced Jacobians and weights, and ``(cost,
    beyond)``: the weighted cost, and the same with each residual reduced by its rounding ``8 EPS
    (size_q + |y_q|)`` (0: float64's floor).  Every observation at once (:func:`family_values`'
    values), summed per family by ``np.add.reduceat``; a query's v block is ``(1 - p_h) x + p_h
    a`` per head: per-family sums of ``w p_h p_g``-type weights times ``x x^T, x a^T, a a^T``.
    ``out``: an array of A's shape and type (a normal matrix no longer read) that becomes A."""
    H, d = V.shape
    dd = fam.D.shape[1]
    nv = H * d + fam.bias
    P = H * dd + nv
    F = len(fam.pairs)
    fi = fam.fi
    Z = fam.D @ W.reshape(H, -1).T                   # F x H: z_h of each family
    UA, UX = fam.a @ V.T, fam.x @ V.T
    with np.errstate(divide="ignore", over="ignore"):
        s = fam.logkm[:, None] + Z[fi]                # N x H
        p = np.where(fam.k_all[:, None] == 0, 0.0, 1 / (1 + np.exp(-s)))
    du, ux = (UA - UX)[fi], UX[fi]
    val = (ux + p * du).sum(axis=1)
    gz = p * (1 - p) * du
    size = (np.abs(ux) + p * np.abs(du)).sum(axis=1)
    if fam.bias:
        val = val + c
        size = size + abs(float(c))
    q = 1 - p
    w = 1 / fam.eta_all ** 2
    r = fam.y_all - val
    cost = float(w @ r ** 2)
    beyond = float(w @ np.maximum(np.abs(r) - 8 * lsq.EPS * (size + np.abs(fam.y_all)), 0.0) ** 2)

    def per_family(X):
        return np.add.reduceat(X, fam.starts, axis=0)

    wg, wq, wp, wr = w[:, None] * gz, w[:, None] * q, w[:, None] * p, w * r
    Nzz = per_family(wg[:, :, None] * gz[:, None, :])                    # F x H x H
    Sx = per_family(wg[:, :, None] * q[:, None, :])                      # sum w gz_h (1 - p_g)
    Sa = per_family(wg[:, :, None] * p[:, None, :])                      # sum w gz_h p_g
    xs, as_ = fam.x, fam.a
    Nzv = np.zeros((F, H, nv))
    Nzv[:, :, :H * d] = (np.einsum("fhg,fi->fhgi", Sx, xs)
                         + np.einsum("fhg,fi->fhgi", Sa, as_)).reshape(F, H, H * d)
    bz = per_family(wr[:, None] * gz)                                     # F x H
    Rx, Ra = per_family(wr[:, None] * q), per_family(wr[:, None] * p)     # F x H
    bv = np.zeros(nv)
    bv[:H * d] = (np.einsum("fh,fi->hi", Rx, xs) + np.einsum("fh,fi->hi", Ra, as_)).reshape(-1)
    A = _zeroed(out, P)
    A[H * dd:H * dd + H * d, H * dd:H * dd + H * d] = vv_block(fam, per_family, wq, wp, q, p)
    if fam.bias:                                     # the constant's column of ones
        Nzv[:, :, -1] = per_family(wg)
        col = (np.einsum("fh,fi->hi", per_family(wq), xs)
               + np.einsum("fh,fi->hi", per_family(wp), as_)).reshape(-1)
        A[H * dd:-1, -1] = col
        A[-1, H * dd:-1] = col
        A[-1, -1] = float(w.sum())
        bv[-1] = float(wr.sum())
    Dm = fam.D
    w_blocks(A, fam, Nzz[fam.live], Nzv[fam.live])
    b = np.concatenate([Dm.T @ bz[:, h] for h in range(H)] + [bv])
    gv = q[:, :, None] * xs[fi][:, None, :] + p[:, :, None] * as_[fi][:, None, :]
    Jv = gv.reshape(len(r), H * d)
    if fam.bias:
        Jv = np.concatenate([Jv, np.ones((len(r), 1))], axis=1)
    ends = list(fam.starts[1:]) + [len(r)]
    parts = [(gz[i:j], Jv[i:j], w[i:j], size[i:j], r[i:j]) for i, j in zip(fam.starts, ends)]
    return A, b, parts, (cost, beyond)


def _zeroed(out, P):
    """A ``P x P`` float64 array of zeros: ``out`` filled when it is one (a normal matrix no
    longer read: filling mapped pages costs less than faulting fresh ones in), else new."""
    if out is not None and out.shape == (P, P) and out.dtype == np.float64:
        out.fill(0.0)
        return out
    return np.zeros((P, P))


class Weak:
    """Directions of the parameters the observations determine weakly (the Jacobi-scaled
    normal matrix's eigenvalues below its largest over ``WEAK_COND``): ``directions``,
    ``(head, W direction as a d x d array)`` each.
    :func:`~exactlearn.strategies.real.stable_polish.polish` returns one alone when some
    eigenvalue is below the largest over ``COND_LIMIT`` (float64 cannot solve), and as the last
    item of its result otherwise; the plan can ask families that see those directions and polish
    again."""

    def __init__(self, directions):
        self.directions = directions


def head_arrays(heads, bias):
    """``(W, V, c)`` as float64 arrays: W is ``[W | u]`` with biases (module doc)."""
    if bias:
        W = np.array([[[float(a) for a in row] + [float(b)] for row, b in zip(h.W, h.u)]
                      for h in heads])
    else:
        W = np.array([[[float(a) for a in row] for row in h.W] for h in heads])
    V = np.array([[float(a) for a in h.v] for h in heads])
    return W, V, float(getattr(heads, "constant", 0)) if bias else 0.0
