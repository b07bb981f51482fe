"""Review of the real-field speed work (h30): the black box keeps the BLAS threads *it* had
when the learner started, on every run of the process, and an exception inside the learner's
one-thread block restores them (docs: explanation/real-field.md, "Speed")."""

from __future__ import annotations

import numpy as np
import pytest
from gmpy2 import mpq
from threadpoolctl import threadpool_info, threadpool_limits

from exactlearn import learn
from exactlearn.fields.real import Real
from exactlearn.model import Head, canonicalize
from exactlearn.strategies.real import lsq
from exactlearn.strategies.real.learn import max_parameter_error
from float_layers import NumpyAttention

np.zeros(1) @ np.zeros(1)            # numpy's BLAS loaded before threadpoolctl looks
# scipy's own OpenBLAS too (the learner imports scipy on first use): a BLAS library loaded
# after a threadpool_limits block was entered is not under its limit, so run alone this file
# saw scipy's default 2 threads inside threadpool_limits(1) -- passing in the whole suite,
# where an earlier test had loaded scipy
import scipy.optimize  # noqa: E402,F401


def _blas_threads():
    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


HAS_TWO = (any(i["user_api"] == "blas" for i in threadpool_info())
           and _blas_threads() >= 2)
needs_two = pytest.mark.skipif(not HAS_TWO, reason="no BLAS that threadpoolctl controls at "
                                                   "two or more threads")


def _truth(layer):
    return canonicalize([Head(tuple(tuple(mpq(a) for a in r) for r in W), tuple(mpq(a) for a in v))
                         for W, v in layer.exact_heads()])


@needs_two
def test_each_run_gives_the_box_the_threads_it_had_at_that_run():
    """The first run of the process used to fix the box's thread count for every later run:
    a box given two threads after a run at one got one (and a box pinned to one thread after a
    run at two got two, another float summation order than its owner chose): the runs at one,
    two and one thread each see their own count, whatever ran before in the process."""
    layer = NumpyAttention.from_seed(2, 1, 0)
    for threads in (1, 2, 1):
        seen = []

        def box(X):
            seen.append(_blas_threads())
            return layer(X)

        with threadpool_limits(threads, user_api="blas"):
            res = learn(box, d=2, heads=1, field=Real(dps=30), tokens="float64", plan="stable",
                        noise=5e-14, noise_rel=1e-15, seed=0)
            after = _blas_threads()
        assert res.status == "certified", res.error
        err, _ = max_parameter_error(res.heads, _truth(layer), Real(dps=30))
        assert err <= res.error_bound
        assert seen and set(seen) == {threads}, (threads, set(seen))
        assert after == threads


@needs_two
def test_an_exception_inside_the_one_thread_block_restores_the_threads():
    with threadpool_limits(2, user_api="blas"):
        with pytest.raises(ZeroDivisionError):
            with lsq.one_blas_thread():
                assert _blas_threads() == 1
                with lsq.box_blas_threads():
                    assert _blas_threads() == 2
                    1 / 0
        assert _blas_threads() == 2
        with lsq.box_blas_threads():                  # outside the block: left as it is
            assert _blas_threads() == 2


def _one_head_observations():
    """A one-head model's exact observations ``k`` a's then ``m`` x's (mpmath, apart from the
    certificate's gmpy2 arithmetic), with its float bounds."""
    from exactlearn.model import Head
    K = Real(dps=30)
    ctx = K.ctx
    head = Head(((mpq(1, 2), mpq(0)), (mpq(0), mpq(-1, 4))), (mpq(1), mpq(2)))
    a, x = (mpq(1), mpq(0)), (mpq(0), mpq(1))
    wx = [ctx.fsum(K(w) * K(b) for w, b in zip(row, x)) for row in head.W]
    rho = ctx.exp(ctx.fsum(K(p) * q for p, q in zip(a, wx)) - ctx.fsum(K(p) * q for p, q in zip(x, wx)))
    ua, ux = (ctx.fsum(K(p) * K(q) for p, q in zip(head.v, t)) for t in (a, x))
    obs = [((a,) * k + (x,) * m, (k * rho * ua + m * ux) / (k * rho + m))
           for k, m in [(1, 1), (2, 1), (1, 3)]]
    return K, head, a, x, obs


@pytest.mark.parametrize("allowance", [False, None])
def test_a_nan_answer_never_passes_the_stable_certificate(allowance):
    """An observation whose value is nan (an mpf nan reaches the check unconverted) compared
    False with every tolerance, so the check passed it (on 913c531 and c2c376c)."""
    from types import SimpleNamespace
    from exactlearn.errors import NoisierThanDeclared
    from exactlearn.strategies.real.stable_certificate import certify_two_token
    K, head, a, x, obs = _one_head_observations()
    BW, Bv = [[[1e-20] * 2] * 2], [[1e-20] * 2]
    rec = SimpleNamespace(observations=obs)
    got = certify_two_token([head], BW, Bv, K, rec, 0, [1e-12] * 4, allowance=allowance)
    assert (got if allowance is False else got[0]) < 1e-3       # the honest ones pass
    rec = SimpleNamespace(observations=obs + [((a, a, x), K.ctx.nan)])
    with pytest.raises(NoisierThanDeclared):
        certify_two_token([head], BW, Bv, K, rec, 0, [1e-12] * 4, allowance=allowance)
