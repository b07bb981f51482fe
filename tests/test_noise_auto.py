"""eta measured from the box: ``estimate_noise`` and ``learn(noise="auto")`` (issue 22 part 4;
docs "How-to: learn a float black box"; exactlearn.strategies.real.eta).

The boxes are the numpy layers of tests/float_layers.py.  The true error of an answer is
measured against the same weights evaluated in mpmath at 40 digits (a model's Oracle over
the real field, not the learner), and learned heads are compared with the layer's own exact
weights.
"""

from __future__ import annotations

import hashlib
import json
import random

import numpy as np
import pytest
from gmpy2 import mpq

from exactlearn import MultiHeadAttention, Oracle, Rational, estimate_noise, learn
from exactlearn.cli.main import main
from exactlearn.fields.real import Real
from exactlearn.model import Head, canonicalize
from exactlearn.strategies.real.eta import SAFETY, shape_lengths
from exactlearn.strategies.real.ratio import dyadic

from float_layers import BatchedAttention, NumpyAttention


def truth(box):
    return canonicalize([Head(tuple(tuple(mpq(a) for a in r) for r in W), tuple(mpq(a) for a in v))
                         for W, v in box.exact_heads()])


def max_error(K, heads, true):
    assert len(heads) == len(true)
    return max(float(abs(K(a) - K(b))) for h, g in zip(heads, true)
               for a, b in zip([x for r in h.W for x in r] + list(h.v),
                               [x for r in g.W for x in r] + list(g.v)))


def true_errors(layer, d, H, n, seed):
    """``(|error|, |y|)`` of ``layer``'s answers on ``n`` random queries of the stable plan's
    shapes at token norms 1/2 .. 8, against the exact weights evaluated at 40 digits."""
    K = Real(dps=40)
    exact = Oracle(MultiHeadAttention(layer.exact_heads()), K)
    rnd = random.Random(seed)
    shapes = shape_lengths(H)
    out = []
    for q in range(n):
        k, m = shapes[q % len(shapes)]
        f = mpq(2) ** rnd.choice([-1, 1, 3])
        x = tuple(f * a for a in dyadic([rnd.gauss(0, 0.5) for _ in range(d)]))
        a = tuple(p + f * b for p, b in zip(x, dyadic([rnd.gauss(0, 0.5) for _ in range(d)])))
        toks = [a] * k + [x] * m
        rest = toks[:-1]
        rnd.shuffle(rest)
        toks = rest + [x]
        y = layer(np.array([[float(t) for t in row] for row in toks], dtype=layer.dtype))
        yt = exact(toks)
        out.append((float(abs(K(mpq(float(y))) - yt)), abs(float(yt))))
    return out


# -- estimate_noise: within a sane factor of the true rounding ----------------------------
@pytest.mark.parametrize("dtype,seed", [(np.float64, 0), (np.float64, 1), (np.float32, 0)])
def test_estimate_covers_the_true_rounding_within_a_sane_factor(dtype, seed):
    layer = NumpyAttention.from_seed(4, 2, seed, dtype=dtype)
    est = estimate_noise(layer, d=4, heads=2, tokens=np.dtype(dtype).name, seed=seed)
    assert est.queries == layer.calls and est.max_length == 257 and est.safety == SAFETY
    errs = true_errors(layer, 4, 2, 80, seed + 7)
    worst_err = max(e for e, _ in errs)
    assert worst_err > 0                                 # the layer does round
    etas = [est.noise + est.noise_rel * y for _, y in errs]
    assert all(e <= eta for (e, _), eta in zip(errs, etas))       # covers every answer
    assert max(etas) <= 2000 * worst_err                 # and is not absurdly loose
    # the measured part alone (before the safety multiple) is of the size of the rounding
    raw = max(est.envelope_abs + est.envelope_rel * y for _, y in errs)
    assert worst_err / 20 <= raw <= 200 * worst_err


def test_estimate_of_an_order_blind_box_is_zero_and_counted():
    calls = []
    est = estimate_noise(lambda X: calls.append(1) or 0.75, d=3, heads=1, seed=0)
    assert (est.noise, est.noise_rel, est.max_spread) == (0.0, 0.0, 0.0)
    assert est.queries == len(calls) == est.groups * (1 + est.permutations)


@pytest.mark.parametrize("kw,msg", [
    (dict(d=0), "d must be an integer >= 1"),
    (dict(d=2, permutations=0), "permutations must be an integer >= 1"),
    (dict(d=2, scales=[3]), "powers of two"),
    (dict(d=2, field=Rational()), "real field"),
])
def test_estimate_noise_refuses_bad_arguments_before_any_query(kw, msg):
    calls = []
    with pytest.raises(ValueError, match=msg) as exc:
        estimate_noise(lambda X: calls.append(1) or 0.5, **kw)
    assert "\n" not in str(exc.value) and calls == []


@pytest.mark.parametrize("kw,msg", [
    (dict(d=10 ** 7), "largest dimension"),            # was a MemoryError after ~20 s
    (dict(d=2, heads=10 ** 7), "largest head count"),  # hung in ratio_nodes
    (dict(d=2, draws=10 ** 9), "MAX_PLAN_QUERIES"),    # hung building 10^11 queries
    (dict(d=2, permutations=10 ** 9), "MAX_PLAN_QUERIES"),
    (dict(d=2, safety=10 ** 400), "MAX_SAFETY"),       # OverflowError after 192 queries
])
def test_estimate_noise_sizes_are_checked_before_anything_is_built(kw, msg):
    calls = []
    with pytest.raises(ValueError, match=msg) as exc:
        estimate_noise(lambda X: calls.append(1) or 0.5, **kw)
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 200 and calls == []


# -- learn(noise="auto") -----------------------------------------------------------------
def test_learn_noise_auto_certifies_a_float64_layer_with_a_covering_bound_and_counts_all():
    layer = BatchedAttention.from_seed(4, 2, 3)
    K = Real(dps=30)
    res = learn(layer, d=4, heads=2, field=K, tokens="float64", noise="auto", seed=3)
    assert res.status == "certified", res.error
    err = max_error(K, res.heads, truth(layer))
    assert err <= float(res.error_bound) and err < 1e-12
    assert res.queries == layer.calls                      # measuring queries included
    assert res.noise_queries == res.noise_estimated["queries"] > 0
    assert res.learning_queries == res.queries - res.noise_queries
    est = res.noise_estimated
    assert est["max_length"] == 257 and est["safety"] == SAFETY and "permutation" in est["method"]
    assert res.real_detail["eta"] == f"{float(est['noise']):.6g}"
    out = res.to_json()
    assert out["noise_queries"] == res.noise_queries and out["noise_estimated"] == est
    json.dumps(out)


def test_a_box_30x_noisier_than_its_permutation_spread_is_never_certified_wrongly():
    """Pseudo-noise keyed on the multiset of the non-final tokens and the final token: the
    same for every order, so permutations cannot see it, 30 times the layer's rounding."""
    K = Real(dps=30)
    for seed in (1,):
        layer = NumpyAttention.from_seed(4, 2, seed)

        def box(X, layer=layer):
            y = float(layer(X))
            key = repr((sorted(map(tuple, X[:-1].tolist())), tuple(X[-1].tolist())))
            u = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0 ** 64
            return y + (2 * u - 1) * 30 * 1.5e-15 * max(abs(y), 1.0)   # rounding: 1.5e-15 |y|

        calls = []
        counted = lambda X, box=box: calls.append(1) or box(X)
        res = learn(counted, d=4, heads=2, field=K, tokens="float64", noise="auto", seed=seed)
        assert res.queries == len(calls)
        if res.status == "certified":
            assert max_error(K, res.heads, truth(layer)) <= float(res.error_bound)
        else:
            assert "noisier than" in res.error or "could not be resolved" in res.error, res.error


@pytest.mark.parametrize("kw,msg", [
    (dict(noise="automatic"), "noise must be a number >= 0 or 'auto'"),
    (dict(noise="eta"), "noise must be a number >= 0 or 'auto'"),
    (dict(noise="auto", noise_rel=1e-15), "measures noise_rel too"),
    (dict(noise="auto", plan="paper", tokens="exact"), "stable plan"),
])
def test_bad_noise_strings_are_refused_in_one_line_before_any_query(kw, msg):
    layer = NumpyAttention.from_seed(2, 1, 0)
    opts = dict(field=Real(dps=30), tokens="float64", seed=0)
    opts.update(kw)
    with pytest.raises(ValueError, match=msg) as exc:
        learn(layer, d=2, heads=1, **opts)
    assert "\n" not in str(exc.value) and layer.calls == 0


def test_noise_auto_over_an_exact_field_is_refused():
    model = MultiHeadAttention([([[1]], [2])])
    with pytest.raises(ValueError, match="real field, not the rational field"):
        learn(Oracle(model, Rational()), d=1, heads=1, noise="auto")


# -- the command line: --declared-noise auto|ETA (--noise still injects noise) --------------
MODEL = {"format": "exactlearn.mha/1", "d": 2,
         "heads": [{"W": [["1", "0"], ["0", "-1"]], "v": ["1", "2"]},
                   {"W": [["0", "1/2"], ["1", "0"]], "v": ["-1", "1/2"]}]}


def test_cli_declared_noise_auto_measures_injected_noise_and_counts_it(tmp_path, capsys):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(MODEL))
    rc = main(["learn", "--model", str(path), "--field", "real", "--dps", "30", "--plan",
               "stable", "--heads", "2", "--noise", "1e-12", "--declared-noise", "auto",
               "--seed", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["status"] == "certified"
    est = out["noise_estimated"]
    # the injected noise is uniform in [-1e-12, 1e-12] per query: spreads of about 1e-12
    assert 1e-12 <= float(est["noise"]) + float(est["noise_rel"]) * 10 <= 1e-9
    assert out["noise_queries"] == est["queries"] > 0
    assert out["learning_queries"] == out["queries"] - out["noise_queries"]
    assert float(out["model_error"]) <= float(out["error_bound"])


@pytest.mark.parametrize("extra,msg", [
    (["--field", "real", "--declared-noise", "auto"], "--declared-noise auto needs --plan stable"),
    (["--field", "real", "--plan", "stable", "--declared-noise", "lots"], "--declared-noise: "),
    (["--declared-noise", "1e-3"], "--declared-noise needs --field real"),
    (["--field", "real", "--plan", "stable", "--declared-noise", "auto", "--noise-rel", "1e-15"],
     "drop --noise-rel"),
])
def test_cli_bad_declared_noise_is_bad_input(tmp_path, capsys, extra, msg):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(MODEL))
    rc = main(["learn", "--model", str(path), "--heads", "2", "--seed", "1"] + extra)
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1, err


def test_a_box_that_fails_while_eta_is_measured_fails_explicitly_its_queries_counted():
    calls = []
    box = lambda X: calls.append(1) or (float("nan") if len(calls) == 5 else 0.5)
    res = learn(box, d=2, heads=1, field=Real(dps=30), tokens="float64", noise="auto", seed=0)
    assert res.status == "failed" and "measuring eta" in res.error
    assert "not in the real field" in res.error
    assert res.queries == res.noise_queries == len(calls) == 5 and res.noise_estimated is None


def test_a_float_box_that_sorts_its_tokens_is_not_declared_exact():
    """A float64 box that sorts its non-final tokens before computing answers every order
    alike: the permutation spread is 0, and noise='auto' declared eta = 0 for answers that
    carry float64 rounding, so every such box failed ("noisier than the declared eta").  With
    float tokens each envelope term is at least the unit roundoff (FLOOR): measured as before,
    the declared eta is 30 * 2^-53, and the run is certified with a bound that covers the
    layer's own weights (compared with the exact weights, not the learner)."""
    K = Real(dps=30)
    layer = NumpyAttention.from_seed(3, 2, 1)

    def box(X):
        X = np.asarray(X, dtype=np.float64)
        rest = X[:-1]
        return float(layer(np.vstack([rest[np.lexsort(rest.T[::-1])], X[-1:]])))

    calls = []
    res = learn(lambda X: calls.append(1) or box(X), d=3, heads=2, field=K, tokens="float64",
                noise="auto", seed=1)
    assert res.status == "certified", res.error
    assert max_error(K, res.heads, truth(layer)) <= float(res.error_bound)
    assert res.queries == len(calls) and res.noise_estimated["floor"] == repr(2.0 ** -53)
    est = estimate_noise(box, d=3, heads=2, tokens="float64", seed=1)
    assert (est.envelope_abs, est.envelope_rel, est.max_spread) == (0.0, 0.0, 0.0)
    assert est.floor == 2.0 ** -53
    assert est.noise == est.noise_rel == SAFETY * 2.0 ** -53 and "unit roundoff" in est.method
    assert estimate_noise(box, d=3, heads=2, tokens="exact", seed=1).noise == 0.0  # no floor
