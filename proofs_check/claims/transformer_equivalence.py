"""Claim ``transformer-equivalence``: a one-layer Transformer is recovered up to
functional equivalence (arXiv:2608.03294, last result; docs: howto/transformer.md).

The paper states that, "under additional conditions", a one-layer Transformer
(multi-head attention, then a bias-free ReLU FFN) is learned up to functional
equivalence without a separate FFN algorithm.  Its conditions are not
available; ours are :data:`exactlearn.strategies.transformer.learn.CONDITIONS` (C1-C6),
and the route is that of :mod:`exactlearn.strategies.transformer.learn`.

Each trial draws a Transformer from the acceptance distribution -- d in {2, 3},
m = d, H in {1, 2}, 2-4 neurons, integer W in [-2, 2], O, B, u with entries
p/q, |p| <= 3, 1 <= q <= 3 -- and learns it over the rational field
(exp = 2^s, D = 1) with H known.  A certified result is then checked
*independently* of the learner's own certificate: exact agreement with the
original on 300 fresh random queries of length 1-6 with integer tokens in
[-4, 4], plus 10 queries per original neuron whose final token lies exactly on
that neuron's hyperplane (where the attention decides the ReLU).

The black box is wrapped in :class:`.query_count.CountedBlackBox`, which counts
the queries it answers and the longest one itself; in every run (certified or
failed) the learner's ``queries`` and ``max_length`` must equal them (the
learner's certificate queries included), and ``learning_queries +
certificate_queries == queries``.

Verified when at least half of the models are certified, every certified one
agrees exactly on all its checks, every run's count matches, and no trial
crashed.  Refuted when a certified model disagrees anywhere (a wrong
certificate), a count does not match, or fewer than half are certified.
"""

from __future__ import annotations

import random
import time

from exactlearn.fields import Rational
from exactlearn.oracle import TransformerOracle
from exactlearn.transformer_model import TransformerEvaluator, random_transformer
from exactlearn.strategies.transformer.learn import CONDITIONS, hyperplane_point, learn_transformer

from ..claim import REFUTED, VERIFIED, ClaimResult, claim
from ._learning import level
from .query_count import CountedBlackBox

ID = "transformer-equivalence"
CHECK_QUERIES = 300
TOKEN_RANGE = 4
DISTRIBUTION = ("d in {2,3}, m = d, H in {1,2}, 2-4 neurons, integer W in [-2,2], "
                "O, B, u entries p/q with |p| <= 3, 1 <= q <= 3; rational field, exp = 2^s")


def _check_queries(model, rng) -> list:
    """300 random queries (length 1-6, integer tokens in [-4, 4]) and 10 per original
    neuron with the final token on its hyperplane (kept small enough for exact 2^s)."""
    d = model.d
    R = TOKEN_RANGE

    def tok():
        return tuple(rng.randint(-R, R) for _ in range(d))

    qs = [[tok() for _ in range(rng.randint(1, 6))] for _ in range(CHECK_QUERIES)]
    wmax = max((abs(a) for W, _ in model.heads for row in W for a in row), default=0)
    for gam, u in zip(model.gammas(), model.u):
        beta = [sum(g[c] for g in gam) for c in range(d)]
        if u == 0 or not any(beta):
            continue
        z = hyperplane_point(beta, rng)
        zmax = max(abs(a) for a in z) + 1
        multi = wmax * d * d * zmax * (zmax + R) <= 100_000
        for _ in range(10):
            qs.append(([tok() for _ in range(rng.randint(1, 5))] if multi else []) + [z])
    return qs


def transformer_trial(args) -> dict:
    """Draw, learn, and check one Transformer (a pure function of its item)."""
    seed, n = args
    rng = random.Random(f"{seed}:{ID}:{n}")
    d, H, r = rng.choice((2, 3)), rng.choice((1, 2)), rng.randint(2, 4)
    model = random_transformer(d, H, r, seed=rng.randrange(2 ** 32))
    oracle = TransformerOracle(model, Rational())
    box = CountedBlackBox(oracle)
    t0 = time.perf_counter()
    res = learn_transformer(box, d=d, heads=H, seed=rng.randrange(2 ** 32))
    row = {"trial": n, "d": d, "H": H, "neurons": r, "status": res.status,
           "queries": res.queries, "max_length": res.max_length, "cones": len(res.cones),
           "kinks": res.kinks, "attempts": res.attempts,
           "learning_queries": res.learning_queries, "learning_max_length": res.learning_max_length,
           "certificate_queries": res.certificate_queries,
           "answered": box.asked, "answered_max_length": box.longest, "error": res.error,
           "seconds": round(time.perf_counter() - t0, 3)}
    row["count_problems"] = count_problems(row)
    if res.certified:
        K = oracle.field
        truth, got = TransformerEvaluator(model, K), TransformerEvaluator(res.model, K)
        qs = _check_queries(model, random.Random(f"{seed}:{ID}:check:{n}"))
        bad = [q for q in qs if truth(q) != got(q)]
        row.update({"checked": len(qs), "disagreements": len(bad), "agree": not bad,
                    "recovered": {"H": res.model.H, "neurons": res.model.r, "m": res.model.m}})
        if bad:
            row["model"] = model.to_json()
            row["first_disagreement"] = [[str(a) for a in t] for t in bad[0]]
    return row


def count_problems(row) -> list:
    """Mismatches between the learner's counts and what the black box answered
    (``answered``, ``answered_max_length``: the independent wrapper's count)."""
    out = []
    if row["queries"] != row["answered"]:
        out.append(f"learner reports {row['queries']} queries, the black box answered {row['answered']}")
    if row["max_length"] != row["answered_max_length"]:
        out.append(f"learner reports longest query {row['max_length']}, the longest asked was "
                   f"{row['answered_max_length']}")
    if row["learning_queries"] + row["certificate_queries"] != row["queries"]:
        out.append(f"learning {row['learning_queries']} + certificate {row['certificate_queries']} "
                   f"queries != {row['queries']}")
    return out


def _reason(error: str) -> str:
    """A failure message shortened to its kind (for the histogram in the evidence)."""
    for key in ("certificate failed", "cone of direction", "assembled model", "kink", "path",
                "distinct W", "neuron"):
        if key in error:
            return key
    return error[:60]


@claim(ID, "A one-layer Transformer (attention + bias-free ReLU FFN) is recovered up to "
           "functional equivalence from value queries under stated conditions: at least half of "
           "random small Transformers are certified, and every certified one agrees exactly with "
           "the original on fresh queries, including ReLU-boundary ones.", order=110)
def check(ctx):
    n = {"tiny": 4, "quick": 24, "full": 100}[level(ctx)]
    if not ctx.quick:
        n = ctx.size(24, 100)
    rows = ctx.map(transformer_trial, [(ctx.seed, i) for i in range(n)])
    cert = [r for r in rows if r["status"] == "certified"]
    wrong = [r for r in cert if not r["agree"]]
    miscounted = [r for r in rows if r["count_problems"]]
    failures: dict = {}
    for r in rows:
        if r["status"] != "certified":
            k = _reason(r["error"] or "")
            failures[k] = failures.get(k, 0) + 1
    cells: dict = {}
    for r in cert:
        c = cells.setdefault((r["d"], r["H"]), {"d": r["d"], "H": r["H"], "certified": 0,
                                                "queries": [], "learning": [], "cones": [],
                                                "max_length": 0, "learning_max_length": 0,
                                                "per_cone": 2 * r["d"] + 2 * r["H"] * (2 * r["d"] ** 2 - 1)})
        c["certified"] += 1
        c["queries"].append(r["queries"])
        c["learning"].append(r["learning_queries"])
        c["cones"].append(r["cones"])
        c["max_length"] = max(c["max_length"], r["max_length"])
        c["learning_max_length"] = max(c["learning_max_length"], r["learning_max_length"])
    table = []
    for c in sorted(cells.values(), key=lambda c: (c["d"], c["H"])):
        qs, ls, cs = c.pop("queries"), c.pop("learning"), c.pop("cones")
        c.update({"min_queries": min(qs), "mean_queries": round(sum(qs) / len(qs), 1),
                  "max_queries": max(qs), "mean_learning_queries": round(sum(ls) / len(ls), 1),
                  "mean_cones": round(sum(cs) / len(cs), 2)})
        table.append(c)
    evidence = {
        "models": len(rows),
        "certified": len(cert),
        "fraction_certified": round(len(cert) / len(rows), 3) if rows else None,
        "certified_but_inequivalent": len(wrong),
        "checked_queries_per_certified": CHECK_QUERIES,
        "check": f"exact equality with the original on {CHECK_QUERIES} random queries of length "
                 f"1-6, integer tokens in [-{TOKEN_RANGE},{TOKEN_RANGE}], plus 10 queries per "
                 "original neuron with the final token on its hyperplane",
        "distribution": DISTRIBUTION,
        "conditions": CONDITIONS,
        "failures": failures,
        "queries": table,
        "queries_note": "queries = every query the black box answered (checked against an "
                        "independent wrapper): learning (kink search + one paper plan per cone, "
                        "2d + 2H(2d^2-1) each incl. k = 0 at every final token and the cone centre; "
                        "longest 2H+1) plus the learner's certificate (200 random of length 1-6 + "
                        "10 per recovered neuron on its boundary)",
        "certificate_queries_mean": round(sum(r["certificate_queries"] for r in cert) / len(cert), 1)
        if cert else None,
        "count_mismatches": len(miscounted),
        "count_mismatch_examples": [{k: r[k] for k in ("trial", "status", "queries", "answered",
                                                       "max_length", "answered_max_length",
                                                       "count_problems")} for r in miscounted[:3]],
        "wrong_examples": [{k: r[k] for k in ("d", "H", "model", "first_disagreement")}
                           for r in wrong[:3]],
    }
    if wrong or miscounted:
        return ClaimResult(REFUTED, evidence)
    if 2 * len(cert) < len(rows):
        return ClaimResult(REFUTED, evidence)
    return ClaimResult(VERIFIED, evidence)
