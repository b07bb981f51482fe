"""Vector outputs over the real field: every output's readout from the recorded answers, by
weighted least squares, with first-order bounds (docs: explanation/biases.md#vector-outputs).

The stable (or paper) plan runs on the scalar view ``r . y`` (r a random unit vector; the
view's eta is ``sum_j |r_j| eta_j``) and certifies heads W_h with entrywise bounds.  Given
them every output is linear in its readouts: for a query X,
``y_j(X) = sum_h V_h[j] . a_h(X)``, ``a_h(X) = sum_i softmax_i(x_i^T W_h x_n) x_i``, the
features the same for every output.  :func:`learn_outputs_real` computes the features of
every recorded answer (in the field's precision), solves the weighted least squares
``min sum_q ((y_{j,q} - F_q v_j) / eta_q)^2`` for all m outputs at once (one
pseudo-inverse P, m right-hand sides), and bounds each entry at first order:

    |v_hat - v|_i <= SAFETY * sum_q |P_iq| (eta_q + g_q) / eta_q + rounding,

``g_q`` the effect of the W bounds on answer q (``|d(V . a_h)/dW_h[r, c]| = |Cov_p(v . x,
x_r)| |x_n[c]|`` times the entry's bound).  Then each output's weighted least-squares
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


def _softmax_stats(W, u, x_tokens, mults, final):
    """Per token the softmax weight p_i (float64, from the float W and u of a head)."""
    s = x_tokens @ (W @ final + u)
    s = s - s.max()
    w = np.exp(s) * mults
    return w / w.sum()


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
    Wf = [np.array([[float(a) for a in row] for row in h.W]) for h in heads]
    uf = [np.array([float(a) for a in h.u]) for h in heads]
    BW = [np.array([[float(x) for x in row] for row in bw]) for bw in outcome.W_bounds]
    Bu = [np.zeros(d) if u_bounds is None else np.array([float(x) for x in bu]) for bu in
          (u_bounds if u_bounds is not None else [None] * H)]
    N = len(records)
    n = H * d + (1 if bias else 0)
    F, Y, toks = _features(heads, d, records, K, m, bias)
    # each answer's eta: eta_j + eta_rel |y_{q,j}| (noise_rel), floored at float64 rounding
    floor = 8 * EPS * max(1.0, float(np.abs(Y).max()))
    E = np.array(etas_j)[None, :] + rel * np.abs(Y)                 # (N, m), declared
    Ee = np.maximum(E, floor)                          # an exact box: float64 rounding only
    Vhat, Ps = _readouts(F, Y, Ee, n, bias)
    G = _w_effect(toks, Wf, uf, BW, Bu, Vhat, d, m)
    RND = 64 * EPS * (np.abs(F) @ np.abs(Vhat.T) + np.abs(Y))       # (N, m) rounding
    Bv = np.zeros((m, n))
    for j in range(m):
        e, P = Ee[:, j], Ps[j]
        Bv[j] = SAFETY * (np.abs(P) @ ((E[:, j] + G[:, j]) / e))
        Bv[j] += np.abs(P) @ (RND[:, j] / e) + 16 * EPS * np.abs(Vhat[j])
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
    vb = float(Bv.max())
    wb = max([float(b.max()) for b in BW] + [float(b.max()) for b in Bu])
    err = max(vb, wb)
    outcome.error_bound = LO.convert(err)
    outcome.v_bounds = [[[LO.convert(float(Bv[j, h * d + c])) for c in range(d)] for j in range(m)]
                        for h in range(H)]
    outcome.head_bounds = [LO.convert(max(float(BW[h].max()), float(Bv[:, h * d:(h + 1) * d].max())))
                           for h in range(H)]
    outcome.detail["outputs"] = {
        "outputs": m, "method": "weighted least squares of every recorded answer, the W of the "
        "scalar view r . y", "combination": None if r is None else [f"{float(x):.17g}" for x in r],
        "certified_values": N * m, "max_residual_over_tolerance": f"{worst:.3g}",
        "max_residual_norm_over_noise_allowance": f"{excess:.3g}",
        "readout_error_bound": f"{vb:.3g}", "W_error_bound": f"{wb:.3g}"}
    outcome.detail["head_error_bounds"] = [f"{float(b):.3g}" for b in outcome.head_bounds]
    return canon, N * m


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


def _features(heads, d, records, K, m, bias) -> tuple:
    """``(F, Y, toks)``: every record's features ``a_h`` (in the field's precision, then
    float64; a 1 last with ``bias``), its m answers, and its distinct tokens, their
    multiplicities and its final token (float64), computed once per distinct query.  The
    scores ``x^T (W_h x_n + u_h)`` and their exponentials depend on the distinct tokens and the
    final token only, so they are computed once per such pair (a stable-plan family's queries
    differ only in their multiplicities): the same operations as per query, the same values."""
    ctx = K.ctx
    Ws = [([[K(a) for a in row] for row in h.W], [K(a) for a in h.u]) for h in heads]
    N = len(records)
    F = np.zeros((N, len(heads) * d + (1 if bias else 0)))
    Y = np.zeros((N, m))
    toks = []
    cache: dict = {}
    scores: dict = {}
    for q, (tokens, ys) in enumerate(records):
        pairs: dict = {}
        for t in tokens:
            key = tuple(t)
            pairs[key] = pairs.get(key, 0) + 1
        final = tuple(tokens[-1])
        key = (tuple(sorted(pairs.items())), final)
        got = cache.get(key)
        if got is None:
            mult = list(pairs.values())
            xs, exps = _scores(scores, Ws, tuple(pairs), final, K)
            row = []
            for e in exps:
                w = [x * c for x, c in zip(e, mult)]
                tot = ctx.fsum(w)
                row.extend(float(ctx.fsum(wi * x[c] for wi, x in zip(w, xs)) / tot) for c in range(d))
            if bias:
                row.append(1.0)
            got = cache[key] = (row, np.array([[float(a) for a in t] for t in pairs]),
                                np.array(mult, dtype=float), np.array([float(a) for a in final]))
        F[q] = got[0]
        Y[q] = [float(y) for y in ys]
        toks.append(got[1:])
    return F, Y, toks


def _scores(memo, Ws, distinct, final, K) -> tuple:
    """``(xs, exps)`` for the distinct tokens (in order) and the final token: the tokens in
    ``K`` and, per head, ``exp(s_i - max s)`` of their scores ``s_i = x_i^T (W x_n + u)``."""
    got = memo.get((distinct, final))
    if got is None:
        ctx = K.ctx
        xs = [[K(a) for a in t] for t in distinct]
        xn = [K(a) for a in final]
        exps = []
        for W, u in Ws:
            wx = [ctx.fdot(r, xn) + b for r, b in zip(W, u)]          # W x_n + u
            sc = [ctx.fdot(x, wx) for x in xs]
            top = max(sc)
            exps.append([ctx.exp(s - top) for s in sc])
        got = memo[(distinct, final)] = (xs, exps)
    return got


def _readouts(F, Y, Ee, n, bias) -> tuple:
    """``(Vhat, Ps)``: each output's weighted least-squares readouts (weights ``1 / Ee``) and
    its pseudo-inverse ``Ps[j]`` (one per distinct weighting)."""
    m = Y.shape[1]
    Vhat = np.zeros((m, n))
    Ps: dict = {}
    for j in range(m):
        e = Ee[:, j]
        key = e.tobytes()
        P = Ps.get(key)
        if P is None:
            A = F / e[:, None]
            if np.linalg.matrix_rank(A) < n:
                raise DegenerateDraw(f"the recorded answers determine fewer than the {n} "
                                     f"readouts of each output (H d{' + 1' if bias else ''}): a "
                                     f"degenerate draw")
            P = Ps[key] = np.linalg.pinv(A)
        Ps[j] = P
        Vhat[j] = P @ (Y[:, j] / e)
    return Vhat, Ps


def _w_effect(toks, Wf, uf, BW, Bu, Vhat, d, m):
    """First order: the W (and u) bounds' effect ``g_{q,j}`` on each answer, with the
    estimated readouts (module doc), an (N, m) array."""
    G = np.zeros((len(toks), m))
    for q, (X, mult, xn) in enumerate(toks):
        for h in range(len(Wf)):
            p = _softmax_stats(Wf[h], uf[h], X, mult, xn)
            vx = X @ Vhat[:, h * d:(h + 1) * d].T          # (tokens, m): v_j . x_i
            xbar = p @ X
            vbar = p @ vx
            cov = ((vx - vbar) * p[:, None]).T @ (X - xbar)  # (m, d): Cov_p(v_j . x, x_r)
            G[q] += np.abs(cov) @ (BW[h] @ np.abs(xn) + Bu[h])      # d/dW_rc, d/du_r
    return G


def _output_tests(F, Y, Vhat, Bv, E, Ee, G, RND, floor, H, note) -> tuple:
    """Each output's residual norm, then every answer of every output within its tolerance
    (module doc): ``(largest norm ratio, largest residual over tolerance)``; raises
    :class:`~exactlearn.errors.ResidualsBeyondNoise`, then
    :class:`~exactlearn.errors.NoisierThanDeclared`, beyond 1."""
    N, m = Y.shape
    # the least-squares residuals are a projection of the output errors: with every output
    # within its eta, their weighted 2-norm is at most that of eta / eta_eff (sqrt(N) at most)
    # plus the W bounds' effect
    excess = 0.0
    for j in range(m):
        e = Ee[:, j]
        rw = (Y[:, j] - F @ Vhat[j]) / e
        allow = (float(np.linalg.norm(np.maximum(E[:, j], floor) / e))
                 + float(np.linalg.norm(SAFETY * G[:, j] / e)) + float(np.linalg.norm(RND[:, j] / e)))
        ratio = float(np.linalg.norm(rw)) / allow
        excess = max(excess, ratio)
        if ratio > 1:
            raise ResidualsBeyondNoise(
                f"outputs noisier than the declared eta (or a black box outside the model "
                f"class): the least-squares fit of output {j + 1} of {m} to all {N} answers "
                f"leaves weighted residuals of 2-norm {ratio:.3g} times what outputs within "
                f"their eta allow (sqrt(N) plus the W bounds' effect){note}", heads=H)
    # every recorded answer of every output within its tolerance
    worst = 0.0
    for q in range(N):
        fq = F[q] @ Vhat.T                                # (m,)
        res = np.abs(Y[q] - fq)
        tol = E[q] + SAFETY * G[q] + np.abs(F[q]) @ Bv.T + RND[q]
        ratio = res / np.maximum(tol, 1e-300)
        k = int(np.argmax(ratio))
        worst = max(worst, float(ratio[k]))
        if ratio[k] > 1:
            raise NoisierThanDeclared(
                f"outputs noisier than the declared eta (or a black box outside the model "
                f"class): the recovered readouts miss output {k + 1} of {m} on an observation "
                f"by {res[k]:.3g} > tolerance {tol[k]:.3g}{note}")
    return excess, worst
