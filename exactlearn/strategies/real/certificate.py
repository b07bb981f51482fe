"""The real field's certificate: within tolerance, never exact (docs: explanation/real-field.md,
"Certificate"; docs: explanation/algorithm.md#what-a-failure-means).

Every observation is recomputed from the recovered heads
(:func:`~exactlearn.strategies.real.evaluate.evaluate_with_bounds`) and must agree
within ``eta_q + sum |df/dW| B_W + sum |df/dv| B_v + rounding`` -- the noise plus the
effect of the parameter uncertainty; a miss is
:class:`~exactlearn.errors.NoisierThanDeclared` ("outputs noisier than the declared
eta").  The result says ``"certificate": "within tolerance"`` (the learner's JSON
``"exact": false``) and reports the largest residual/tolerance ratio.

The reported bound of each parameter is ``SAFETY B + r = 2 B + r``: ``B`` its first-order
bound, the factor 2 covering second-order terms (below ``1e-3`` of the first-order ones,
since the analysis fails when a relative first-order bound exceeds ``1e-3``), and ``r``
the rounding of the final solves (:mod:`~exactlearn.strategies.real.solve`).
``error_bound`` is the largest over all heads and entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field

from exactlearn.errors import NoisierThanDeclared
from exactlearn.strategies.real.evaluate import evaluate_with_bounds
from exactlearn.strategies.real.sensitivity import LO, rounding

SAFETY = 2               # reported bound = SAFETY * first-order bound + rounding


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
    head_b = [max([x for row in bw for x in row] + list(bv)) for bw, bv in zip(BW, Bv)]
    return Certificate(heads, BW, Bv, etas, worst_ratio, head_b, max(head_b, default=LO.zero),
                       max(Ymax, Y0))


def verify_real(oracle, outcome, heads, d, H, K, convert, rng, R, n) -> tuple:
    """``n`` fresh random queries (length 1..2H+1, entries in ``sigma [-R, R]``) compared with
    the heads within the certificate's tolerance."""
    sigma = outcome.sigma
    eta = LO.convert(outcome.eta)
    for _ in range(n):
        length = rng.randint(1, 2 * H + 1)
        tokens = [tuple(sigma * rng.randint(-R, R) for _ in range(d)) for _ in range(length)]
        y = oracle(tokens)
        if convert:
            y = K(y)
        f, grad, size = evaluate_with_bounds(heads, tokens, K, outcome.W_bounds, outcome.v_bounds)
        tol = eta + grad + 2 * rounding(K, max(size, LO.convert(abs(y))))
        if LO.convert(abs(f - y)) > tol:
            return False, ("verification failed: a fresh random query disagrees with the "
                           "certified heads beyond the tolerance")
    return True, None
