"""Shared learning trials for the exact-recovery, query-count and query-length claims.

A trial is :func:`learning_trial` applied to one tuple (picklable, top level, so
any executor gives the same rows for the same seed).  It draws a random model
(:mod:`proofs_check.models`), wraps it in an :class:`~exactlearn.oracle.Oracle`
over a field, runs :func:`exactlearn.learn` and returns a plain-dict *row*:
status, whether the certified heads equal the canonical form, the learner's and
the oracle's own query counts and longest queries, and the failure reason.

:func:`recovery_summary` turns rows into structured evidence; the claims decide
their status from it.  Statuses follow one rule: ``refuted`` needs a
counterexample (a certified wrong answer, a wrong count); ``verified`` needs
every check to pass *and* enough certified runs; everything else is
``inconclusive``.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from fractions import Fraction

from exactlearn import Oracle, learn, paper_count
from exactlearn.cli.main import field_by_name

from ..claim import verdict
from ..models import heads_json, kind_holds, random_model, trial_rng

#: The rational field's query half-width in the campaigns (docs: howto/field-and-range.md#choosing-the-range:
#: degenerate draws are common over small ranges, rare over large ones; bit sizes grow with R).
RATIONAL_RANGE = 20
RATIONAL_RANGES = (20, 30)
#: A small range where degenerate draws are common: those runs test "never
#: silently wrong" (no certified wrong answer) and are exempt from the threshold.
STRESS_RANGE = 2


def modular_field():
    """``exactlearn.Modular()`` when this installation has it, else None."""
    try:
        return field_by_name("modular")
    except ValueError:
        return None


def reason_of(error: str | None) -> str:
    """A failure message reduced to its kind and first words (numbers dropped),
    so that failures can be counted by reason."""
    if not error:
        return ""
    kind, _, rest = error.partition(":")
    rest = re.sub(r"[\d/\-]+", "#", rest)
    rest = re.split(r"[(;,]", rest)[0].strip()
    words = rest.split()[:7]
    return f"{kind.strip()}: {' '.join(words)}" if words else kind.strip()


def learning_trial(args, wrap=None) -> dict:
    """One seeded learning run.

    ``args = (seed, claim_id, index, field_name, d, H, H0, kind, R[, retries])``:
    H raw heads of the given kind; the learner gets ``heads=H`` when ``H0`` is
    None, else ``max_heads=H0``; R is the query range (None: the field's
    default); ``retries`` (default 0) is passed on to :func:`exactlearn.learn`.

    ``wrap`` (optional) wraps the oracle in a black box that counts on its own
    (``asked`` queries, the ``longest``; :class:`.query_count.CountedBlackBox`):
    the learner asks the wrapper, the row's ``oracle_queries`` and
    ``oracle_max_length`` are the wrapper's counts and ``counter_queries`` /
    ``counter_max_length`` the oracle's own.  Without it, they are the oracle's.
    """
    seed, claim_id, index, field_name, d, H, H0, kind, R = args[:9]
    retries = args[9] if len(args) > 9 else 0
    rng = trial_rng(seed, claim_id, index)
    model = random_model(rng, d, H, kind)
    canonical = model.canonical_heads()
    bound = H if H0 is None else H0
    row = {"trial": [seed, claim_id, index], "field": field_name, "d": d, "H": H, "bound": bound,
           "upper_bound": H0 is not None, "kind": kind, "range": R,
           "canonical_heads": len(canonical), "expected_queries": paper_count(d, bound),
           "expected_length": 2 * bound + 1, "retries": retries,
           # the oracle evaluates the raw model; for a structured kind it must differ from
           # the canonical form the answer is judged against (else: a self-comparison)
           "structure_ok": kind in ("plain", "den") or kind_holds(model, kind)}
    t0 = time.perf_counter()
    try:
        oracle = Oracle(model, field_by_name(field_name))
        box = oracle if wrap is None else wrap(oracle)
        res = learn(box, d=d, heads=None if H0 is not None else H, max_heads=H0,
                    seed=rng.randrange(2 ** 32), query_range=R, retries=retries)
    except Exception as exc:   # learn() must return flagged failures, never raise
        row.update(status="crash", error=f"{type(exc).__name__}: {exc}", reason="crash",
                   seconds=round(time.perf_counter() - t0, 4), model=model.to_json())
        return row
    if wrap is None:
        row.update(oracle_queries=oracle.queries, oracle_max_length=oracle.max_length)
    else:
        row.update(oracle_queries=box.asked, oracle_max_length=box.longest,
                   counter_queries=oracle.queries, counter_max_length=oracle.max_length)
    row.update(seconds=round(time.perf_counter() - t0, 4))
    row.update(compare_with_canonical(res, model))
    return row


def compare_with_canonical(res, model) -> dict:
    """The row fields that judge one learner result against the model's canonical form:
    status, ``equal`` (certified heads == canonical heads, exact rationals), counts,
    and the heads themselves when a certified answer is wrong."""
    canonical = model.canonical_heads()
    out = {"status": res.status, "error": res.error, "reason": reason_of(res.error),
           "queries": res.queries, "max_length": res.max_length, "attempts": res.attempts,
           "plan_queries": res.plan_queries, "extra_queries": res.extra_queries,
           "learned_heads": len(res.heads),
           "equal": res.certified and res.heads == canonical}
    if res.certified and not out["equal"]:
        out.update(model=model.to_json(), canonical=heads_json(canonical), learned=heads_json(res.heads))
    elif not res.certified:
        out["model"] = model.to_json()
    return out


def judge_recovery(row) -> bool | None:
    """For one row: True (certified and equal to the canonical form), False
    (certified but *different*: a counterexample), None (not certified)."""
    if row.get("status") != "certified":
        return None
    return bool(row.get("equal"))


def _compact(row) -> dict:
    keep = ("trial", "field", "d", "H", "bound", "kind", "range", "status", "error",
            "queries", "expected_queries", "max_length", "expected_length", "model",
            "canonical", "learned")
    return {k: row[k] for k in keep if k in row}


def time_points(rows) -> list:
    """Mean wall time of the certified runs per (field, d, H): figure data."""
    cells: dict = {}
    for r in rows:
        if r.get("status") == "certified" and "seconds" in r:
            cells.setdefault((r["field"], r["d"], r["bound"]), []).append(r["seconds"])
    return [{"field": f, "d": d, "H": H, "seconds": round(sum(v) / len(v), 4)}
            for (f, d, H), v in sorted(cells.items())]


def recovery_summary(rows, threshold=Fraction(2, 3), min_certified=1) -> tuple:
    """(status, evidence) for "learn(oracle(model)) == canonical(model)".

    refuted: some certified answer differs from the canonical form.
    verified: none does, nothing crashed, and in every field the certified
    fraction is >= ``threshold`` with at least ``min_certified`` certified runs.
    inconclusive: otherwise.
    """
    rows = list(rows)
    missing = [r for r in rows if not r.get("structure_ok", True)]
    by_field: dict = {}
    wrong, crashes, failures = [], [], []
    reasons = Counter()
    grid = Counter()
    kinds = Counter()
    for r in rows:
        group = r["field"] if r["range"] is None else f"{r['field']} R={r['range']}"
        if r["range"] == STRESS_RANGE:
            group += " (stress)"
        f = by_field.setdefault(group, {"runs": 0, "certified": 0, "wrong": 0, "failed": 0,
                                        "range": r["range"] or "field default", "d_max": 0, "H_max": 0})
        f["runs"] += 1
        f["d_max"] = max(f["d_max"], r["d"])
        f["H_max"] = max(f["H_max"], r["H"])
        grid[f"{r['field']} d={r['d']} H={r['H']}" + (f" H0={r['bound']}" if r["upper_bound"] else "")] += 1
        kinds[r["kind"]] += 1
        judged = judge_recovery(r)
        if judged is True:
            f["certified"] += 1
        elif judged is False:
            f["certified"] += 1
            f["wrong"] += 1
            wrong.append(_compact(r))
        else:
            f["failed"] += 1
            reasons[r.get("reason") or r["status"]] += 1
            (crashes if r["status"] == "crash" else failures).append(_compact(r))
    for f in by_field.values():
        f["certified_fraction"] = round(f["certified"] / f["runs"], 4) if f["runs"] else 0.0
    n_cert = sum(f["certified"] for f in by_field.values())
    evidence = {
        "runs": len(rows),
        "certified": n_cert,
        "wrong": len(wrong),
        "failed": len(rows) - n_cert,
        "crashed": len(crashes),
        "threshold": f"certified fraction >= {threshold} in every field and range "
                     f"(stress range R={STRESS_RANGE} exempt: only wrong answers count there), "
                     f">= {min_certified} certified",
        "fields": by_field,
        "failed_by_reason": dict(reasons.most_common()),
        "grid": dict(sorted(grid.items())),
        "kinds": dict(sorted(kinds.items())),
        "non_canonical_runs": sum(1 for r in rows if r.get("canonical_heads", r["H"]) < r["H"]),
        "structured_runs_missing_structure": len(missing),
        "wrong_examples": wrong[:3],
        "series": {"time_vs_d": {"points": time_points(rows)}},
        "crash_examples": crashes[:3],
        "failure_examples": [{k: v for k, v in _compact(r).items() if k != "model"} for r in failures[:3]],
    }
    problems = []
    if crashes:
        problems.append(f"{len(crashes)} run(s) raised instead of returning a flagged failure")
    if not rows:
        problems.append("no runs")
    if missing:
        problems.append(f"{len(missing)} merged/cancelling model(s) without their structure: "
                        f"the answer was judged against a canonical form equal to the raw model")
    for name, f in by_field.items():
        if "(stress)" not in name and Fraction(f["certified"], max(f["runs"], 1)) < threshold:
            problems.append(f"{name}: certified fraction {f['certified']}/{f['runs']} below {threshold}")
    if n_cert < min_certified:
        problems.append(f"only {n_cert} certified runs (need {min_certified})")
    return verdict(evidence, refuted=bool(wrong), problems=problems)


def size(ctx, tiny: int, quick: int, full: int) -> int:
    """``ctx.size`` with a third, smaller level for the test suite (``ctx.tiny = True``)."""
    return tiny if getattr(ctx, "tiny", False) else ctx.size(quick, full)


def level(ctx) -> str:
    """"tiny" (test suite), "quick" (--quick) or "full"."""
    return "tiny" if getattr(ctx, "tiny", False) else ("quick" if ctx.quick else "full")


def recovery_grid(ctx, claim_id: str, upper_bound: bool) -> list:
    """The trial tuples of an exact-recovery campaign (fields x ranges x d x H x kind).

    Rational field always: d <= 3, H <= 3, every model kind, at query ranges
    20 and 30 (the learner's default), plus "stress" runs at range
    STRESS_RANGE where degenerate draws are common (only certified wrong
    answers count there).  The modular field, when installed, at its default
    range (2^32): d <= 5, H <= 4 under --quick, d <= 8, H <= 6 without, plus
    its own stress runs at range STRESS_RANGE.  Under ``upper_bound`` the learner gets max_heads = H + 1 and
    H + 2 in turn.
    """
    from ..models import kinds_for
    lv = level(ctx)
    items = []

    def add(field, d, H, kind, R):
        n = len(items)
        H0 = (H + 1 + n % 2) if upper_bound else None
        items.append((ctx.seed, claim_id, n, field, d, H, H0, kind, R))

    reps = size(ctx, 1, 2, 3)
    H_max = 2 if lv == "tiny" else 3
    for R in ((RATIONAL_RANGE,) if lv == "tiny" else RATIONAL_RANGES):
        for d in (1, 2, 3):
            for H in range(1, H_max + 1):
                for kind in kinds_for(H):
                    for _ in range(reps):
                        add("rational", d, H, kind, R)
    stress = size(ctx, 6, 40, 100)           # never silently wrong: small range, many failures
    for n in range(stress):
        H = 1 + n % 3
        kinds = kinds_for(H)
        add("rational", 1 + (n // 3) % 3, H, kinds[n % len(kinds)], STRESS_RANGE)
    if modular_field() is not None:
        for n in range(stress):
            H = 1 + n % 3
            kinds = kinds_for(H)
            add("modular", 1 + (n // 3) % 3, H, kinds[(n + 1) % len(kinds)], STRESS_RANGE)
        d_max, H_max = {"tiny": (3, 3), "quick": (5, 4), "full": (8, 6)}[lv]
        reps = size(ctx, 1, 4, 4)
        for d in range(1, d_max + 1):
            for H in range(1, H_max + 1):
                kinds = kinds_for(H)
                for r in range(reps):
                    add("modular", d, H, kinds[(d + r) % len(kinds)], None)
    return items
