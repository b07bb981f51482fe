"""``noise="auto"`` with vector outputs (``learn(..., outputs=m)``; docs:
explanation/biases.md#vector-outputs, howto/torch-jax-layer.md section 3): eta is measured
once for all m outputs, from each output's own spreads, and the layer's whole output is
learned against the module's own weights (``true_heads``, computed apart from the learner).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from exactlearn import learn
from exactlearn.strategies.real.eta import envelope

torch = pytest.importorskip("torch")

from exactlearn.adapters import torch as ta                       # noqa: E402
from exactlearn.strategies.real.learn import max_parameter_error  # noqa: E402


def mha(d, H, seed, bias, dtype):
    torch.manual_seed(seed)
    m = torch.nn.MultiheadAttention(d, H, bias=bias, batch_first=True, dtype=dtype).eval()
    if bias:                            # torch initialises the biases to 0: draw them
        with torch.no_grad():
            m.in_proj_bias.normal_(0.0, 0.5)
            m.out_proj.bias.normal_(0.0, 0.5)
    return m


@pytest.mark.parametrize("dtype, bias, limit", [
    ("float64", False, 1e-12), ("float64", True, 1e-12),
    ("float32", False, 1e-4), ("float32", True, 1e-4)])
def test_the_whole_output_of_a_torch_layer_with_eta_measured(dtype, bias, limit):
    layer = mha(4, 2, 0, bias, getattr(torch, dtype))
    res = learn(ta.black_box(layer), d=4, heads=2, field="real", tokens=dtype, noise="auto",
                outputs=4, bias=bias, seed=0, retries=1)
    assert res.certified, res.error
    truth = ta.true_heads(layer).heads()
    err, _ = max_parameter_error(res.heads, truth, res.field)
    assert err <= res.error_bound and float(err) <= limit
    assert all(len(h.v) == 4 for h in res.heads)              # v_h = O_h V_h, 4 x 4
    est = res.noise_estimated
    assert "every one of the 4 outputs" in est["method"]
    assert 0 < est["queries"] == res.noise_queries < res.queries


def test_each_output_gives_its_own_spread():
    """A box whose second output alone is noisy under reorderings: the measured eta is that
    output's (a scalar view r . y would have averaged it with the quiet one)."""
    from exactlearn.fields import Real
    from exactlearn.oracle import OutputsView, Recorder
    from exactlearn.strategies.real.eta import measure_noise
    rnd = random.Random(0)

    def box(X):
        s = float(sum(t[0] for t in X))
        return [s, s + rnd.uniform(-1e-6, 1e-6)]
    K = Real(dps=30)
    view = OutputsView(box, 2, K, True, [1, 0])     # r . y sees the quiet output only
    est = measure_noise(Recorder(view, K, False), 2, 1, seed=0, view=view)
    assert est.max_spread > 1e-7
    quiet = measure_noise(Recorder(view, K, False), 2, 1, seed=0)
    assert quiet.max_spread == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_the_envelope_is_the_linear_programs_optimum(seed):
    """envelope() (upper-hull vertices) against scipy's linprog on the same problem."""
    from scipy.optimize import linprog
    rng = np.random.default_rng(seed)
    y = rng.uniform(0, 10, 300)
    s = rng.uniform(0, 1, 300) * (1 + y * rng.uniform(0, 0.5))
    a, r = envelope(y, s)
    assert np.all(a + r * y >= s * (1 - 1e-12))
    lp = linprog([1.0, float(y.mean())], A_ub=-np.stack([np.ones_like(y), y], axis=1), b_ub=-s,
                 bounds=[(0, None), (0, None)], method="highs")
    assert lp.status == 0
    assert a + r * y.mean() == pytest.approx(lp.fun, rel=1e-9)


def test_estimate_noise_takes_a_vector_box():
    """estimate_noise(..., outputs=m) on a torch layer's whole output: every query asked once,
    one envelope over the m outputs; on c2c376c a vector answer was not a number."""
    from exactlearn import estimate_noise
    layer = mha(4, 2, 0, True, torch.float32)
    box = ta.black_box(layer)
    calls = []

    def counted(X):
        calls.append(1)
        return box(X)
    est = estimate_noise(counted, d=4, heads=2, tokens="float32", seed=0, outputs=4)
    assert est.queries == len(calls) > 0
    assert 0 < est.noise < 1e-2 and "every one of the 4 outputs" in est.method
    with pytest.raises(ValueError, match="outputs must be an integer >= 1"):
        estimate_noise(counted, d=4, tokens="float32", outputs=0)
