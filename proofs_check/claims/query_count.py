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

    def __call__(self, tokens):
        y = self.box(tokens)
        box = self
        while box is not None:
            box.asked += 1
            box.longest = max(box.longest, len(tokens))
            box = box.parent
        return y

    def __getattr__(self, name):          # only names not set in __init__
        if name in ("box", "parent"):
            raise AttributeError(name)
        attr = getattr(self.box, name)
        if name == "over":
            return lambda field: CountedBlackBox(attr(field), parent=self)
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


def count_summary(plan_rows, rows, min_certified: int) -> tuple:
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
    return runs_verdict(evidence, bool(bad_plans or mismatches), len(cert), min_certified)


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


@claim(ID, "The learner asks exactly 4Hd^2 - 2H + 1 queries (H0 in place of H with a bound), "
           "as read from the plan and counted by an independent wrapper around the black box "
           "(attempts x that with retries).", order=30)
def check(ctx):
    return plan_and_runs(ctx, ID, plan_count_trial, count_summary)


def plan_and_runs(ctx, claim_id, plan_trial, summary):
    """The query-count/-length campaign: ``plan_trial`` over a (d, H) grid of
    plans (nothing asked), then learning runs; ``summary`` decides."""
    d_max, H_max = {"tiny": (4, 3), "quick": (8, 6), "full": (12, 8)}[level(ctx)]
    plan_rows = ctx.map(plan_trial, [(ctx.seed, d, H) for d in range(1, d_max + 1)
                                     for H in range(1, H_max + 1)])
    rows = ctx.map(counted_trial, count_grid(ctx, claim_id))
    status, evidence = summary(plan_rows, rows, min_certified=max(3, len(rows) // 2))
    return ClaimResult(status, evidence)
