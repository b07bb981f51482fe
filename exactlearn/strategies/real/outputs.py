"""Vector outputs over the real field: every output's readout from the recorded answers, by
weighted least squares, with first-order bounds (docs: explanation/biases.md#vector-outputs).

The stable (or paper) plan runs on the scalar view ``r . y`` (r a random unit vector; the
view's eta is ``sum_j |r_j| eta_j``) and certifies heads W_h with entrywise bounds.  Given
them every output is linear in its readouts: for a query X,
``y_j(X) = sum_h V_h[j] . a_h(X)``, ``a_h(X) = sum_i softmax_i(x_i^T W_h x_n) x_i``, the
features the same for every output.  :func:`learn_outputs_real` computes the features of
every recorded answer (in float64, with a bound on their rounding), solves the weighted least squares
``min sum_q ((y_{j,q} - F_q v_j) / eta_q)^2`` for all m outputs at once (one
pseudo-inverse P, m right-hand sides), and bounds each entry at first order:

    |v_hat - v|_i <= SAFETY * (sum_q |P_iq| eta_q + sum_k |sum_q P_iq J_qk| B_k) + rounding,

``P`` with the weights ``1 / eta_q`` folded in, ``J_qk`` the derivative of answer q in the
W or u entry k (``d(V . a_h)/dW_h[r, c] = Cov_p(v . x, x_r) x_n[c]``, ``d/du_h[r]`` the same
without ``x_n[c]``) and ``B_k`` its bound: the effects of one W entry on different answers
are summed before their absolute value is taken, so that they may cancel (the worst W
perturbation attains the sum; tests/test_outputs_bounds.py).  The features are computed in
float64 (:class:`QueryArrays`) with a stated bound on their rounding, part of "rounding".
Then each output's weighted least-squares
residuals, a projection of the output errors, must have 2-norm at most sqrt(N) plus the W
bounds' effect (:class:`~exactlearn.errors.ResidualsBeyondNoise` otherwise: a box noisier than
declared in that output), and every recorded answer of every output must be within its
tolerance -- eta_q plus the first-order effect of the W and v bounds plus rounding -- or the
run fails (:class:`~exactlearn.errors.NoisierThanDeclared`).
"""

from __future__ import annotations

import math

import numpy as np
from gmpy2 import mpq

from exactlearn.errors import DegenerateDraw, NoisierThanDeclared, ResidualsBeyondNoise
from exactlearn.model import Head, canonicalize
from exactlearn.noise import noise_bound
from exactlearn.oracle.adapt import token_runs
from exactlearn.progress import current
from exactlearn.strategies.real.certificate import SAFETY
from exactlearn.strategies.real.lsq import EPS
from exactlearn.strategies.real.sensitivity import LO


def draw_unit(m: int, rng) -> list:
    """A random unit vector of m float64 entries (its exact binary values), no entry 0."""
    while True:
        g = [rng.gauss(0.0, 1.0) for _ in range(m)]
        norm = math.sqrt(sum(x * x for x in g))
        if norm > 0 and all(x != 0 for x in g):
            return [mpq(x / norm) for x in g]


def output_etas(K, noise, m: int) -> list:
    """Each output's declared eta (one number for all, or one per output), as floats."""
    if noise is None:
        return [0.0] * m
    if isinstance(noise, (list, tuple)):
        return [float(noise_bound(K, x)) for x in noise]
    return [float(noise_bound(K, noise))] * m


def combined_noise(K, r, noise, m: int):
    """The scalar view's eta: ``sum_j |r_j| eta_j`` in the field's precision, raised by the
    relative rounding of its m terms (an element of ``K``); None when no noise is declared."""
    if noise is None:
        return None
    etas = [noise_bound(K, x) for x in noise] if isinstance(noise, (list, tuple)) \
        else [noise_bound(K, noise)] * m
    total = K.zero
    for x, e in zip(r, etas):
        total = total + abs(K(x)) * e
    return total * (1 + K.ctx.ldexp(4 * (m + 1), -K.prec))


def learn_outputs_real(heads, d: int, records, K, m: int, noise, outcome, r=None,
                       bias: bool = False, noise_rel=None) -> tuple:
    """The m outputs' readouts from ``records`` (module doc): returns
    ``(canonical vector heads, values certified)`` and updates ``outcome`` (its
    ``error_bound``, ``v_bounds`` and ``detail["outputs"]``).  Heads with a query bias u
    score ``x_i^T W x_n + u^T x_i``, their u bounds read from ``outcome.u_bounds`` (per head,
    per entry), which must then be given; ``bias``: a length-m constant is solved too (one
    more feature, 1) and returned as the result's ``constant``.  ``noise_rel``: each answer
    is trusted to ``eta_j + noise_rel |y_{q,j}|``, and each output is weighted by its own."""
    current().stage("analyse")          # progress=: the outputs' solve
    heads = tuple(heads)
    H = len(heads)
    u_bounds = _bounds_given(heads, outcome)
    etas_j = output_etas(K, noise, m)
    rel = 0.0 if noise_rel is None else float(noise_bound(K, noise_rel))
    Wf = np.array([[[float(a) for a in row] for row in h.W] for h in heads]).reshape(H, d, d)
    uf = np.array([[float(a) for a in h.u] for h in heads]).reshape(H, d)
    BW = np.array([[[float(x) for x in row] for row in bw] for bw in outcome.W_bounds]
                  ).reshape(H, d, d)
    Bu = np.zeros((H, d)) if u_bounds is None else \
        np.array([[float(x) for x in bu] for bu in u_bounds]).reshape(H, d)
    N = len(records)
    n = H * d + (1 if bias else 0)
    qs = QueryArrays(records, d, m)
    F, Ferr = qs.features(Wf, uf, bias)
    Y = qs.Y
    # each answer's eta: eta_j + eta_rel |y_{q,j}| (noise_rel), floored at float64 rounding
    floor = 8 * EPS * max(1.0, float(np.abs(Y).max()))
    E = np.array(etas_j)[None, :] + rel * np.abs(Y)                 # (N, m), declared
    Ee = np.maximum(E, floor)                          # an exact box: float64 rounding only
    Vhat, Bv, G, RND = _readouts(qs, F, Ferr, Y, E, Ee, BW, Bu, n, bias)
    if not np.all(np.isfinite(Bv)):
        raise DegenerateDraw("a readout's error bound is not finite: nothing to certify")
    alone = [j for j, x in enumerate(r or []) if x != 0]
    # noise_rel: the plan ran on output k alone, where a head whose row k of V is 0 is invisible
    note = ("" if len(alone) != 1 else
            f" [the plan ran on output {alone[0] + 1} alone (noise_rel=): a head whose readout in "
            f"that output is 0 is invisible there and misses from every other output -- a "
            f"degenerate draw; retries= draws another output]")
    excess, worst = _output_tests(F, Y, Vhat, Bv, E, Ee, G, RND, floor, H, note)
    out = []
    for h, head in enumerate(heads):
        V = tuple(tuple(mpq(float(Vhat[j, h * d + c])) for c in range(d)) for j in range(m))
        out.append(Head(head.W, V, head.u))
    if bias:
        const = tuple(mpq(float(Vhat[j, n - 1])) for j in range(m))
        canon = canonicalize(out, const, True)
    else:
        canon = canonicalize(out)
    if len(canon) != H:
        raise DegenerateDraw("a head's readouts came out exactly 0 in every output: it cannot "
                             "be told apart from no head")
    order = sorted(range(H), key=lambda h: out[h])      # the canonical order of the heads
    _report(outcome, Bv, BW, Bu, order, r, N, m, excess, worst)
    return canon, N * m


def _report(outcome, Bv, BW, Bu, order, r, N, m, excess, worst) -> None:
    """The bounds into ``outcome``, per head in the canonical order ``order`` of the heads
    returned (W and u bounds permuted with them): ``error_bound``, ``W_bounds``,
    ``u_bounds``, ``v_bounds``, ``head_bounds`` and ``detail["outputs"]``."""
    H, d = Bu.shape
    vb = float(Bv.max())
    wb = max(float(BW.max()), float(Bu.max()))
    outcome.error_bound = LO.convert(max(vb, wb))
    outcome.W_bounds = [outcome.W_bounds[h] for h in order]
    if getattr(outcome, "u_bounds", None) is not None:
        outcome.u_bounds = [outcome.u_bounds[h] for h in order]
    outcome.v_bounds = [[[LO.convert(float(Bv[j, h * d + c])) for c in range(d)] for j in range(m)]
                        for h in order]
    outcome.head_bounds = [LO.convert(max(float(BW[h].max()), float(Bu[h].max()),
                                          float(Bv[:, h * d:(h + 1) * d].max()))) for h in order]
    outcome.detail["outputs"] = {
        "outputs": m, "method": "weighted least squares of every recorded answer, the W of the "
        "scalar view r . y", "combination": None if r is None else [f"{float(x):.17g}" for x in r],
        "certified_values": N * m, "max_residual_over_tolerance": f"{worst:.3g}",
        "max_residual_norm_over_noise_allowance": f"{excess:.3g}",
        "readout_error_bound": f"{vb:.3g}", "W_error_bound": f"{wb:.3g}"}
    outcome.detail["head_error_bounds"] = [f"{float(b):.3g}" for b in outcome.head_bounds]


def _bounds_given(heads, outcome):
    """The u bounds of ``outcome`` (None without); raises when the scalar run certified no
    head, or bounds fewer heads than ``heads`` (W, or u when the heads have one)."""
    H = len(heads)
    if H == 0:
        raise DegenerateDraw("no head was certified on the scalar view: nothing to solve the "
                             "outputs from")
    if len(outcome.W_bounds) != H:
        raise DegenerateDraw(f"the scalar run's W bounds cover {len(outcome.W_bounds)} heads, not "
                             f"the {H} certified: nothing to propagate")
    u_bounds = getattr(outcome, "u_bounds", None)
    if any(h.biased for h in heads) and (u_bounds is None or len(u_bounds) != H):
        raise DegenerateDraw("the heads have query biases u but no bounds on them to propagate")
    return u_bounds


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
                got = floats[t] = [float(a) for a in t]
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
        error (:meth:`QueryGroup.features`)."""
        H, d = u.shape
        n = H * d + (1 if bias else 0)
        F, Ferr = np.zeros((self.N, n)), np.zeros((self.N, n))
        for g in self.groups:
            a, err = g.features(W, u)
            F[g.idx, :H * d] = a.reshape(len(g.idx), H * d)
            Ferr[g.idx, :H * d] = err.reshape(len(g.idx), H * d)
        if bias:
            F[:, -1] = 1.0
        return F, Ferr

    def covariances(self, V) -> np.ndarray:
        """``Cov_p(v_h . x, x_r)`` (N, H, d) for readouts ``V`` (H, d): the derivative of
        ``v_h . a_h`` in the score of ``x_r`` (times ``x_n[c]`` for ``W_h[r, c]``, alone for
        ``u_h[r]``)."""
        H, d = V.shape
        C = np.zeros((self.N, H, d))
        for g in self.groups:
            vx = np.einsum("qtr,hr->qht", g.X, V)
            w = g.p * (vx - np.einsum("qht,qht->qh", g.p, vx)[:, :, None])
            C[g.idx] = np.einsum("qht,qtr->qhr", w, g.X) - w.sum(-1)[:, :, None] * g.a
        return C


class QueryGroup:
    """Queries with the same number T of distinct tokens (:class:`QueryArrays`)."""

    def __init__(self, idx, X, M, xn):
        self.idx, self.X, self.M, self.xn = idx, X, M, xn
        self.p = self.a = None

    def features(self, W, u) -> tuple:
        """``(a, err)`` (n, H, d): the softmax averages ``a_h = sum_t p_t x_t`` in float64 and
        a bound on their rounding error, against the exact values for the float64 W and u.
        The scores ``s_t`` err by at most ``sigma = (2d + 4) eps max_t |x_t|^T (|W| |x_n| +
        |u|)`` (the dot products, and the tokens', W's and u's own rounding to float64); each
        ``exp(s_t - max s)`` then by the relative ``delta_t = expm1(2 sigma + eps |s_t - max s|
        + 4 eps)``, and, the weights normalised, ``|a - a_hat|_r <= 1.01 sum_t p_t delta_t
        |x_tr - a_r| + (T + 3) eps sum_t p_t |x_tr|``."""
        X, M, xn = self.X, self.M, self.xn
        d, T = X.shape[2], X.shape[1]
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
        dev = np.abs(X[:, None, :, :] - a[:, :, None, :])              # (n, H, T, d)
        err = 1.01 * np.einsum("qht,qhtr->qhr", p * delta, dev) \
            + (T + 3) * EPS * np.einsum("qht,qtr->qhr", p, absX)
        self.p, self.a = p, a
        return a, err


def _readouts(qs, F, Ferr, Y, E, Ee, BW, Bu, n, bias) -> tuple:
    """``(Vhat, Bv, G, RND)``: each output's weighted least-squares readouts (weights
    ``1 / Ee``), their bounds (module doc), the W and u bounds' first-order effect on each
    answer ``G`` and each answer's rounding allowance ``RND`` ((N, m) each).  One
    pseudo-inverse per distinct weighting, computed when the weighting changes."""
    N, m = Y.shape
    H, d = Bu.shape
    Vhat, Bv, G = np.zeros((m, n)), np.zeros((m, n)), np.zeros((N, m))
    RND = np.zeros((N, m))
    key = P = None
    Bz = np.einsum("hrc,qc->qhr", BW, np.abs(qs.xn)) + Bu[None]       # (N, H, d)
    for j in range(m):
        e = Ee[:, j]
        if key != e.tobytes():
            key = e.tobytes()
            A = F / e[:, None]
            if np.linalg.matrix_rank(A) < n:
                raise DegenerateDraw(f"the recorded answers determine fewer than the {n} "
                                     f"readouts of each output (H d{' + 1' if bias else ''}): a "
                                     f"degenerate draw")
            P = np.linalg.pinv(A) / e[None, :]          # v_hat = P y: the weights folded in
        Vhat[j] = P @ Y[:, j]
        C = qs.covariances(Vhat[j, :H * d].reshape(H, d))
        G[:, j] = np.einsum("qhr,qhr->q", np.abs(C), Bz)
        RND[:, j] = 64 * EPS * (np.abs(F) @ np.abs(Vhat[j]) + np.abs(Y[:, j])) \
            + Ferr @ np.abs(Vhat[j])
        absP = np.abs(P)
        Bv[j] = SAFETY * (absP @ E[:, j] + _w_effect(P, C, qs.xn, BW, Bu))
        Bv[j] += absP @ RND[:, j] + 16 * EPS * np.abs(Vhat[j])
    return Vhat, Bv, G, RND


def _w_effect(P, C, xn, BW, Bu, chunk: int = 8192) -> np.ndarray:
    """The W and u bounds' first-order effect on the readouts ``v_hat = P y``: per readout
    ``sum_{h,r,c} |sum_q P_iq C_qhr x_n,q[c]| BW_h[r, c] + sum_{h,r} |sum_q P_iq C_qhr|
    Bu_h[r]``, the derivative of ``v_hat`` in each W and u entry summed over the queries
    before its absolute value is taken (so that their effects may cancel)."""
    n, N = P.shape
    H, d = Bu.shape
    out = np.zeros(n)
    for h in range(H):
        Mh = np.zeros((n, d * d + d))
        for s in range(0, N, chunk):
            c = C[s:s + chunk, h]
            D = np.concatenate(((c[:, :, None] * xn[s:s + chunk, None, :]).reshape(len(c), d * d),
                                c), axis=1)
            Mh += P[:, s:s + chunk] @ D
        out += np.abs(Mh) @ np.concatenate((BW[h].ravel(), Bu[h]))
    return out


def _output_tests(F, Y, Vhat, Bv, E, Ee, G, RND, floor, H, note) -> tuple:
    """Each output's residual norm, then every answer of every output within its tolerance
    (module doc): ``(largest norm ratio, largest residual over tolerance)``; raises
    :class:`~exactlearn.errors.ResidualsBeyondNoise`, then
    :class:`~exactlearn.errors.NoisierThanDeclared`, beyond 1."""
    N, m = Y.shape
    # the least-squares residuals are a projection of the output errors: with every output
    # within its eta, their weighted 2-norm is at most that of eta / eta_eff (sqrt(N) at most)
    # plus the W bounds' effect
    R = Y - F @ Vhat.T                                    # (N, m)
    excess = 0.0
    for j in range(m):
        e = Ee[:, j]
        allow = (float(np.linalg.norm(np.maximum(E[:, j], floor) / e))
                 + float(np.linalg.norm(SAFETY * G[:, j] / e)) + float(np.linalg.norm(RND[:, j] / e)))
        ratio = float(np.linalg.norm(R[:, j] / e)) / allow
        excess = max(excess, ratio)
        if ratio > 1:
            raise ResidualsBeyondNoise(
                f"outputs noisier than the declared eta (or a black box outside the model "
                f"class): the least-squares fit of output {j + 1} of {m} to all {N} answers "
                f"leaves weighted residuals of 2-norm {ratio:.3g} times what outputs within "
                f"their eta allow (sqrt(N) plus the W bounds' effect){note}", heads=H)
    # every recorded answer of every output within its tolerance
    tol = E + SAFETY * G + np.abs(F) @ Bv.T + RND
    ratio = np.abs(R) / np.maximum(tol, 1e-300)
    q, k = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    worst = float(ratio[q, k])
    if worst > 1:
        raise NoisierThanDeclared(
            f"outputs noisier than the declared eta (or a black box outside the model "
            f"class): the recovered readouts miss output {k + 1} of {m} on an observation "
            f"by {abs(R[q, k]):.3g} > tolerance {tol[q, k]:.3g}{note}")
    return excess, worst
