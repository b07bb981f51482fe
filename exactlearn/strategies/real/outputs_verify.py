"""``verify=N`` with ``outputs=m`` over the real field (docs:
explanation/biases.md#vector-outputs): fresh random queries, every output compared with the
certified heads within its tolerance."""

from __future__ import annotations

from exactlearn.model import Head
from exactlearn.noise import noise_bound
from exactlearn.strategies.real.certificate import verify_tokens
from exactlearn.strategies.real.evaluate import evaluate_with_bounds
from exactlearn.strategies.real.outputs import output_etas
from exactlearn.strategies.real.sensitivity import LO, rounding


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
    biased = any(h.biased for h in heads)
    Bcs = getattr(outcome, "constant_bounds", None) or [0] * m
    for _ in range(n):
        tokens = verify_tokens(rng, d, H, outcome.sigma)
        box(tokens)
        ys = records[-1][1]
        for j in range(m):
            row = [Head(h.W, h.v[j], h.u) for h in heads]
            f, grad, size = evaluate_with_bounds(
                row, tokens, K, outcome.W_bounds, [b[j] for b in outcome.v_bounds],
                outcome.u_bounds if biased else None, consts[j], Bcs[j])
            y = LO.convert(abs(ys[j]))
            tol = etas[j] + rel * y + grad + 2 * rounding(K, max(size, y))
            if LO.convert(abs(f - ys[j])) > tol:
                return False, (f"verification failed: a fresh random query disagrees with the "
                               f"certified heads on output {j + 1} of {m} beyond the tolerance")
    return True, None
