"""Claim ``query-length``: the longest query has exactly 2H + 1 tokens.

arXiv:2608.03294 (abstract); docs: explanation/algorithm.md#how-it-works: each
configuration is sampled at k = 0..2H on q_k = (a^k, x).  Checked on the plan
for a grid of (d, H) without running anything (the longest token list the plan
would ask), and on a seeded
campaign (the query-count claim's runs, on a black box wrapped in
:class:`.query_count.CountedBlackBox`): in every run the learner's
``max_length`` is the longest query the black box answered, and in every
certified run both equal 2H + 1 (2H0 + 1 with a bound).  Refuted on any
mismatch; verified when there is none over enough certified runs.
"""

from __future__ import annotations

import random

from exactlearn.pipeline.plan import draw_paper_plan

from ..claim import claim
from .query_count import plan_and_runs, runs_verdict

ID = "query-length"


def plan_length_trial(args) -> dict:
    """The plan's longest query for (d, H) with random X, E (nothing is run): the
    longest token list it would ask, measured on the lists themselves."""
    seed, d, H = args
    plan = draw_paper_plan(d, H, random.Random(f"{seed}:{ID}:plan:{d}:{H}"), 5)
    return {"d": d, "H": H, "max_length": max(len(plan.tokens(q)) for q in plan.queries)}


def length_problems(row) -> list:
    """``oracle_max_length`` is the longest query the black box answered (an
    independent count); ``expected_length`` is 2H + 1 from the trial's arguments."""
    if row.get("status") in (None, "crash"):
        return []
    out = []
    asked = row["oracle_max_length"]
    if row["max_length"] != asked:
        out.append(f"learner's longest query {row['max_length']}, the longest asked {asked}")
    if row["status"] != "certified":
        return out
    want = row["expected_length"]
    if row["max_length"] != want:
        out.append(f"learner's longest query {row['max_length']}, 2H+1 = {want}")
    if asked != want:
        out.append(f"longest query asked {asked}, 2H+1 = {want}")
    return out


def length_summary(plan_rows, rows, min_certified: int) -> tuple:
    bad_plans = [r for r in plan_rows if r["max_length"] != 2 * r["H"] + 1]
    cert = [r for r in rows if r["status"] == "certified"]
    mismatches = [{"trial": r["trial"], "field": r["field"], "d": r["d"], "bound": r["bound"],
                   "status": r["status"], "problem": p} for r in rows for p in length_problems(r)]
    evidence = {
        "runs": len(rows),
        "certified": len(cert),
        "wrong_lengths": len(mismatches),
        "failed": len(rows) - len(cert),
        "plan_grid": {"cells": len(plan_rows), "d": sorted({r["d"] for r in plan_rows}),
                      "H": sorted({r["H"] for r in plan_rows}), "mismatches": bad_plans[:5]},
        "lengths_seen": sorted({(r["bound"], r["max_length"]) for r in cert}),
        "fields": sorted({r["field"] for r in rows}),
        "mismatch_examples": mismatches[:5],
    }
    return runs_verdict(evidence, bool(bad_plans or mismatches), len(cert), min_certified)


@claim(ID, "The longest query has exactly 2H + 1 tokens (2H0 + 1 with a bound), "
           "as read from the plan and measured by an independent wrapper around the black box.",
       order=40)
def check(ctx):
    return plan_and_runs(ctx, ID, plan_length_trial, length_summary)
