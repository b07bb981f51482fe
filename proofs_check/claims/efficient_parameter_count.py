"""Claim ``efficient-parameter-count``: the lean efficient plan against the parameter count H(d² + d).

Beyond arXiv:2608.03294 (issue 23, sec. 3; docs: explanation/efficient-plan.md, "Fewer
samples once v is known").  Once every v_h is known, c_h = −v_h·e is known for every
family, and the efficient plan asks a basis configuration (x_i, e_j), i ≥ 2, at
k = 1..2H−2 (H ≥ 3) and a matching configuration (x_1, e_1 + e_j) at k = 1 alone
(2 ≤ H ≤ 6).  Checks, each able to fail:

1. *The plan, without running anything*: for d = 8..64 and H = 2..8 the count read off a
   drawn plan equals :func:`~exactlearn.strategies.efficient.plan.efficient_count`, and for
   H = 2, 3, 4 it is at most 1.5·H(d² + d) (H ≥ 5 are recorded, not held to it: 2H − 2
   samples per family tend to (2H − 2)/H > 1.5 of the parameters).
2. *Runs* (random models, modular and rational fields, d ≥ 8): every run certified, equal
   to the canonical heads (exact rationals), with a *unique* certificate; per prime the
   queries equal the plan's count plus the reported fallbacks and the oracle's own counter;
   for H ≤ 4 at most 1.5·H(d² + d).
3. *Control (why H = 2 keeps 2H − 1 samples)*: a two-head family with known c-values has
   two labelled pole sets that reproduce its 2H − 2 = H samples
   (:func:`~exactlearn.strategies.efficient.known_c.pole_sets`): the reduced count is not
   claimed where it does not determine the poles.  With H = 3 the same construction finds
   one set only.

A run may redraw its plan (``retries=RETRIES``): over the rational field at the default
range two heads' poles can coincide in a configuration ("pole counts differ between
configurations"), an explicit failure of that draw (``probability-one-rate`` measures
such rates for the paper plan; this claim is about the counts of a draw that certifies) (the full campaign's rational d = 8, H = 8,
seed 0 run fails so on its first draw, and certifies on its second).  The counts checked are the final draw's; the earlier
draws' queries must add up to the total (``extra_queries``), and the redraws are recorded.

Refuted on a certified wrong answer, a count mismatch, a count over 1.5·H(d² + d) where
it is held, or a control that does not come out as stated; verified when every check
passes; inconclusive when a run fails on every draw (not certified).
"""

from __future__ import annotations

import random

from exactlearn import Modular, Oracle, Rational, learn
from exactlearn.generate import random_model
from exactlearn.strategies.efficient.known_c import pole_sets
from exactlearn.strategies.efficient.plan import draw_efficient_plan, efficient_count, prior_count

from ..claim import ClaimResult, claim
from ._learning import level

ID = "efficient-parameter-count"

#: H(d² + d) times this bounds the lean plan's count per prime (issue 23: 1.5).
GOAL = 1.5
#: Heads for which the goal is held: the count per prime is 3d² + 2d + 2 (H = 2),
#: in general d + (2H−1)(d+1) + (d−1)·1 + d(d−1)(2H−2), so its ratio to H(d² + d)
#: tends to (2H − 2)/H: 1.5 at H = 4 (from below), 1.6 at H = 5 -- not held there.
HELD = (2, 3, 4)
FIELDS = {"modular": Modular, "rational": Rational}
#: Redraws of a run's plan after an explicit failure of its draw (module docstring).
RETRIES = 2


def goal(d: int, H: int) -> float:
    return GOAL * H * prior_count(d)


def run_trial(args) -> dict:
    """One run: ``args = (field name, d, H, seed)``; a random model (exactlearn.generate)."""
    fname, d, H, seed = args
    model = random_model(d, H, seed=seed)
    oracle = Oracle(model, FIELDS[fname]())
    out = {"field": fname, "d": d, "H": H, "seed": seed, "parameters": H * prior_count(d)}
    try:
        res = learn(oracle, d=d, heads=H, seed=seed, plan="efficient", retries=RETRIES)
    except Exception as exc:        # learn() must return flagged failures, never raise
        out.update(status="crash", error=f"{type(exc).__name__}: {exc}")
        return out
    runs = [r["queries"] for r in (res.multimodular or {}).get("primes", []) if r.get("queries")] \
        or [res.queries - res.extra_queries]          # the final draw's, per prime
    detail = res.plan_detail or {}
    out.update(status=res.status, error=res.error, equal=res.certified and res.heads == model.canonical_heads(),
               per_prime=runs, total=res.queries, oracle=oracle.queries, plan_queries=res.plan_queries,
               attempts=res.attempts, extra=res.extra_queries,
               redraw_outcomes=[a["outcome"] for a in res.attempt_log[:-1]],
               fallback_queries=sum(f["queries"] for f in res.plan_fallbacks),
               fallbacks=[f["kind"] for f in res.plan_fallbacks], certificate=detail.get("certificate"),
               ratio=round(max(runs) / (H * prior_count(d)), 4))
    return out


def problems(r) -> list:
    if r["status"] == "crash":
        return [f"crashed: {r['error']}"]
    out = []
    if r["total"] != r["oracle"] or r["total"] != sum(r["per_prime"]) + r["extra"]:
        out.append(f"reports {r['total']} queries ({r['extra']} before the final draw), the "
                   f"oracle counted {r['oracle']}")
    if r["status"] != "certified":
        return out
    if not r["equal"]:
        out.append("certified but not equal to the canonical heads")
    if any(q != r["plan_queries"] + r["fallback_queries"] for q in r["per_prime"]):
        out.append("queries per prime != plan count + reported fallbacks")
    if r["H"] in HELD and max(r["per_prime"]) > goal(r["d"], r["H"]):
        out.append(f"{max(r['per_prime'])} queries per prime > {GOAL} H(d^2+d) = {goal(r['d'], r['H'])}")
    if r["certificate"] != "unique":
        out.append(f"certificate {r['certificate']!r}, not 'unique'")
    return out


def plan_grid(seed) -> list:
    rng = random.Random(f"{seed}:{ID}:grid")
    rows = []
    for d in (8, 12, 16, 24, 32, 64):
        for H in range(2, 9):
            p = draw_efficient_plan(d, H, rng, 2 ** 32)
            ok = p.count == efficient_count(d, H) and (H not in HELD or p.count <= goal(d, H))
            rows.append({"d": d, "H": H, "count": p.count, "before": efficient_count(d, H, lean=False),
                         "parameters": H * prior_count(d), "ratio": round(p.count / (H * prior_count(d)), 4),
                         "held": H in HELD, "ok": ok})
    return rows


def control(seed) -> dict:
    """Pole sets with known c-values through 2H − 2 samples: two for H = 2, one for H = 3."""
    K = Modular()
    rng = random.Random(f"{seed}:{ID}:control")
    out = {}
    for H in (2, 3):
        rho = [K(rng.randrange(2, 10 ** 9)) for _ in range(H)]
        c = [K(rng.randrange(1, 10 ** 6)) * (1 if t % 2 else -1) for t in range(H)]

        def g(k, rho=rho, c=c):
            return sum((ci / (1 + K(k) * ri) for ri, ci in zip(rho, c)), K.zero)
        gs = [g(k) for k in range(1, 2 * H - 1)]
        sets = pole_sets(gs, c, K)
        reproduce = all(all(K.eq(sum((ci / (1 + K(k) * ri) for ri, ci in zip(s, c)), K.zero), gs[k - 1])
                            for k in range(1, 2 * H - 1)) for s in sets)
        out[f"H={H}"] = {"samples": 2 * H - 2, "pole_sets": len(sets), "truth_among_them": rho in sets,
                         "all_reproduce_the_samples": reproduce}
    out["ok"] = (out["H=2"]["pole_sets"] == 2 and out["H=3"]["pole_sets"] == 1
                 and all(out[h]["truth_among_them"] and out[h]["all_reproduce_the_samples"] for h in ("H=2", "H=3")))
    return out


@claim(ID, "Beyond the paper (issue 23): with every c_h known once v is, the efficient plan asks "
           "2H-2 samples per basis family (H >= 3) and one per matching family (H <= 6), proved "
           "sufficient per family or completed (counted); for H = 2, 3, 4 that is at most "
           "1.5 H(d^2+d) queries per prime, exact and certified unique.", order=101)
def check(ctx):
    lv = level(ctx)
    if lv == "tiny":
        items = [("modular", 8, H, 0) for H in (2, 3, 4)] + [("rational", 8, 3, 0)]
    elif lv == "quick":
        items = [(f, d, H, s) for f in FIELDS for d in (8, 12) for H in (2, 3, 4) for s in (0, 1)]
    else:
        items = [(f, d, H, s) for f in FIELDS for d in (8, 12, 16) for H in (2, 3, 4, 6, 8)
                 for s in range(3) if not (f == "rational" and d * H > 64)]
    base = 1000 * ctx.seed                  # --seed N: other models and draws (0: as before)
    runs = ctx.map(run_trial, [(f, d, H, base + s) for f, d, H, s in items])
    grid = plan_grid(ctx.seed)
    ctl = control(ctx.seed)
    bad = [{"field": r["field"], "d": r["d"], "H": r["H"], "seed": r["seed"], "problems": p}
           for r in runs for p in [problems(r)] if p]
    table = [{k: r.get(k) for k in ("field", "d", "H", "seed", "status", "per_prime", "parameters", "ratio",
                                     "certificate", "fallbacks")} for r in runs]
    evidence = {"runs": len(runs), "certified_equal": sum(1 for r in runs if r.get("equal")),
                "table": table, "plan_grid": grid, "control": ctl, "problem_examples": bad[:5],
                "goal": f"{GOAL} H(d^2+d) per prime for H in {HELD}",
                "redraws": [{k: r.get(k) for k in ("field", "d", "H", "seed", "attempts", "extra",
                                                    "redraw_outcomes")}
                            for r in runs if r.get("attempts", 1) > 1]}
    failed = [r for r in runs if r["status"] not in ("certified", "crash")]
    if bad or not all(g["ok"] for g in grid) or not ctl["ok"]:
        return ClaimResult("refuted", evidence)
    if failed:
        evidence["why_not_verified"] = [f"{r['field']} d={r['d']} H={r['H']}: {r.get('error')}" for r in failed[:5]]
        return ClaimResult("inconclusive", evidence)
    return ClaimResult("verified", evidence)
