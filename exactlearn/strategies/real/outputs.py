"""Vector outputs over the real field: every output's readout from the recorded answers, by
weighted least squares, with first-order bounds (docs: explanation/biases.md#vector-outputs).

The plan runs on the scalar view ``r . y`` and certifies the heads; given them every output is
linear in its readouts, ``y_j(X) = sum_h V_h[j] . a_h(X)`` with the same features
``a_h(X) = sum_i softmax_i(x_i^T W_h x_n) x_i`` for every output
(:class:`~exactlearn.strategies.real.features.QueryArrays`, float64 with a bound on their
rounding).  :func:`learn_outputs_real` solves the weighted least squares for all m outputs at
once (one pseudo-inverse ``P``) and bounds each entry from ``v_hat - v = P (noise + (F(W) -
F(W_hat)) v)``:

    |v_hat - v|_i <= sum_q |P_iq| eta_q + sum_k |sum_q P_iq J_qk| B_k + |P| S + rounding,

``S`` the derivative's change and the Taylor remainder over the W and u box
(:func:`_remainder`), the answers fitted those whose scores the box moves least
(:func:`_pinned`), the bound "rigorous" when it covers ``S``, else "first order" over every
answer.  Then each output's residuals and every recorded answer are tested
(:func:`_output_tests`: :class:`~exactlearn.errors.ResidualsBeyondNoise`,
:class:`~exactlearn.errors.NoisierThanDeclared`).
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
from exactlearn.strategies.real.features import QueryArrays
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
    rel = 0.0 if noise_rel is None else float(noise_bound(K, noise_rel, "noise_rel"))
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
    Vhat, Bv, G, RND, used, rigorous = _readouts(qs, F, Ferr, Y, E, Ee, BW, Bu, n, bias)
    if not np.all(np.isfinite(Bv)):
        raise DegenerateDraw("a readout's error bound is not finite: nothing to certify")
    alone = [j for j, x in enumerate(r or []) if x != 0]
    # noise_rel: the plan ran on output k alone, where a head whose row k of V is 0 is invisible
    note = ("" if len(alone) != 1 else
            f" [the plan ran on output {alone[0] + 1} alone (noise_rel=): a head whose readout in "
            f"that output is 0 is invisible there and misses from every other output -- a "
            f"degenerate draw; retries= draws another output]")
    excess, worst = _output_tests(F, Y, Vhat, Bv, E, Ee, G, RND, floor, H, note, used)
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
    _report(outcome, Bv, BW, Bu, order, r, N, m, excess, worst, int(used.sum()), rigorous)
    return canon, N * m


def _report(outcome, Bv, BW, Bu, order, r, N, m, excess, worst, fitted, rigorous) -> None:
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
    # the constant's bound per output (its column follows the heads' with a constant)
    outcome.constant_bounds = [LO.convert(float(Bv[j, H * d])) if Bv.shape[1] > H * d else 0
                               for j in range(m)]
    outcome.detail["outputs"] = {
        "outputs": m, "method": "weighted least squares of the recorded answers "
        "(fitted_answers of them), the W of the scalar view r . y", "combination": None if r is None else [f"{float(x):.17g}" for x in r],
        "certified_values": N * m, "fitted_answers": fitted,
        "readout_bound": "rigorous given the certified W and u bounds" if rigorous else
        "first order: the certified W and u bounds let some scores move too far for a "
        "rigorous bound (explanation/biases.md#vector-outputs)",
        "max_residual_over_tolerance": f"{worst:.3g}",
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


def _readouts(qs, F, Ferr, Y, E, Ee, BW, Bu, n, bias) -> tuple:
    """``(Vhat, Bv, G, RND, used, rigorous)``: each output's weighted least-squares readouts
    (weights ``1 / Ee``) over the answers ``used``, their bounds, the W and u bounds'
    first-order effect on each answer ``G`` and each answer's rounding allowance ``RND``
    ((N, m) each).  Over the answer sets of :func:`_pinned` in turn, the first whose bounds
    close rigorously given the W and u bounds (:func:`_remainder`); when none does, over
    every answer with the first-order bound ``SAFETY |P| (eta + G) + rounding`` (``rigorous``
    False: the result says so)."""
    second = qs.second_order(BW, Bu)
    Bz = np.einsum("hrc,qc->qhr", BW, np.abs(qs.xn)) + Bu[None]       # (N, H, d)
    for used in _pinned(F, second[0].max(1), n, bias):     # ends with every answer, where
        got = _solve(qs, F, Ferr, Y, E, Ee, Bz, BW, Bu, n, used, second)   # got is never None
        if got is not None:
            break
    return got[:4] + (used, got[4])


def _solve(qs, F, Ferr, Y, E, Ee, Bz, BW, Bu, n, used, second) -> tuple | None:
    """:func:`_readouts` over the answers ``used``: ``(Vhat, Bv, G, RND, rigorous)`` with
    the rigorous bounds (``second``:
    :meth:`~exactlearn.strategies.real.features.QueryArrays.second_order`), None when they do
    not close for some output -- except over every answer, where the first-order bounds
    (summed absolute values), computed beside them, are returned instead."""
    N, m = Y.shape
    H, d = Bu.shape
    last = bool(used.all())
    Vhat, Bv, G = np.zeros((m, n)), np.zeros((m, n)), np.zeros((N, m))
    RND, first_order = np.zeros((N, m)), np.zeros((m, n))
    key = P = None
    rigorous = True
    for j in range(m):
        e = Ee[:, j]
        if key != e.tobytes():
            key = e.tobytes()
            P = np.zeros((n, N))                        # v_hat = P y: the weights folded in
            P[:, used] = np.linalg.pinv(F[used] / e[used, None]) / e[None, used]
            absP = np.abs(P)
        Vhat[j] = P @ Y[:, j]
        C, rng_v = qs.covariances(Vhat[j, :H * d].reshape(H, d))
        G[:, j] = np.einsum("qhr,qhr->q", np.abs(C), Bz)
        RND[:, j] = 64 * EPS * (np.abs(F) @ np.abs(Vhat[j]) + np.abs(Y[:, j])) \
            + Ferr @ np.abs(Vhat[j])
        rounding = absP @ RND[:, j] + 16 * EPS * np.abs(Vhat[j])
        if last:
            first_order[j] = SAFETY * (absP @ (E[:, j] + G[:, j])) + rounding
        if rigorous:
            first = absP @ E[:, j] + _w_effect(P, C, qs.xn, BW, Bu)
            B = _remainder(absP, first, rounding, second, rng_v, H, d)
            if B is None and not last:
                return None
            rigorous = B is not None
            Bv[j] = B if rigorous else 0
    return Vhat, Bv if rigorous else first_order, G, RND, rigorous


def _pinned(F, Delta, n, bias, cuts=(0.05, 0.2, 1.0)):
    """The answer sets the readouts are fitted to, in turn (masks): those whose scores the
    certified W and u bounds pin down, ``Delta_q``
    (:meth:`~exactlearn.strategies.real.features.QueryArrays.second_order`, its largest
    head) at most each cut, when they determine all n readouts, then every answer.  On the
    others the W box lets scores move by more than first order describes, and the readouts'
    bound could not be stated from them (:func:`_remainder`).  Raises
    :class:`~exactlearn.errors.DegenerateDraw` when even every answer leaves some readout
    undetermined."""
    if np.linalg.matrix_rank(F) < n:
        raise DegenerateDraw(f"the recorded answers determine fewer than the {n} readouts of "
                             f"each output (H d{' + 1' if bias else ''}): a degenerate draw")
    seen = -1
    for cut in cuts:
        used = Delta <= cut
        k = int(used.sum())
        if seen < k < len(F) and k >= n and np.linalg.matrix_rank(F[used]) == n:
            seen = k
            yield used
    yield np.ones(len(F), dtype=bool)


def _remainder(absP, first, rounding, second, rng_v, H, d, rounds: int = 30) -> np.ndarray:
    """Output j's readout bounds: ``SAFETY * first + rounding``, raised until they hold
    rigorously.  Exactly, ``v_hat - v = P (noise + (F(W) - F(W_hat)) v)``; per answer and
    head, ``(a_h(W) - a_h(W_hat)) . v_h`` is its first-order part at ``v_hat`` (in
    ``first``) plus ``Cov_p((v_h - v_hat_h) . x, ds)``, at most ``2 Delta sum_r A_r
    |v - v_hat|_r``, plus the Taylor remainder, half the third central moment
    ``E[(g - Eg)(ds - E ds)^2]`` of ``g = v_h . x_t`` somewhere on the way, at most ``2
    Delta^2 (range of v_hat_h . x_t + sum_r R_r |v - v_hat|_r)`` (``Delta``, ``A``, ``R``:
    :meth:`~exactlearn.strategies.real.features.QueryArrays.second_order`).  So a bound B holds when ``first + rounding + |P|
    S(B) <= B``, S those terms at ``|v - v_hat| <= B`` (B > 0 with that property: the
    linear map's spectral radius is below 1, and the true error lies below B).  None when
    no such B is found: W bounds too wide for first order."""
    Delta, A, R = second
    base = np.maximum(first + rounding, 1e-300)        # > 0: the spectral radius argument

    def allowance(B):
        Bh = B[:H * d].reshape(H, d)
        cross = 2 * Delta * np.einsum("qhr,hr->qh", A, Bh)
        taylor = 2 * Delta ** 2 * (rng_v + R @ Bh.T)
        return absP @ (cross + taylor).sum(1)
    B = np.maximum(SAFETY * first + rounding, base)
    for _ in range(rounds):
        need = base + allowance(B)
        if np.all(need <= B):
            return B
        B = np.maximum(B, 1.25 * need)
    return None


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


def _output_tests(F, Y, Vhat, Bv, E, Ee, G, RND, floor, H, note, used) -> tuple:
    """Each output's residual norm, then every answer of every output within its tolerance
    (module doc): ``(largest norm ratio, largest residual over tolerance)``; raises
    :class:`~exactlearn.errors.ResidualsBeyondNoise`, then
    :class:`~exactlearn.errors.NoisierThanDeclared`, beyond 1."""
    N, m = Y.shape
    # the least-squares residuals are a projection of the output errors: with every output
    # within its eta, their weighted 2-norm is at most that of eta / eta_eff (sqrt(N) at most)
    # plus the W bounds' effect
    R = Y - F @ Vhat.T                                    # (N, m)
    excess, k = 0.0, int(used.sum())                      # the fit's own answers: a projection
    for j in range(m):
        e = Ee[used, j]
        allow = (float(np.linalg.norm(np.maximum(E[used, j], floor) / e))
                 + float(np.linalg.norm(SAFETY * G[used, j] / e))
                 + float(np.linalg.norm(RND[used, j] / e)))
        ratio = float(np.linalg.norm(R[used, j] / e)) / allow
        excess = max(excess, ratio)
        if ratio > 1:
            raise ResidualsBeyondNoise(
                f"outputs noisier than the declared eta (or a black box outside the model "
                f"class): the least-squares fit of output {j + 1} of {m} to its {k} answers "
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

