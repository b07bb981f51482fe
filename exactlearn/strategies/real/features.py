"""The features of vector outputs over the real field, in float64 with stated rounding bounds
(docs: explanation/biases.md#vector-outputs).

Attention depends on a query only through its distinct tokens, their copies and its final
token: :class:`QueryArrays` holds the recorded queries so, grouped by their number of distinct
tokens, and computes every query's softmax averages ``a_h = sum_t p_t x_t`` of given heads
(W_h, u_h) with a bound on their rounding error (:meth:`QueryGroup.features`), the
covariances the readouts' W sensitivity needs, and what the remainder of that first-order
sensitivity needs (:meth:`QueryArrays.second_order`), for
:mod:`exactlearn.strategies.real.outputs`.
"""

from __future__ import annotations

import numpy as np

from exactlearn.errors import DegenerateDraw
from exactlearn.oracle.adapt import token_runs
from exactlearn.strategies.real.lsq import EPS


class QueryArrays:
    """The recorded queries as float64 arrays, grouped by their number T of distinct tokens:
    per group the query indices, the distinct tokens ``X`` (n, T, d), their multiplicities
    ``M`` (n, T) and the final token ``xn`` (n, d); and the answers ``Y`` (N, m).  Attention
    depends on a query only through these (the scores ``x^T (W x_n + u)`` of its distinct
    tokens, weighted by their copies)."""

    def __init__(self, records, d: int, m: int):
        self.N, self.d = len(records), d
        self.Y = np.array([[float(y) for y in ys] for _, ys in records]).reshape(self.N, m)
        floats: dict = {}

        def conv(t):
            got = floats.get(t)
            if got is None:
                try:
                    got = floats[t] = [float(a) for a in t]
                except OverflowError:
                    raise DegenerateDraw("a token is beyond float64's range: the outputs' "
                                         "features cannot be computed") from None
            return got
        by_T: dict = {}
        for q, (tokens, _) in enumerate(records):
            mult: dict = {}
            for t, k in token_runs(tokens):
                key = tuple(t)
                mult[key] = mult.get(key, 0) + k
            by_T.setdefault(len(mult), []).append((q, mult, tuple(tokens[-1])))
        self.groups = []
        for T, rows in sorted(by_T.items()):
            idx = np.array([q for q, _, _ in rows], dtype=np.intp)
            X = np.array([[conv(t) for t in mult] for _, mult, _ in rows]).reshape(len(rows), T, d)
            M = np.array([list(mult.values()) for _, mult, _ in rows], dtype=float)
            xn = np.array([conv(f) for _, _, f in rows]).reshape(len(rows), d)
            self.groups.append(QueryGroup(idx, X, M, xn))
        self.xn = np.zeros((self.N, d))
        for g in self.groups:
            self.xn[g.idx] = g.xn

    def features(self, W, u, bias) -> tuple:
        """``(F, Ferr)``: every query's features ``a_h`` (N, H d; a 1 last with ``bias``) in
        float64 for the heads ``(W, u)`` (float64 arrays), and a bound on each entry's rounding
        error (:meth:`QueryGroup.features`); raises :class:`~exactlearn.errors.DegenerateDraw`
        when float64 cannot hold them (overflowing scores or tokens)."""
        H, d = u.shape
        n = H * d + (1 if bias else 0)
        F, Ferr = np.zeros((self.N, n)), np.zeros((self.N, n))
        for g in self.groups:
            a, err = g.features(W, u)
            F[g.idx, :H * d] = a.reshape(len(g.idx), H * d)
            Ferr[g.idx, :H * d] = err.reshape(len(g.idx), H * d)
        if bias:
            F[:, -1] = 1.0
        if not (np.all(np.isfinite(F)) and np.all(np.isfinite(Ferr))):
            raise DegenerateDraw("the outputs' features overflow float64 (scores or tokens "
                                 "beyond its range): no readout bound can be stated")
        return F, Ferr

    def covariances(self, V) -> tuple:
        """``(C, G)`` for readouts ``V`` (H, d): ``C = Cov_p(v_h . x, x_r)`` (N, H, d), the
        derivative of ``v_h . a_h`` in the score of ``x_r`` (times ``x_n[c]`` for ``W_h[r,
        c]``, alone for ``u_h[r]``), and ``G`` (N, H) the range of ``v_h . x_t`` over each
        query's distinct tokens."""
        H, d = V.shape
        C, G = np.zeros((self.N, H, d)), np.zeros((self.N, H))
        for g in self.groups:
            vx = np.einsum("qtr,hr->qht", g.X, V)
            w = g.p * (vx - np.einsum("qht,qht->qh", g.p, vx)[:, :, None])
            C[g.idx] = np.einsum("qht,qtr->qhr", w, g.X) - w.sum(-1)[:, :, None] * g.a
            G[g.idx] = vx.max(-1) - vx.min(-1)
        return C, G

    def second_order(self, BW, Bu) -> tuple:
        """``(Delta, A, R)``, what the remainder of the first-order W effect needs
        (:func:`_remainder`): ``Delta`` (N, H) bounds ``|ds_t - ds_n|`` over every W and u
        within their bounds (``|x_t - x_n|^T (BW |x_n| + Bu)``, its largest t), ``A`` (N, H,
        d) is ``sum_t p_t |x_t - a_h|`` and ``R`` (N, d) the range of each coordinate over
        the query's distinct tokens."""
        H, d = Bu.shape
        Delta, A, R = np.zeros((self.N, H)), np.zeros((self.N, H, d)), np.zeros((self.N, d))
        for g in self.groups:
            Z = np.einsum("hrc,qc->qhr", BW, np.abs(g.xn)) + Bu[None]
            Delta[g.idx] = np.einsum("qtr,qhr->qht", np.abs(g.X - g.xn[:, None, :]), Z).max(-1)
            A[g.idx] = np.einsum("qht,qhtr->qhr", g.p, np.abs(g.X[:, None] - g.a[:, :, None]))
            R[g.idx] = g.X.max(1) - g.X.min(1)
        return Delta, A, R


class QueryGroup:
    """Queries with the same number T of distinct tokens (:class:`QueryArrays`)."""

    def __init__(self, idx, X, M, xn):
        self.idx, self.X, self.M, self.xn = idx, X, M, xn
        self.p = self.a = None

    def features(self, W, u, chunk: int = 4096) -> tuple:
        """``(a, err)`` (n, H, d): the softmax averages ``a_h = sum_t p_t x_t`` in float64 and
        a bound on their rounding error, against the exact values for the float64 W and u,
        computed ``chunk`` queries at a time.  The scores ``s_t`` err by at most ``sigma =
        (2d + 4) eps max_t |x_t|^T (|W| |x_n| + |u|)`` (the dot products, and the tokens', W's
        and u's own rounding to float64); each ``exp(s_t - max s)`` then by the relative
        ``delta_t = expm1(2 sigma + eps |s_t - max s| + 4 eps)``.  With computed weights
        ``w_t (1 + e_t)``, ``|e_t| <= delta_t``, the average errs by exactly
        ``sum_t p_t e_t (x_t - a) / (1 + e_bar)``, so (the computed p and a in place of the
        exact ones) ``|a - a_hat|_r <= k sum_t p_t delta_t |x_tr - a_r| + (T + 3) eps sum_t
        p_t |x_tr|``, ``k = (1 + D) / ((1 - D)(1 - 2 D))``, D the largest delta (at most 1/4,
        else :class:`~exactlearn.errors.DegenerateDraw`); plus ``2^-1074 (sum_t M_t |x_tr -
        a_r| + T + 1)`` for weights and products that fall below float64's normal range."""
        parts = [self._chunk(W, u, s, s + chunk) for s in range(0, len(self.idx), chunk)]
        self.p = np.concatenate([p for p, _, _ in parts])
        self.a = np.concatenate([a for _, a, _ in parts])
        return self.a, np.concatenate([e for _, _, e in parts])

    def _chunk(self, W, u, lo, hi) -> tuple:
        X, M, xn = self.X[lo:hi], self.M[lo:hi], self.xn[lo:hi]
        d, T = X.shape[2], X.shape[1]
        with np.errstate(over="ignore", invalid="ignore"):
            Z = np.einsum("hrc,qc->qhr", W, xn) + u[None]
            S = np.einsum("qtr,qhr->qht", X, Z)
            top = S.max(-1, keepdims=True)
            w = np.exp(S - top) * M[:, None, :]
            p = w / w.sum(-1, keepdims=True)
            a = np.einsum("qht,qtr->qhr", p, X)
            absX = np.abs(X)
            Zabs = np.einsum("hrc,qc->qhr", np.abs(W), np.abs(xn)) + np.abs(u)[None]
            sigma = (2 * d + 4) * EPS * np.einsum("qtr,qhr->qht", absX, Zabs).max(-1, keepdims=True)
            delta = np.expm1(2 * sigma + EPS * np.abs(S - top) + 4 * EPS)
            D = delta.max(-1, keepdims=True)
            if np.any(D > 0.25):
                raise DegenerateDraw("the outputs' features cannot be computed in float64 within "
                                     "a stated bound: scores too large for their rounding")
            kappa = (1 + D) / ((1 - D) * (1 - 2 * D))
            dev = np.abs(X[:, None, :, :] - a[:, :, None, :])           # (n, H, T, d)
            tiny = 2.0 ** -1074 * (np.einsum("qt,qhtr->qhr", M, dev) + T + 1)
            err = kappa * np.einsum("qht,qhtr->qhr", p * delta, dev) \
                + (T + 3) * EPS * np.einsum("qht,qtr->qhr", p, absX) + tiny
        return p, a, err
