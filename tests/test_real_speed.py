"""The real-field learner's speed measures (issue 23 section 2; docs/explanation/real-field.md,
"Speed"): BLAS at one thread around the learner's own linear algebra while the box keeps its
threads, and a float64-corrected refinement that stops as soon as its contraction shows that it
has converged or cannot."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from exactlearn import learn
from exactlearn.fields.real import Real
from exactlearn.model import Head, canonicalize
from exactlearn.strategies.real import lsq, ratio
from exactlearn.strategies.real.learn import max_parameter_error
from float_layers import NumpyAttention
from gmpy2 import mpq


def _blas_threads():
    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


@pytest.mark.skipif(not any(i["user_api"] == "blas" for i in threadpool_info()),
                    reason="no BLAS library that threadpoolctl controls")
def test_the_learner_pins_blas_to_one_thread_and_the_box_keeps_its_own(monkeypatch):
    layer = NumpyAttention.from_seed(4, 2, 0)
    seen_box, seen_fit = [], []

    def box(X):
        seen_box.append(_blas_threads())
        return layer(X)

    fit = ratio.fit_ratio_family

    def watched(*args, **kwargs):
        seen_fit.append(_blas_threads())
        return fit(*args, **kwargs)

    import exactlearn.strategies.real.stable_families as families   # the families' fits
    monkeypatch.setattr(families, "fit_ratio_family", watched)
    with threadpool_limits(2, user_api="blas"):
        res = learn(box, d=4, heads=2, field=Real(dps=30), tokens="float64", plan="stable",
                    noise=5e-14, noise_rel=1e-15, seed=0)
        after = _blas_threads()
    assert res.status == "certified"
    truth = canonicalize([Head(tuple(tuple(mpq(a) for a in r) for r in W), tuple(mpq(a) for a in v))
                          for W, v in layer.exact_heads()])
    err, _ = max_parameter_error(res.heads, truth, Real(dps=30))
    assert float(err) <= 1e-13 and err <= res.error_bound
    assert seen_fit and set(seen_fit) == {1}          # the learner's fits: one thread
    assert seen_box and set(seen_box) == {2}          # the box: the threads it was given
    assert after == 2                                 # restored


def test_a_linear_refinement_stops_when_it_cannot_reach_its_floor():
    ctx = mpmath.mp.clone()
    ctx.prec = 120
    calls = []

    def diverging(th):                  # theta <- theta - (-theta): doubles each step
        calls.append(1)
        return [-t for t in th]

    out = lsq.refine(ctx, diverging, [ctx.mpf(1)], goal=ctx.ldexp(1, -120), steps=24,
                     floor=1e-20, linear=True)
    assert not out.converged and len(calls) <= 4


def test_a_linear_refinement_converges_at_its_floor_once_it_contracts():
    ctx = mpmath.mp.clone()
    ctx.prec = 120
    target = ctx.mpf(1) / 3
    noise = iter(np.random.default_rng(0).uniform(-1, 1, 50) * 1e-22)

    def step(th):                       # a contraction by 1e-3 with a rounding floor ~1e-22
        return [(t - target) * (1 - ctx.mpf("1e-3")) + ctx.mpf(float(next(noise)))
                for t in th]

    out = lsq.refine(ctx, step, [ctx.mpf("0.3")], goal=ctx.ldexp(1, -120), steps=24,
                     floor=1e-15, linear=True)
    assert out.converged and out.steps <= 6
    assert abs(out.theta[0] - target) <= 2 * out.size


def test_the_plans_families_are_formed_and_looked_up_once(monkeypatch):
    """per_family asks every configuration at scale 1 in one batch, and fit_all fits each from
    that batch's answers: no query of it is formed and looked up again (before, each family's
    were, once more per configuration: a second ``query_key`` per query; and the paper plan's
    count of the probe queries it reuses formed every key once more)."""
    import exactlearn.strategies.real.stable as stable
    from exactlearn.pipeline.ask import AskOnce, query_key
    from spies import while_inside
    asked, ask = [], AskOnce.ask          # the keys of each call of ask within per_family

    def counted(self, queries):
        if inside[0]:
            asked.append({query_key(q) for q in queries})
        return ask(self, queries)

    monkeypatch.setattr(AskOnce, "ask", counted)
    inside = while_inside(monkeypatch, stable, "_per_family")
    res = learn(NumpyAttention.from_seed(6, 3, 0), d=6, heads=3, field=Real(dps=30),
                tokens="float64", plan="stable", noise=5e-14, noise_rel=1e-15, seed=0)
    assert res.status == "certified"
    first, later = asked[0], set().union(*asked[1:])  # later: rescues, supplementary families
    assert len(first) > 100 and not first & later
