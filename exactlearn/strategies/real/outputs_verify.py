"""``verify=N`` with ``outputs=m`` over the real field (docs:
explanation/biases.md#vector-outputs): fresh random queries, every output compared with the
certified heads within its tolerance."""

from __future__ import annotations

from exactlearn.model import Head
from exactlearn.noise import noise_bound
from exactlearn.strategies.real.certificate import verify_tokens, within_tolerance
from exactlearn.strategies.real.outputs import output_etas
from exactlearn.strategies.real.sensitivity import LO


def verify_outputs_real(box, records, heads, d: int, outcome, K, m: int, noise, noise_rel, rng,
                        R, n: int) -> tuple:
    """``verify=n`` with ``outputs=m`` over the real field (docs:
    explanation/biases.md#vector-outputs): ``n`` fresh random queries at the plan's scale
    (:func:`~exactlearn.strategies.real.certificate.verify_tokens`, as for a scalar box; the
    query range ``R`` is not used), asked of ``box``
    (which records ``(tokens, answers)`` in ``records``); every output ``j`` must be within
    ``eta_j + noise_rel |y_j|`` plus the first-order effect of the certified W, u, v and
    constant bounds plus rounding of the value its readouts give.  Returns ``(True, None)``
    or ``(False, message)``."""
    H = len(heads)
    etas = [LO.convert(e) for e in output_etas(K, noise, m)]
    rel = LO.zero if noise_rel is None else LO.convert(noise_bound(K, noise_rel, "noise_rel"))
    constant = getattr(heads, "constant", 0)
    consts = constant if isinstance(constant, tuple) else (0,) * m
    Bu = outcome.u_bounds if any(h.biased for h in heads) else None
    Bcs = getattr(outcome, "constant_bounds", None) or [0] * m
    # output j as a scalar model: each head's readout row j, its bounds, its constant
    rows = [([Head(h.W, h.v[j], h.u) for h in heads], [b[j] for b in outcome.v_bounds])
            for j in range(m)]
    for _ in range(n):
        tokens = verify_tokens(rng, d, H, outcome.sigma)
        box(tokens)
        ys = records[-1][1]
        for j, (row, Bv) in enumerate(rows):
            eta = etas[j] + rel * LO.convert(abs(ys[j]))
            if not within_tolerance(row, tokens, ys[j], K, eta, outcome.W_bounds, Bv, Bu,
                                    consts[j], Bcs[j]):
                return False, (f"verification failed: a fresh random query disagrees with the "
                               f"certified heads on output {j + 1} of {m} beyond the tolerance")
    return True, None
