"""noise="auto" measures eta on the stable plan's own tokens at every scale it asks
(docs/explanation/real-field.md#eta-measured-from-the-box), not at fixed token norms."""
import hashlib
import os
import sys

import numpy as np
from gmpy2 import mpq

sys.path.insert(0, os.path.dirname(__file__))
from float_layers import NumpyAttention  # noqa: E402

from exactlearn import learn  # noqa: E402
from exactlearn.fields.real import Real  # noqa: E402
from exactlearn.model import Head, canonicalize  # noqa: E402
from exactlearn.strategies.real.learn import max_parameter_error  # noqa: E402


def _truth(layer):
    return canonicalize([Head(tuple(tuple(mpq(float(a)) for a in r) for r in W),
                              tuple(mpq(float(a)) for a in v)) for W, v in zip(layer.W, layer.v)])


def test_noise_auto_measures_at_the_plans_scale_where_large_tokens_are_noisier():
    """A float64 layer with small weights (the plan's scale sigma is then 48 or more: tokens
    of norm 12 to 500) whose answers carry an order-dependent error of 1e-9 |y| on queries
    with a token of norm above 40 only.  Measured at the fixed norms 1/2, 2 and 8 (at
    d52c45b), eta missed it and the run failed ("5 of 7 configurations could not be resolved
    ... outputs noisier than the declared eta"); measured on the plan's own tokens the run is
    certified and its bound covers the layer's own weights."""
    layer = NumpyAttention([(np.array([[0.0004, -0.0006], [0.0005, 0.0003]]), np.array([1.0, -0.5]))])

    def box(X):
        X = np.asarray(X, dtype=np.float64)
        y = float(layer(X))
        if np.sqrt((X ** 2).sum(axis=1)).max() <= 40:
            return y
        u = int.from_bytes(hashlib.sha256(X.tobytes()).digest()[:8], "big") / 2.0 ** 64
        return y + (2 * u - 1) * 1e-9 * max(abs(y), 1.0)

    K = Real(dps=30)
    res = learn(box, d=2, heads=1, field=K, tokens="float64", noise="auto", seed=0)
    assert res.status == "certified", res.error
    err, _ = max_parameter_error(res.heads, _truth(layer), K)
    assert err <= res.error_bound
    est = res.noise_estimated
    sigma = mpq(res.real_detail["query_scale"])
    assert sigma >= 48 and est["query_scale"] == str(sigma)
    assert {str(sigma * f) for f in (mpq(1), mpq(1, 2), mpq(2), mpq(1, 4), mpq(4))} <= set(est["scales"])
    # the eta at sigma sees the error of large tokens; the measurement before the probe did not
    assert float(est["noise"]) + float(est["noise_rel"]) >= 1e-9
    pre = est["preliminary"]
    assert float(pre["noise"]) + float(pre["noise_rel"]) < 1e-12
    assert res.noise_queries == est["queries"] > pre["queries"] > 0
