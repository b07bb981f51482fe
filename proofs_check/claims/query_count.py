"""Claim ``query-count``: the learner asks exactly 4Hd^2 - 2H + 1 queries.

arXiv:2608.03294 (abstract); SPEC §3.  Three checks, each able to fail:

1. *The plan, without running anything*: for a grid of (d, H),
   ``paper_plan(X, E, H).count == 4Hd^2 - 2H + 1``, with 2d^2 - 1
   configurations and one shared k = 0 query.
2. *Certified runs*: ``result.queries == 4Hd^2 - 2H + 1`` (H the head count or
   the bound H0 given to the learner) and equals the oracle's own counter
   ``oracle.queries``.
3. *Retries*: at a small range (degenerate draws common) with ``retries=3``
   the reported total equals the oracle's counter, and
   ``queries - extra_queries`` is one plan's count.

Refuted on any mismatch; verified when there is none and enough certified runs
were checked; inconclusive otherwise.
"""

from __future__ import annotations

import random

from exactlearn.plan import draw_paper_plan, paper_count

from ..claim import ClaimResult, claim
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


def count_problems(row) -> list:
    """The count mismatches of one learning row (empty when all is consistent)."""
    out = []
    if row.get("status") == "crash":
        return out
    if row["queries"] != row["oracle_queries"]:
        out.append(f"learner reports {row['queries']} queries, the oracle counted {row['oracle_queries']}")
    if row["status"] == "certified":
        one_plan = row["queries"] - row["extra_queries"]
        if one_plan != row["expected_queries"]:
            out.append(f"certified with {one_plan} plan queries, 4Hd^2-2H+1 = {row['expected_queries']}")
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
        "extra_queries_reported": sum(r.get("extra_queries", 0) for r in rows),
        "fields": sorted({r["field"] for r in rows}),
        "grid": sorted({f"{r['field']} d={r['d']} bound={r['bound']}" for r in rows}),
        "examples": [{"field": r["field"], "d": r["d"], "bound": r["bound"],
                      "queries": r["queries"], "oracle_queries": r["oracle_queries"],
                      "formula": r["expected_queries"]}
                     for r in sorted(cert, key=lambda r: -r["expected_queries"])[:3]],
        "mismatch_examples": mismatches[:5],
        "series": {"queries_vs_d": {"points": sorted(
            {(r["d"], r["bound"], r["queries"]) for r in cert if r.get("attempts", 1) == 1})}},
    }
    evidence["series"]["queries_vs_d"]["points"] = [
        {"plan": "paper", "d": d, "H": H, "queries": q, "limit": paper_count(d, H)}
        for d, H, q in evidence["series"]["queries_vs_d"]["points"]]
    if bad_plans or mismatches:
        return "refuted", evidence
    if len(cert) < min_certified:
        evidence["why_not_verified"] = f"only {len(cert)} certified runs (need {min_certified})"
        return "inconclusive", evidence
    return "verified", evidence


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
           "as read from the plan and counted by the oracle.", order=30)
def check(ctx):
    return plan_and_runs(ctx, ID, plan_count_trial, count_summary)


def plan_and_runs(ctx, claim_id, plan_trial, summary):
    """The query-count/-length campaign: ``plan_trial`` over a (d, H) grid of
    plans (nothing asked), then learning runs; ``summary`` decides."""
    d_max, H_max = {"tiny": (4, 3), "quick": (8, 6), "full": (12, 8)}[level(ctx)]
    plan_rows = ctx.map(plan_trial, [(ctx.seed, d, H) for d in range(1, d_max + 1)
                                     for H in range(1, H_max + 1)])
    rows = ctx.map(learning_trial, count_grid(ctx, claim_id))
    status, evidence = summary(plan_rows, rows, min_certified=max(3, len(rows) // 2))
    return ClaimResult(status, evidence)
