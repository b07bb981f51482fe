"""A paper plan keeps no token once asked (docs/explanation/performance.md, "Memory at full
width"): at d = 384 its 294,913 configurations would each hold a = x + e, about 4 GB, on
the driver of a serial run and on every Dask worker's copy of the plan."""

from __future__ import annotations

import random

from exactlearn import Modular, Oracle
from exactlearn.generate import random_model
from exactlearn.pipeline.analysis import analyse, ask_plan
from exactlearn.pipeline.certify import certify_plan
from exactlearn.pipeline.cluster_tasks import ask_task, certify_task
from exactlearn.pipeline.plan import draw_paper_plan


def _kept(plan) -> int:
    return sum("a" in c.__dict__ for c in plan.configs)


def test_asking_analysing_and_certifying_a_paper_plan_keeps_no_token_on_it():
    d, H = 5, 2
    model = random_model(d, H, seed=4, den=1)
    K = Modular()
    plan = draw_paper_plan(d, H, random.Random(5), 50)
    y0, values = ask_plan(plan, Oracle(model, K))
    assert _kept(plan) == 0
    heads = analyse(plan, y0, values, K, None)
    assert heads == model.canonical_heads()           # the model's own canonical form
    assert certify_plan(heads, plan, y0, values, K) == plan.count
    assert _kept(plan) == 0


def test_a_cluster_workers_tasks_keep_no_token_on_their_copy_of_the_plan():
    d, H = 4, 2
    model = random_model(d, H, seed=6, den=1)
    K = Modular()
    plan = draw_paper_plan(d, H, random.Random(7), 50)
    ns = [n for n, c in enumerate(plan.configs) if c.i == 1]
    asked = ask_task(model, K, plan, ns, False)
    assert _kept(plan) == 0
    serial = Oracle(model, K)                          # the same answers, asked one by one
    assert asked[1] == {n: [int(serial(plan.configs[n].tokens(k)))
                            for k in range(1, 2 * H + 1)] for n in ns}
    fresh = draw_paper_plan(d, H, random.Random(7), 50)
    assert certify_task(K, fresh, asked, model.canonical_heads(), "run", "t") == len(ns) * 2 * H
    assert _kept(fresh) == 0


def test_a_worker_keeps_the_oracles_of_one_prime_per_thread():
    """A cluster worker builds one oracle (and one evaluator per certificate round) per prime;
    at d = 384 each holds the heads anew, so the entries of a prime are dropped when the same
    run and thread move on to the next prime (the run's primes come one after another)."""
    from exactlearn.pipeline import cluster_tasks
    cluster_tasks._WORKER.clear()
    K1, K2 = Modular(p=97), Modular(p=10007)
    made = []
    get = lambda kind, K: cluster_tasks._cached("run", kind, K, lambda: made.append((kind, K.p)) or len(made))  # noqa: E731
    assert get("oracle", K1) == get("oracle", K1) == 1          # built once per prime
    assert get("token", K1) == 2
    assert get("oracle", K2) == 3
    assert {k[2] for k in cluster_tasks._WORKER} == {10007}     # the first prime's are gone
    assert get("oracle", K1) == 4                               # rebuilt if asked again
    cluster_tasks._WORKER.clear()


def test_heads_and_models_pickle_to_the_same_exact_values():
    """A Head pickles W as fixed-width integers over one denominator (what a Dask run sends
    its workers: the model and the learned heads); the values come back equal, as mpq,
    for mixed denominators, signs, zeros and tall entries, and a W that is not all mpq
    (a float layer's) pickles as it is."""
    import pickle
    from fractions import Fraction
    from gmpy2 import mpq
    from exactlearn.model import Head
    W = ((mpq(1, 3), mpq(-2 ** 200, 7)), (mpq(0), mpq(5, 6)))
    h = Head(W, (mpq(1), mpq(-1, 2)), (mpq(3), mpq(0)))
    back = pickle.loads(pickle.dumps(h))
    assert back == h and all(type(x) is mpq for row in back.W for x in row)
    model = random_model(4, 3, seed=8, den=5, bias=True)
    again = pickle.loads(pickle.dumps(model))
    assert again.heads == model.heads and again.canonical_heads() == model.canonical_heads()
    odd = Head(((Fraction(1, 3), 0.5), (1, 2)), (1, 2))
    assert pickle.loads(pickle.dumps(odd)) == odd
    listed = Head([[mpq(1)]], [mpq(2)])                  # W's rows as lists: kept as they are
    assert pickle.loads(pickle.dumps(listed)) == listed
    # unrelated denominators (helper-65): never much larger than the entries pickled as they are
    rng = random.Random(1)
    primes = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53]
    W = tuple(tuple(mpq(rng.randint(-10 ** 6, 10 ** 6), rng.choice(primes)) for _ in range(30))
              for _ in range(30))
    wide = Head(W, (mpq(1),) * 30)
    assert pickle.loads(pickle.dumps(wide)) == wide
    assert len(pickle.dumps(wide)) <= len(pickle.dumps((W, wide.v, wide.u)))


def test_the_driver_gets_each_cells_logs_head_by_head_and_recomputes_a_failed_one():
    """A cluster's analysis tasks send each cell's logs, head by head, not its poles and a
    log per pole (about 500 MB on the driver at d = 384); a log a worker could not take
    travels as ("rho", rho) and the driver takes it itself: the same heads, or the serial
    error (no discrete log of 0)."""
    import pytest
    from exactlearn.errors import ExactLearnError
    from exactlearn.pipeline.cluster_tasks import analyse_task, first_task, groups
    from exactlearn.pipeline.distributed import ClusterPlan
    d, H = 4, 2
    model = random_model(d, H, seed=9, den=1)
    K = Modular()
    plan = draw_paper_plan(d, H, random.Random(3), 50)
    gs = groups(plan)
    asked = [ask_task(model, K, plan, ns, g == 0) for g, ns in enumerate(gs)]
    first = first_task(K, plan, asked[0])
    row_logs = {}
    for a in asked[1:]:
        got = analyse_task(K, plan, a, first)
        assert all(type(x) is int for lg in got.values() for x in lg) and len(got) == d
        row_logs.update(got)
    driver = object.__new__(ClusterPlan)
    driver.plan = plan
    heads = driver.finish(dict(first[3]), dict(first[2]), row_logs, K)
    assert heads == model.canonical_heads()
    key = (2, 1)                            # a cell of group 2, its first head's log
    cell = row_logs[key]
    row_logs[key] = [("rho", int(K.power(cell[0])))] + cell[1:]
    assert driver.finish(dict(first[3]), dict(first[2]), row_logs, K) == heads
    row_logs[key] = [("rho", 0)] + cell[1:]
    with pytest.raises(ExactLearnError):
        driver.finish(dict(first[3]), dict(first[2]), row_logs, K)
