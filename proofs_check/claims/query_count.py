"""Claim ``query-count``: the learner asks exactly 4Hd^2 - 2H + 1 queries.

arXiv:2608.03294 (abstract); the plan and its count: docs: explanation/algorithm.md#how-it-works.
 Every learning run asks a black box wrapped in a
:class:`CountedBlackBox`, which counts the queries it answers and the longest
one itself (not through exactlearn's recorder or oracle counters).
Checks, each able to fail:

1. *The plan, without running anything*: for a grid of (d, H),
   ``paper_plan(X, E, H).count == 4Hd^2 - 2H + 1``, with 2d^2 - 1
   configurations and one shared k = 0 query.
2. *Every run* (certified or failed): ``result.queries`` and
   ``result.max_length`` equal the independent count and longest query (and
   exactlearn's own oracle counter agrees with both).
3. *Every rational run*, retries included (a small range where degenerate
   draws are common, ``retries=3``): ``queries == attempts x (4Hd^2 - 2H + 1)``,
   the count computed from (d, H) alone (H the head count or the bound H0
   given to the learner), never from the result.
4. *Certified runs*: the longest query asked is 2H + 1; over the modular field
   (which may ask the plan modulo several primes) the count is a multiple of
   the plan's, at least ``attempts x`` it.
5. *Every route that asks* (:func:`route_trial`): ``verify=N`` (its fresh queries are
   part of ``queries``), the real field's paper plan (with its probe) and stable plan
   (a float64 box answering whole families through ``batch``), a ``batch`` of the wrong
   length (bad input, its answers counted), failed redraws at a small range and over the
   real field, draws refused as too large for the field, and a Dask cluster (the
   ``--workers`` route: asked through the wrapper, and with the model evaluated on the
   workers, whose count must be the serial run's).  Each compares ``queries`` and
   ``max_length`` with the wrapper's count, ``extra_queries`` with what the box had
   answered when the final draw was checked (``check_plan`` runs once per attempt,
   before its first query), and ``verify_queries`` with N.

Refuted on any mismatch; verified when there is none and enough certified runs
were checked; inconclusive otherwise.
"""

from __future__ import annotations

import random

from exactlearn import paper_count
from exactlearn.pipeline.plan import draw_paper_plan

from ..claim import ClaimResult, claim, verdict
from ._learning import RATIONAL_RANGE, learning_trial, level, modular_field

ID = "query-count"


def plan_count_trial(args) -> dict:
    """Build the plan for (d, H) with random X, E; compare its count with the formula."""
    seed, d, H = args
    plan = draw_paper_plan(d, H, random.Random(f"{seed}:{ID}:plan:{d}:{H}"), 5)
    shared = sum(1 for q in plan.queries if q.k == 0)
    return {"d": d, "H": H, "count": plan.count, "formula": paper_count(d, H),
            "configs": len(plan.configs), "shared_k0": shared,
            "ok": plan.count == paper_count(d, H) == 4 * H * d * d - 2 * H + 1
            and len(plan.configs) == 2 * d * d - 1 and shared == 1}


class CountedBlackBox:
    """A black box's own count of the queries it answered, kept outside exactlearn.

    Calls ``box(tokens)`` and, when it returns, counts the query (``asked``)
    and its length (``longest``).  Every other attribute (``field``,
    ``check_plan``, ...) is the wrapped box's, so the learner runs exactly as
    it would on ``box``; a view of the box over another field (``box.over(K)``,
    asked by the multi-modular method) comes wrapped too, and its queries are
    counted here as well.
    """

    def __init__(self, box, parent=None):
        self.box = box
        self.parent = parent
        self.asked = 0
        self.longest = 0
        self.marks = []          # ``asked`` each time a draw was checked (once per attempt)

    def __call__(self, tokens):
        y = self.box(tokens)
        self._add(1, len(tokens))
        return y

    def _add(self, n, length):
        box = self
        while box is not None:
            box.asked += n
            box.longest = max(box.longest, length)
            box = box.parent

    def __getattr__(self, name):          # only names not set in __init__
        if name in ("box", "parent", "marks"):
            raise AttributeError(name)
        attr = getattr(self.box, name)
        if name == "over":
            return lambda field: CountedBlackBox(attr(field), parent=self)
        if name == "batch":              # every query a batch answers: one per value, at most
            def batch(queries):          # one per query (an extra value answers nothing asked)
                ys = list(attr(queries))
                self._add(min(len(ys), len(queries)), max((len(q) for q in queries), default=0) if ys else 0)
                return ys
            return batch
        if name == "check_plan":         # the learner checks each attempt's draw first
            def check_plan(plan):
                self.marks.append(self.asked)
                return attr(plan)
            return check_plan
        return attr


def counted_trial(args) -> dict:
    """One seeded learning run on a :class:`CountedBlackBox`: the draws, arguments and
    row of :func:`._learning.learning_trial`, with the wrapper's independent count and
    longest query as ``oracle_queries`` / ``oracle_max_length`` and exactlearn's own
    oracle counter as ``counter_queries`` / ``counter_max_length``."""
    return learning_trial(args, wrap=CountedBlackBox)


def count_problems(row) -> list:
    """The count mismatches of one learning row (empty when all is consistent).

    ``oracle_queries`` / ``oracle_max_length`` are what the black box answered
    (counted by :class:`CountedBlackBox`); ``expected_queries`` is
    ``paper_count(d, bound)``, computed from the trial's arguments alone."""
    out = []
    if row.get("status") == "crash":
        return out
    q, n, longest = row["queries"], row["oracle_queries"], row["oracle_max_length"]
    if q != n:
        out.append(f"learner reports {q} queries, the black box answered {n}")
    if row["max_length"] != longest:
        out.append(f"learner reports longest query {row['max_length']}, the longest asked was {longest}")
    if "counter_queries" in row and (row["counter_queries"], row["counter_max_length"]) != (n, longest):
        out.append(f"exactlearn's oracle counter says {row['counter_queries']} queries, longest "
                   f"{row['counter_max_length']}; the black box answered {n}, longest {longest}")
    one, attempts = row["expected_queries"], row.get("attempts", 1)
    if row["field"] == "rational":
        if q != attempts * one:
            out.append(f"{q} queries over {attempts} attempt(s); {attempts} x (4Hd^2-2H+1) = "
                       f"{attempts * one}")
    elif row["status"] == "certified" and (q % one or q < attempts * one):
        out.append(f"certified with {q} queries over {attempts} attempt(s): not a multiple of "
                   f"4Hd^2-2H+1 = {one} of at least {attempts} plan(s)")
    if row["status"] == "certified" and longest != row["expected_length"]:
        out.append(f"certified, longest query asked {longest}, 2H+1 = {row['expected_length']}")
    return out


def count_summary(plan_rows, rows, min_certified: int, routes=None) -> tuple:
    """The verdict of checks 1-4 on ``rows`` and, with ``routes``, check 5."""
    bad_plans = [r for r in plan_rows if not r["ok"]]
    mismatches = []
    for r in rows:
        for p in count_problems(r):
            mismatches.append({"trial": r["trial"], "field": r["field"], "d": r["d"], "H": r["H"],
                               "bound": r["bound"], "problem": p})
    cert = [r for r in rows if r["status"] == "certified"]
    retried = [r for r in rows if r.get("attempts", 1) > 1]
    evidence = {
        "runs": len(rows),
        "certified": len(cert),
        "certified_count_matches": sum(1 for r in cert if not count_problems(r)),
        "wrong_counts": len(mismatches),
        "failed": len(rows) - len(cert),
        "plan_grid": {"cells": len(plan_rows), "d": sorted({r["d"] for r in plan_rows}),
                      "H": sorted({r["H"] for r in plan_rows}), "mismatches": bad_plans[:5]},
        "runs_with_retries": len(retried),
        "retry_examples": [{"field": r["field"], "status": r["status"], "attempts": r["attempts"],
                            "queries": r["queries"], "answered": r["oracle_queries"],
                            "attempts_x_formula": r["attempts"] * r["expected_queries"]}
                           for r in retried[:5]],
        "counted_by": "an independent wrapper around the black box (CountedBlackBox)",
        "fields": sorted({r["field"] for r in rows}),
        "grid": sorted({f"{r['field']} d={r['d']} bound={r['bound']}" for r in rows}),
        "examples": [{"field": r["field"], "d": r["d"], "bound": r["bound"],
                      "queries": r["queries"], "oracle_queries": r["oracle_queries"],
                      "formula": r["expected_queries"]}
                     for r in sorted(cert, key=lambda r: -r["expected_queries"])[:3]],
        "mismatch_examples": mismatches[:5],
        # the figure's points: single-attempt rational runs, where one run asks the plan once
        # (the modular field asks it once per prime; its total would sit off the formula)
        "series": {"queries_vs_d": {"points": sorted(
            {(r["d"], r["bound"], r["queries"]) for r in cert
             if r.get("attempts", 1) == 1 and r["field"] == "rational"})}},
    }
    evidence["series"]["queries_vs_d"]["points"] = [
        {"plan": "paper", "d": d, "H": H, "queries": q, "limit": paper_count(d, H)}
        for d, H, q in evidence["series"]["queries_vs_d"]["points"]]
    route_bad = []
    if routes is not None:
        more, route_bad = routes_evidence(routes)
        evidence.update(more)
    return runs_verdict(evidence, bool(bad_plans or mismatches or route_bad), len(cert), min_certified)


def runs_verdict(evidence, refuted: bool, certified: int, min_certified: int) -> tuple:
    """The verdict of the count and length claims: refuted on any mismatch (of the plan or
    of a run), inconclusive with fewer than ``min_certified`` certified runs."""
    too_few = f"only {certified} certified runs (need {min_certified})" if certified < min_certified else None
    return verdict(evidence, refuted=refuted, problems=too_few)


def count_grid(ctx, claim_id: str) -> list:
    """Learning trials for the count/length claims: heads=H and max_heads=H+1,
    rational (d <= 3, H <= 3), modular when installed, and retry runs at range 2."""
    from ..models import kinds_for
    lv = level(ctx)
    items = []

    def add(field, d, H, H0, kind, R, retries=0):
        items.append((ctx.seed, claim_id, len(items), field, d, H, H0, kind, R, retries))

    H_max = 2 if lv == "tiny" else 3
    for d in (1, 2, 3):
        for H in range(1, H_max + 1):
            kinds = [k for k in kinds_for(H) if k != "den"]     # den at d=H=3 is slow over Q
            add("rational", d, H, None, kinds[d % len(kinds)], RATIONAL_RANGE)
            add("rational", d, H, H + 1, kinds[(d + 1) % len(kinds)], RATIONAL_RANGE)
    for n in range({"tiny": 3, "quick": 6, "full": 20}[lv]):
        add("rational", 2, 2, None, "den", 2, 3)
    if modular_field() is not None:
        d_max, H_max = {"tiny": (3, 2), "quick": (5, 4), "full": (8, 6)}[lv]
        for d in range(1, d_max + 1):
            for H in range(1, H_max + 1):
                kinds = kinds_for(H)
                add("modular", d, H, None if (d + H) % 2 else H + 1, kinds[(d + H) % len(kinds)], None)
    return items


# -- every route that asks -------------------------------------------------------------------
class FloatAttention:
    """A float64 attention layer (numpy) from a model's weights, with ``batch(queries)``
    (a whole family at once): the black box of the stable plan's route.  ``extra``
    answers one value too many (or, negative, too few) per batch: a broken box."""

    def __init__(self, model, extra=0):
        import numpy as np
        self.W = np.array([[[float(a) for a in row] for row in h.W] for h in model.heads])
        self.v = np.array([[float(a) for a in h.v] for h in model.heads])
        self.extra = extra

    def __call__(self, X):
        import numpy as np
        X = np.asarray(X, dtype=np.float64)
        s = np.einsum("ic,hcr,r->hi", X, self.W, X[-1])
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p = p / p.sum(axis=1, keepdims=True)
        return float((p * np.einsum("hc,ic->hi", self.v, X)).sum())

    def batch(self, queries):
        ys = [self(X) for X in queries]
        return ys + ys[:self.extra] if self.extra >= 0 else ys[:self.extra]


#: The routes of check 5: name -> (field, d, H, learn() keywords).  ``R`` None: the default.
ROUTES = {
    "verify": ("rational", 2, 2, dict(verify=5)),
    "verify-modular": ("modular", 2, 1, dict(verify=5)),
    "real-paper": ("real", 2, 1, dict(plan="paper")),
    "real-stable-batch": ("real", 2, 1, dict(plan="stable", tokens="float64", noise=5e-14,
                                              noise_rel=1e-15)),
    "bad-batch": ("real", 2, 1, dict(plan="stable", tokens="float64", noise=5e-14,
                                      noise_rel=1e-15, retries=2)),
    "redraws": ("rational", 2, 2, dict(query_range=2, retries=12, verify=3)),
    "real-redraws": ("real", 2, 3, dict(plan="paper", retries=2)),
    "refused": ("rational", 2, 2, dict(query_range=10 ** 30, retries=2)),
}


def route_trial(args) -> dict:
    """One run of a route of :data:`ROUTES` on a :class:`CountedBlackBox`: the learner's
    counts and the wrapper's (``answered``, ``longest``, ``marks``)."""
    from exactlearn import MultiHeadAttention, Oracle, learn
    from ..models import random_model, trial_rng
    from ._learning import modular_field
    seed, index, route = args
    field, d, H, kw = ROUTES[route]
    rng = trial_rng(seed, ID + ":route", index)
    model = random_model(rng, d, H, "plain")
    row = {"route": route, "field": field, "d": d, "H": H, "verify_asked": kw.get("verify", 0)}
    if field == "modular" and modular_field() is None:
        return dict(row, status="skipped")
    from exactlearn.cli.main import field_by_name
    K = field_by_name(field, dps=30 if field == "real" else None)
    if route in ("real-stable-batch", "bad-batch"):
        box = CountedBlackBox(FloatAttention(model, extra=1 if route == "bad-batch" else 0))
        kw = dict(kw, field=K)
    elif route == "real-redraws":       # fewer canonical heads than heads= (the exact count over
        # the real field): every attempt's probe fails and is redrawn (heads=1 would fail as
        # noisier than declared, a verdict that is final: one attempt)
        two = MultiHeadAttention([(h.W, h.v) for h in
                                  random_model(rng, d, 2, "plain").heads])
        box = CountedBlackBox(Oracle(two, K))
    else:
        box = CountedBlackBox(Oracle(model, K))
    try:
        res = learn(box, d=d, heads=H, seed=rng.randrange(2 ** 32), **kw)
    except Exception as exc:            # learn() must return flagged failures, never raise
        return dict(row, status="crash", error=f"{type(exc).__name__}: {exc}"[:200])
    return dict(row, **route_row(res, box), expected_queries=paper_count(d, H))


def route_row(res, box) -> dict:
    """The counts of one run, the learner's and the wrapper's."""
    return {"status": res.status, "error": (res.error or "")[:200], "queries": res.queries,
            "answered": box.asked, "max_length": res.max_length, "longest": box.longest,
            "attempts": res.attempts, "extra_queries": res.extra_queries, "marks": list(box.marks),
            "verify_queries": res.verify_queries, "verified": res.verified,
            "learning_queries": res.learning_queries, "refused_draws": res.refused_draws}


def cluster_rows(seed) -> list:
    """The ``--workers`` route on an in-process Dask cluster (when Dask is installed): the
    modular field's paper plan asked through the wrapper on the cluster, and with the model
    evaluated on the workers -- whose ``queries`` must be the serial run's, counted by the
    wrapper on the same seed.  Run in the driver (a cluster is not started inside a task)."""
    from ._learning import modular_field
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        return []
    if modular_field() is None:
        return []
    import logging
    from exactlearn import Oracle, learn
    from ..models import random_model, trial_rng
    logging.getLogger("distributed").setLevel(logging.ERROR)
    rng = trial_rng(seed, ID + ":cluster", 0)
    d, H = 2, 2
    model = random_model(rng, d, H, "plain")
    s = rng.randrange(2 ** 32)
    rows = []
    serial = CountedBlackBox(Oracle(model, modular_field()))
    res = learn(serial, d=d, heads=H, seed=s)
    base = {"field": "modular", "d": d, "H": H, "verify_asked": 0, "expected_queries": paper_count(d, H)}
    rows.append(dict(base, route="serial", **route_row(res, serial)))

    def on(client):
        box = CountedBlackBox(Oracle(model, modular_field()))
        res = learn(box, d=d, heads=H, seed=s, executor=client)
        rows.append(dict(base, route="cluster", **route_row(res, box)))
        oracle = Oracle(model, modular_field())     # evaluated on the workers
        res = learn(oracle, d=d, heads=H, seed=s, executor=client)
        rows.append(dict(base, route="cluster-workers", **route_row(res, serial),
                         reported_by_oracle=oracle.queries))

    try:                                 # proofs-check --scheduler: that cluster's client
        from distributed import default_client
        client = default_client()
    except ValueError:
        client = None
    if client is not None:
        on(client)
        return rows
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        on(client)
    return rows


def route_problems(row) -> list:
    """The count mismatches of one route row (empty when all is consistent)."""
    if row.get("status") == "skipped":
        return []
    if row.get("status") == "crash":
        return [f"route {row['route']}: learn() raised {row['error']}"]
    out = []
    q, n = row["queries"], row["answered"]
    if row["route"] == "cluster-workers":          # n: the serial run's, counted by the wrapper
        if q != n or row["reported_by_oracle"] != n:
            out.append(f"route cluster-workers: {q} queries reported ({row['reported_by_oracle']} "
                       f"by the driver's oracle), the serial run's box answered {n}")
        return out
    if q != n:
        out.append(f"route {row['route']}: learner reports {q} queries, the black box answered {n}")
    if row["max_length"] != row["longest"]:
        out.append(f"route {row['route']}: learner reports longest query {row['max_length']}, "
                   f"the longest answered was {row['longest']}")
    if row["learning_queries"] + row["verify_queries"] != q:
        out.append(f"route {row['route']}: learning {row['learning_queries']} + verify "
                   f"{row['verify_queries']} != queries {q}")
    marks = row["marks"]
    if marks and len(marks) == row["attempts"] and row["extra_queries"] != marks[-1]:
        out.append(f"route {row['route']}: extra_queries {row['extra_queries']}, but the box had "
                   f"answered {marks[-1]} when the final draw was checked")
    if row["extra_queries"] < 0:
        out.append(f"route {row['route']}: negative extra_queries {row['extra_queries']}")
    if row["verified"] is True and row["verify_queries"] != row["verify_asked"]:
        out.append(f"route {row['route']}: verified with {row['verify_queries']} fresh queries, "
                   f"{row['verify_asked']} asked for")
    if row["route"] == "bad-batch" and not (row["status"] == "failed"
                                           and row["error"].startswith("bad input")):
        out.append("route bad-batch: a batch of the wrong length was not refused as bad input")
    if row["route"] == "refused" and (q or row["refused_draws"] != row["attempts"]):
        out.append(f"route refused: {q} queries, {row['refused_draws']} of {row['attempts']} "
                   f"draws refused")
    if row["field"] == "rational" and row["status"] != "crash" and row["route"] != "refused":
        want = (row["attempts"] - row["refused_draws"]) * row["expected_queries"]
        if row["learning_queries"] != want:
            out.append(f"route {row['route']}: {row['learning_queries']} learning queries over "
                       f"{row['attempts']} attempt(s); attempts x (4Hd^2-2H+1) = {want}")
    return out


def routes_evidence(routes) -> tuple:
    """``(evidence, problems)`` of check 5."""
    problems = [p for r in routes for p in route_problems(r)]
    ran = [r for r in routes if r.get("status") != "skipped"]
    return {"routes": sorted({r["route"] for r in ran}),
            "route_runs": len(ran),
            "route_examples": [{k: r.get(k) for k in ("route", "status", "queries", "answered",
                                                      "attempts", "extra_queries", "marks",
                                                      "verify_queries", "learning_queries")}
                               for r in ran],
            "route_mismatches": problems[:5]}, problems


@claim(ID, "The learner asks exactly 4Hd^2 - 2H + 1 queries (H0 in place of H with a bound), "
           "as read from the plan and counted by an independent wrapper around the black box "
           "(attempts x that with retries); on every route that asks (verify, the real field, "
           "batches, redraws, a Dask cluster) queries is every answered query.", order=30)
def check(ctx):
    d_max, H_max = {"tiny": (4, 3), "quick": (8, 6), "full": (12, 8)}[level(ctx)]
    plan_rows = ctx.map(plan_count_trial, [(ctx.seed, d, H) for d in range(1, d_max + 1)
                                           for H in range(1, H_max + 1)])
    rows = ctx.map(counted_trial, count_grid(ctx, ID))
    reps = {"tiny": 1, "quick": 1, "full": 3}[level(ctx)]
    routes = ctx.map(route_trial, [(ctx.seed, n, r) for n in range(reps) for r in ROUTES])
    routes = list(routes) + ([] if level(ctx) == "tiny" else cluster_rows(ctx.seed))
    status, evidence = count_summary(plan_rows, rows, max(3, len(rows) // 2), routes)
    return ClaimResult(status, evidence)


def plan_and_runs(ctx, claim_id, plan_trial, summary):
    """The query-count/-length campaign: ``plan_trial`` over a (d, H) grid of
    plans (nothing asked), then learning runs; ``summary`` decides."""
    d_max, H_max = {"tiny": (4, 3), "quick": (8, 6), "full": (12, 8)}[level(ctx)]
    plan_rows = ctx.map(plan_trial, [(ctx.seed, d, H) for d in range(1, d_max + 1)
                                     for H in range(1, H_max + 1)])
    rows = ctx.map(counted_trial, count_grid(ctx, claim_id))
    status, evidence = summary(plan_rows, rows, min_certified=max(3, len(rows) // 2))
    return ClaimResult(status, evidence)
