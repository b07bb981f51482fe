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
