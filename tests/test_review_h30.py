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
def test_each_run_gives_the_box_the_threads_it_had_at_that_run(monkeypatch):
    """The first run of the process used to fix the box's thread count for every later run:
    a box given two threads after a run at one got one (and a box pinned to one thread after a
    run at two got two, another float summation order than its owner chose)."""
    monkeypatch.setattr(lsq, "_BLAS", [])             # as in a fresh process
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
