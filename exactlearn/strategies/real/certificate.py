"""The real field's certificate: within tolerance, never exact (docs: explanation/real-field.md,
"Certificate"; docs: explanation/algorithm.md#what-a-failure-means).

Every observation is recomputed from the recovered heads
(:func:`~exactlearn.strategies.real.evaluate.evaluate_with_bounds`) and must agree
within ``eta_q + sum |df/dW| B_W + sum |df/dv| B_v + rounding`` -- the noise plus the
effect of the parameter uncertainty; a miss is
:class:`~exactlearn.errors.NoisierThanDeclared` ("outputs noisier than the declared
eta").  The result says ``"certificate": "within tolerance"`` (the learner's JSON
``"exact": false``) and reports the largest residual/tolerance ratio.

**The residual test** (:func:`residual_bounds`).  That tolerance lets each observation move
by the parameter bounds entry by entry, so a model of too few heads -- two heads closer than
one configuration resolves, fitted as one with bounds to match -- can pass it.  So the
certified model's residuals must also stay within what the declared eta allows: to first
order the residual ``f(q) - y_q = sum_p ((J S)_qp - [p = q]) eps_p`` (``J`` the model's
gradient at q, ``S`` the parameters' sensitivities) is a linear functional of the output
errors, and its worst case ``b_q = sum_p |(J S)_qp - [p = q]| eta_p`` keeps the cancellations
between parameters.  A residual beyond ``SAFETY b_q``, plus ``SECOND_ORDER`` of the
entry-by-entry effect, the solves' rounding and the evaluation's, is
:class:`~exactlearn.errors.ResidualsBeyondNoise`: a box noisier than declared, or more heads
than were fitted -- with a head bound the learner then fits more heads
(:func:`exactlearn.strategies.real.run`).  Where a residual exceeds its eta, ``b_q`` is formed
for that observation (``N P`` work).  The head count is tested apart
(:func:`least_squares_test`): a least-squares refit of every observation whose misfit no model
of that many heads could avoid (sum of squares, Chebyshev bound) fails the same way.

The reported bound of each parameter is ``SAFETY B + r = 2 B + r``: ``B`` its first-order
bound, the factor 2 covering second-order terms (below ``1e-3`` of the first-order ones,
since the analysis fails when a relative first-order bound exceeds ``1e-3``), and ``r``
the rounding of the final solves (:mod:`~exactlearn.strategies.real.solve`).
``error_bound`` is the largest over all heads and entries.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field as dc_field

import numpy as np
from gmpy2 import mpq

from exactlearn.errors import FieldError, NoisierThanDeclared, ResidualsBeyondNoise
from exactlearn.strategies.real.evaluate import evaluate_with_bounds, evaluate_with_gradient
from exactlearn.strategies.real.lsq import refine
from exactlearn.strategies.real.sensitivity import LO, rounding
from exactlearn.strategies.real.stable_messages import plural
from exactlearn.strategies.real.stable_minimax import chebyshev_bound

SAFETY = 2               # reported bound = SAFETY * first-order bound + rounding
#: the residual test's allowance for second-order terms, as a share of the entry-by-entry
#: first-order effect of the parameter errors (those terms are below PAPER_LINEAR_LIMIT -- 1e-3,
#: the stable plan's STABLE_LINEAR_LIMIT 1e-2 -- of the first-order ones, or the analysis fails)
SECOND_ORDER = 0.02


@dataclass
class RealOutcome:
    """What :func:`~exactlearn.strategies.real.learn.run_real` adds to a learning result."""

    sigma: object
    probe_queries: int
    error_bound: object
    head_bounds: list
    eta: object
    detail: dict
    snap: dict | None = None
    W_bounds: list = dc_field(default_factory=list, repr=False)   # [head][row][col]
    v_bounds: list = dc_field(default_factory=list, repr=False)   # [head][entry]
    etas: dict = dc_field(default_factory=dict, repr=False)       # observation index -> eta_q
    #: with biases (docs/explanation/biases.md): each head's u bounds, the constant, its bound
    u_bounds: list | None = dc_field(default=None, repr=False)    # [head][entry]
    constant: object = None
    c_bound: object = 0


@dataclass
class Certificate:
    """What :func:`certify_within_tolerance` found."""

    heads: tuple
    W_bounds: list
    v_bounds: list
    etas: dict
    worst_ratio: object
    head_bounds: list
    error_bound: object
    rounding_size: object           # the size of terms the rounding allowance is taken at
    residual_ratio: object = None   # largest residual over what eta allows (residual test)


def certify_within_tolerance(raw, obs, start, K, etas, eta, H) -> Certificate:
    """Certify the heads of ``raw`` (:func:`~exactlearn.strategies.real.solve.solve_heads`)
    against the observations ``obs`` (indices from ``start``, bounds ``etas``), after
    recomputing the rounding allowance from the recovered heads."""
    heads = tuple(t[0] for t in raw)

    def head_bounds(et):
        BW = [[[SAFETY * s.bound(et) + rr for s, rr in zip(srow, rrow)]
               for srow, rrow in zip(SW, RW)] for _, SW, RW, _, _ in raw]
        Bv = [[SAFETY * s.bound(et) + rr for s, rr in zip(Sv, Rv)] for _, _, _, Sv, Rv in raw]
        return BW, Bv

    BW, Bv = head_bounds(etas)
    Ymax = LO.zero
    for tokens, _ in obs:
        Ymax = max(Ymax, LO.convert(evaluate_with_bounds(heads, tokens, K)[2]))
    Y0 = max(LO.convert(abs(y)) for _, y in obs) * H
    if Ymax > Y0:
        etas = {q: LO.convert(eta) + rounding(K, Ymax) for q in etas}
        BW, Bv = head_bounds(etas)
    worst_ratio = LO.zero
    for i, (tokens, y) in enumerate(obs):
        f, grad, size = evaluate_with_bounds(heads, tokens, K, BW, Bv)
        tol_q = etas[start + i] + grad + rounding(K, size)
        ratio = LO.convert(abs(f - y)) / tol_q
        worst_ratio = max(worst_ratio, ratio)
        if ratio > 1:
            raise NoisierThanDeclared(
                f"outputs noisier than the declared eta (or a black box outside the model "
                f"class): the recovered heads miss an observation of length {len(tokens)} by "
                f"{K.ctx.nstr(abs(f - y), 3)} > tolerance {LO.nstr(tol_q, 3)} (noise "
                f"{LO.nstr(etas[start + i], 3)} + parameter uncertainty {LO.nstr(grad, 3)})")
    resid_ratio = _residual_test(raw, obs, start, K, etas)
    head_b = [max([x for row in bw for x in row] + list(bv)) for bw, bv in zip(BW, Bv)]
    return Certificate(heads, BW, Bv, etas, worst_ratio, head_b, max(head_b, default=LO.zero),
                       max(Ymax, Y0), resid_ratio)


def residual_bounds(J, G, eta_hat, rows=None):
    """``(b, T)`` for the observations ``rows`` (default: all; ``J`` has their gradients):
    ``b_q``, the first-order worst case of the residual ``sum_p ((J G)_qp - [p = q]) eps_p``
    over output errors ``|eps_p| <= eta_hat_p`` (module doc), with the float64 rounding of
    forming it added; and ``T_q = sum_i |J_qi| sum_p |G_ip| eta_hat_p``, the entry-by-entry
    effect of the first-order parameter bounds.

    ``J`` is n x P (the model's gradient at each observation of ``rows``), ``G`` P x N (each
    parameter's sensitivity to each observation), ``eta_hat`` the N observation bounds (in any
    common unit: the results are in that unit).  The work is ``n N P``.

    >>> J = np.array([[1.0], [1.0]]); G = np.array([[0.5, 0.5]])     # the mean of two outputs
    >>> b, T = residual_bounds(J, G, np.array([1.0, 1.0]))
    >>> [round(float(x), 9) for x in b], [round(float(x), 9) for x in T]
    ([1.0, 1.0], [1.0, 1.0])
    """
    n, P = J.shape
    N = G.shape[1]
    rows = np.arange(n) if rows is None else np.asarray(rows)
    M = J @ G
    M[np.arange(n), rows] -= 1.0
    b = np.abs(M) @ eta_hat
    T = np.abs(J) @ (np.abs(G) @ eta_hat)
    # each entry of J G is a sum of P products, each |M| @ eta_hat a sum of N terms
    return b + 4 * (P + N + 2) * 2.0 ** -52 * (T + eta_hat[rows]), T


def _residual_test(raw, obs, start, K, etas):
    """The residual tests (module doc) of the paper plan's heads ``raw`` on ``obs``; returns the
    largest residual over its allowance."""
    heads = [t[0] for t in raw]
    N = len(obs)
    sens = [s for _, SW, _, Sv, _ in raw for s in [x for row in SW for x in row] + list(Sv)]
    rnd = np.array([float(r) for _, _, RW, _, Rv in raw for r in [x for row in RW for x in row]
                    + list(Rv)])
    G = np.zeros((len(sens), N))
    for i, s in enumerate(sens):
        for q, x in s.c.items():
            G[i, q - start] = float(x)
    eta_list = [etas[start + i] for i in range(N)]
    least_squares_test(heads, obs, K, eta_list)
    return residual_test(heads, obs, K, G, eta_list, rnd)


def residual_test(heads, obs, K, G, etas, rnd) -> object:
    """Every observation ``obs[i] = (tokens, y)`` recomputed from ``heads`` within what the
    declared noise allows (module doc): ``eta_i`` or, where larger, the first-order bound
    ``SAFETY b + SECOND_ORDER T`` of :func:`residual_bounds` (formed only for the observations
    beyond ``eta_i``), plus the parameters' rounding ``rnd`` (one per parameter, in the order
    of :func:`~exactlearn.strategies.real.evaluate.evaluate_with_gradient`) and the
    evaluation's.  ``G`` (P x N) holds the parameters' sensitivities, ``etas`` the N bounds.
    Returns the largest residual over its allowance; raises
    :class:`~exactlearn.errors.ResidualsBeyondNoise` beyond 1."""
    unit = max(LO.convert(e) for e in etas)
    eta_hat = np.array([float(LO.convert(e) / unit) if unit else 0.0 for e in etas])
    worst = LO.zero
    for i, (tokens, y) in enumerate(obs):
        f, g, size = evaluate_with_gradient(heads, tokens, K)
        g = np.array(g)
        base = LO.convert(float(np.abs(g) @ rnd)) + 2 * rounding(K, size)
        allow = LO.convert(etas[i]) + base
        r = LO.convert(abs(f - y))
        if r > allow:
            b, T = residual_bounds(g[None, :], G, eta_hat, [i])
            if np.isfinite(b[0]) and np.isfinite(T[0]):
                allow = max(allow, unit * LO.convert(SAFETY * b[0] + SECOND_ORDER * T[0]) + base)
            else:                       # sensitivities beyond float64: no bound to test against
                allow = LO.inf
        ratio = r / allow if allow else (LO.zero if r == 0 else LO.inf)
        worst = max(worst, ratio)
        if ratio > 1:
            raise ResidualsBeyondNoise(
                f"outputs noisier than the declared eta (or a black box outside the model class, "
                f"or more heads than {len(heads)}): the recovered model misses an observation of "
                f"length {len(tokens)} by {K.ctx.nstr(abs(f - y), 3)}, {LO.nstr(ratio, 3)} times "
                f"what the declared eta allows ({LO.nstr(allow, 3)}: eta, or the noise propagated "
                f"through the fit to first order)", heads=len(heads))
    return worst


def least_squares_test(heads, obs, K, etas) -> object:
    """The least-squares test (module doc): ``heads`` refitted to every observation at once by
    Gauss--Newton (:func:`_refit`: residuals in the field's precision, steps in float64), then
    a weighted residual sum of squares above the number of observations, or a Chebyshev bound
    (:func:`~exactlearn.strategies.real.stable_minimax.chebyshev_bound`) above ``1 +
    SECOND_ORDER``, is :class:`~exactlearn.errors.ResidualsBeyondNoise`: no model of that many
    heads keeps every output within its eta.  Returns the sum-of-squares ratio, or None when
    the refit cannot be formed in float64 (residuals or gradients out of its range)."""
    got = _refit(heads, obs, K, etas)
    if got is None:
        return None
    s, Js, rr = got
    m, N = len(heads), len(obs)
    excess = float(rr @ rr) / N
    beyond_noise(m, N, excess,
                 lambda: (chebyshev_bound(Js, s, limit=1 + SECOND_ORDER) if np.max(np.abs(s)) > 1
                          else 0.0),
                 f"the least-squares fit of all {N} observations with {plural(m)} leaves")
    return excess


def beyond_noise(m, N, excess, chebyshev, fit):
    """Both plans' tests of the declared noise on a least-squares fit of ``m`` heads to all
    ``N`` observations (module doc): a weighted residual sum of squares ``excess`` times ``N``
    with ``excess > 1``, or a Chebyshev bound (``chebyshev()``, asked only then; None: not
    formed) above ``1 + SECOND_ORDER``, is :class:`~exactlearn.errors.ResidualsBeyondNoise`
    (``fit`` names the fit in the message).

    >>> beyond_noise(2, 10, 1.5, lambda: None, "the fit leaves")
    Traceback (most recent call last):
    ...
    exactlearn.errors.ResidualsBeyondNoise: outputs noisier than the declared eta (or a black box outside the model class, or more heads than 2): the fit leaves a weighted residual sum of squares 1.5 times their number, at most 1 when every output is within its eta
    """
    why = (f"outputs noisier than the declared eta (or a black box outside the model class, or "
           f"more heads than {m}): ")
    if excess > 1:
        raise ResidualsBeyondNoise(
            f"{why}{fit} a weighted residual sum of squares {excess:.3g} times their number, at "
            f"most 1 when every output is within its eta", heads=m)
    bound = chebyshev()
    if bound is not None and bound > 1 + SECOND_ORDER:
        raise ResidualsBeyondNoise(
            f"{why}no model of {plural(m)} keeps every output within its eta -- about the "
            f"least-squares fit of all {N} observations the smallest largest residual over its "
            f"eta is at least {bound:.3g}", heads=m)


REFIT_STEPS = 8          # Gauss--Newton steps of :func:`_refit`
REFIT_SETTLED = 1e-6     # ... until a step lowers the sum of squares by at most this share


def _refit(heads, obs, K, etas):
    """``(s, Js, rr)`` at the weighted least-squares fit of ``heads`` to ``obs``: the residuals
    over their eta (computed in the field, then rounded to float64), the gradient over eta (in
    a common unit of the parameters' steps) and the linear least-squares residual about that
    point; None when they leave the float64 range or float64 cannot form ``rr`` to 1e-2 (an
    ill-conditioned fit far above the noise, e.g. an exact box at high precision).

    The fit is :func:`~exactlearn.strategies.real.lsq.refine` (the parameters in the field,
    each Gauss--Newton step a float64 least-squares solve) until a step lowers the sum of
    squares by at most ``REFIT_SETTLED`` of it (or raises it), or ``REFIT_STEPS`` steps; the
    last point before a step that raised the sum of squares is kept (float64 rounding or the
    nonlinearity made that step worse)."""
    ctx = K.ctx
    unit = max(LO.convert(e) for e in etas)
    eta_hat = np.array([float(LO.convert(e) / unit) for e in etas])
    d = len(heads[0].v)
    theta = [x for h in heads for x in [a for row in h.W for a in row] + list(h.v)]

    def rebuild(th):
        per = d * d + d
        out = []
        for k in range(len(heads)):
            p = th[k * per:(k + 1) * per]
            out.append(type(heads[k])(tuple(tuple(p[r * d:(r + 1) * d]) for r in range(d)),
                                      tuple(p[d * d:])))
        return out

    def scaled(th):
        s, J = [], []
        for (tokens, y), e in zip(obs, etas):
            f, g, _ = evaluate_with_gradient(rebuild(th), tokens, K)
            s.append(float((y - f) / ctx.mpf(LO.convert(e))))
            J.append(g)
        s, J = np.array(s), np.array(J) / eta_hat[:, None]
        return (s, J) if np.all(np.isfinite(s)) and np.all(np.isfinite(J)) else (None, None)

    seen = {}            # the points evaluated, in order (parameters as a tuple): (s, Js)

    def at(th):
        if tuple(th) not in seen:
            seen[tuple(th)] = scaled(th)
        return seen[tuple(th)]

    mpunit = ctx.mpf(unit)
    before = []          # the sum of squares at the point the last step was taken from

    def step(th):
        s, J = at(th)
        if s is None or (before and before[-1] - float(s @ s) <= REFIT_SETTLED * before[-1]):
            return [0] * len(th)     # outside float64, settled or no decrease: refine stops
        before.append(float(s @ s))
        x = np.linalg.lstsq(J, s, rcond=None)[0]          # in units of `unit`
        return [-ctx.mpf(float(v)) * mpunit for v in x]

    if at(theta)[0] is None:
        return None
    at(refine(ctx, step, theta, goal=0, steps=REFIT_STEPS).theta)
    points = iter(seen.values())         # in the order refine reached them
    s, Js = next(points)
    for s1, J1 in points:                 # each kept unless it raised the sum of squares
        if s1 is None or float(s1 @ s1) > float(s @ s) * (1 + 1e-9):
            break
        s, Js = s1, J1
    # the linear least-squares residual about that point: its smallest sum of squares to
    # first order, trusted only when float64 forms it to within 1e-2 of eta
    x = np.linalg.lstsq(Js, s, rcond=None)[0]
    rr = s - Js @ x
    if np.max(8 * 2.0 ** -52 * (np.abs(s) + np.abs(Js) @ np.abs(x))) > 1e-2:
        return None
    return s, Js, rr


#: a fresh verification token's entries are ``sigma`` times multiples of ``2^-VERIFY_BITS``
VERIFY_BITS = 10


def verify_tokens(rng, d: int, H: int, sigma) -> list:
    """One fresh verification query at the plan's own scale (docs:
    explanation/real-field.md): 1 to ``2H + 1`` tokens, each entry ``sigma s k / 2^10`` with
    ``k`` uniform in ``[-2^10, 2^10]`` and ``s = 2^-floor(log2 sqrt(d / 3))`` (about
    ``sqrt(3 / d)``), so that a token's norm is about ``sigma`` like the plan's (its scores
    then of the order of 1, where every entry of W moves the answer).  Entries are dyadic: exact in
    float32 and float64.  (The query range R, thousands of times larger, saturated every
    softmax: a box whose W was off by any positive factor passed.)"""
    shift = VERIFY_BITS + max(0, int(math.floor(math.log2(math.sqrt(d / 3)))))
    step = sigma * mpq(1, 2 ** shift)
    top = 2 ** VERIFY_BITS
    length = rng.randint(1, 2 * H + 1)
    return [tuple(step * rng.randint(-top, top) for _ in range(d)) for _ in range(length)]


def verify_real(oracle, outcome, heads, d, H, K, convert, rng, R, n) -> tuple:
    """``n`` fresh random queries (:func:`verify_tokens`, at the plan's scale ``sigma``; the
    query range ``R`` is not used) compared with the heads within the certificate's
    tolerance."""
    eta = LO.convert(outcome.eta)
    for _ in range(n):
        tokens = verify_tokens(rng, d, H, outcome.sigma)
        y = oracle(tokens)
        try:
            if convert:                 # a float box's answer is its exact binary value
                y = K.from_output(y)
        except (ValueError, TypeError, FieldError) as exc:   # nan, a string, a list: as for a
            return False, (f"verification failed: a fresh random query could not be "  # vector
                           f"compared ({exc})")
        biased = outcome.u_bounds is not None
        if not within_tolerance(heads, tokens, y, K, eta, outcome.W_bounds, outcome.v_bounds,
                                outcome.u_bounds, outcome.constant if biased else 0,
                                outcome.c_bound):
            return False, ("verification failed: a fresh random query disagrees with the "
                           "certified heads beyond the tolerance")
    return True, None


def within_tolerance(heads, tokens, y, K, eta, BW, Bv, Bu, constant, Bc) -> bool:
    """One fresh answer ``y`` against the heads: ``|f - y|`` at most ``eta`` plus the
    first-order effect of the parameter bounds (``BW``, ``Bv``, ``Bu``, ``Bc``:
    :func:`~exactlearn.strategies.real.evaluate.evaluate_with_bounds`) plus twice the rounding
    of terms of the larger of their size and ``|y|``."""
    f, grad, size = evaluate_with_bounds(heads, tokens, K, BW, Bv, Bu, constant, Bc)
    return LO.convert(abs(f - y)) <= eta + grad + 2 * rounding(K, max(size, LO.convert(abs(y))))
