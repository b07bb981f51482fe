"""Figures of a proofs-check run (``proofs-check --plots DIR``): matplotlib PNGs.

Four figures, each from the claims' ``evidence["series"]`` (the convention is
in :mod:`proofs_check.claim`) and, where a claim does not provide the data,
from a small seeded campaign run here through the same executor:

``queries_vs_d.png``
    queries against d for H = 1..4: the paper's 4Hd^2 - 2H + 1 as lines, the
    prior work's d^2 + d (arXiv:2601.16873, one head), measured paper-plan
    counts (the timing campaign below, and ``queries_vs_d`` points of any
    claim), and the efficient plan's counts where a claim reports them.
``failure_vs_range.png``
    the learner's failure rate against the sampling half-width R, with the
    bound: the ``failure_vs_range`` series of a claim (``probability-one-rate``)
    when present; otherwise :func:`failure_trial`, a campaign on the rational
    field (d = 2, H = 1 and 2) compared with the claim's Schwartz-Zippel union
    bound (:func:`proofs_check.claims.probability_one_rate.bound`).
``error_vs_noise.png``
    parameter error against output noise eta, log-log, with the slope: only
    from an ``error_vs_noise`` series (``approximate-oracle``); skipped with a
    note otherwise.
``constant_vs_heads.png``
    the measured constant C = parameter error / eta against H, per plan (the paper's and
    the stable one) and d: only from a ``constant_vs_heads`` series
    (``approximate-oracle``).
``time_vs_d.png``
    wall time of one learning run (learner + oracle, in a worker) against d,
    for every field that imports: :func:`timing_trial`.

Every campaign here is seeded (``--seed``) like the claims, so its counts and
rates do not depend on the executor; only the times do.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field

from exactlearn import paper_count
from exactlearn.cli.main import field_by_name

from .claims import probability_one_rate as rate_claim
from .models import canonical_model, random_model, trial_rng

H_LINES = (1, 2, 3, 4)


@dataclass
class Figure:
    """One figure: ``path`` is None when it was skipped (``note`` says why)."""

    name: str
    title: str
    path: str | None
    caption: str
    sources: list = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "title": self.title, "path": self.path, "caption": self.caption,
                "sources": self.sources, "note": self.note}


# ---- the figure campaigns (top-level trials, any executor) ---------------------------

#: digits of the real field in the timing campaign
REAL_DPS = 30


def available_fields() -> list:
    """The field names of :mod:`exactlearn.fields` that import, in the order of the
    table in docs: howto/field-and-range.md#number-systems-fields."""
    from exactlearn import fields
    return [n for n, cls in (("rational", "Rational"), ("modular", "Modular"),
                             ("symbolic", "Symbolic"), ("real", "Real")) if hasattr(fields, cls)]


def timing_trial(args) -> dict:
    """``args = (seed, index, field, d, H)``: one learning run on a random plain model,
    timed in the worker (``seconds`` = learner + oracle, wall)."""
    from exactlearn import Oracle, learn
    seed, index, field_name, d, H = args
    rng = trial_rng(seed, "figure:time", index)
    model = canonical_model(random_model(rng, d, H, "plain"))
    # H is the number of canonical heads learned (random W may collide at small d)
    row = {"field": field_name, "d": d, "H": model.H, "raw_heads": H}
    if model.H == 0:
        row.update(status="skipped", queries=0)
        return row
    t0 = time.perf_counter()
    try:
        res = learn(Oracle(model, field_by_name(field_name, dps=REAL_DPS)), d=d, heads=model.H,
                    seed=rng.randrange(2 ** 32))
    except Exception as exc:
        row.update(status="crash", error=f"{type(exc).__name__}: {exc}"[:200],
                   seconds=round(time.perf_counter() - t0, 4))
        return row
    # per_plan: the queries of one run of the plan (per prime over the modular field, the
    # real field's scaling probe left out), which is what the paper's count bounds
    row.update(status=res.status, queries=res.queries,
               per_plan=(res.queries - res.probe_queries) // max(1, res.plan_runs * res.attempts),
               error=(res.error or "")[:200],
               equal=agrees_with_canonical(res, model), seconds=round(time.perf_counter() - t0, 4))
    return row


def agrees_with_canonical(res, model) -> bool:
    """A certified run's heads against the model's canonical heads, by the run's own claim:
    equal over an exact field; over the real field (certified within tolerance) the same
    number of heads, each entry within the run's ``error_bound``."""
    if not res.certified:
        return False
    if res.field.is_exact:
        return res.heads == model.canonical_heads()
    from exactlearn.strategies.real.learn import max_parameter_error
    try:
        err, _ = max_parameter_error(res.heads, model.canonical_heads(), res.field)
    except ValueError:                     # a different number of heads, or no 1-1 pairing
        return False
    return err <= res.error_bound


def timing_grid(seed: int, level: str, scale: int = 1) -> list:
    """Trials of the timing campaign: every available field over a range of d.

    Rational: H = 1, 2, 3 (the H = 1 and 3 runs add measured counts to the
    queries figure); modular and real: H = 2; symbolic (Q(T), costly): H = 1."""
    reps = {"tiny": 1, "quick": 2, "full": 3 * scale}[level]
    d_max = {"tiny": {"rational": 2, "modular": 3, "symbolic": 1, "real": 2},
             "quick": {"rational": 4, "modular": 6, "symbolic": 2, "real": 3},
             "full": {"rational": 5, "modular": 10, "symbolic": 3, "real": 5}}[level]
    timed_H = {"rational": 2, "modular": 2, "symbolic": 1, "real": 2}     # drawn in time_vs_d
    extra_H = {"rational": (1, 3)}                                        # counts only, one run
    items = []
    for name in available_fields():
        for d in range(1, d_max[name] + 1):
            for _ in range(reps):
                items.append((seed, len(items), name, d, timed_H[name]))
            for H in extra_H.get(name, ()):
                if H <= 2 or d <= 3 or level == "full":
                    items.append((seed, len(items), name, d, H))
    return items


#: the bound drawn over the figure's own campaign (models with H canonical heads): the
#: probability-one-rate claim's, derived in that module's docstring
SZ_FORMULA = ("B/N/(1-d/N)^2, N = 2R+1, B = H(2d-1) + (2d^2-1)H(H-1) + 2(d^2-1)H(H^2-1) "
              "(Schwartz-Zippel union bound, proofs_check.claims.probability_one_rate.bound)")


def failure_trial(args) -> dict:
    """``args = (seed, index, d, H, R)``: one rational-field run at query half-width R."""
    from exactlearn import Oracle, Rational, learn
    seed, index, d, H, R = args
    rng = trial_rng(seed, "figure:failure", index)
    model = canonical_model(random_model(rng, d, H, "plain"))
    while model.H != H:                     # the bound is for H canonical heads
        model = canonical_model(random_model(rng, d, H, "plain"))
    res = learn(Oracle(model, Rational()), d=d, heads=H, seed=rng.randrange(2 ** 32), query_range=R)
    return {"d": d, "H": H, "range": R, "certified": res.certified,
            "wrong": res.certified and res.heads != model.canonical_heads(),
            "reason": (res.error or "").split(":")[0]}


def failure_grid(seed: int, level: str, scale: int = 1) -> list:
    runs = {"tiny": 12, "quick": 60, "full": 400 * scale}[level]
    ranges = {1: (1, 2, 4, 8, 16, 32, 64, 128, 256),
              2: (1, 2, 4, 8, 16, 32, 64, 128) + ((256,) if level == "full" else ())}
    if level == "tiny":
        ranges = {1: (1, 4, 16), 2: (2, 8)}
    items = []
    for H, rs in ranges.items():
        for R in rs:
            for _ in range(runs):
                items.append((seed, len(items), 2, H, R))
    return items


def failure_series(rows) -> dict:
    """Rows of :func:`failure_trial` as a ``failure_vs_range`` series (one field per H)."""
    cells: dict = {}
    for r in rows:
        c = cells.setdefault((r["H"], r["range"]), {
            "field": "rational", "d": r["d"], "H": r["H"], "range": r["range"], "runs": 0, "failures": 0,
            "wrong": 0, "bound": rate_claim.bound(r["d"], r["H"], r["range"])})
        c["runs"] += 1
        c["failures"] += 0 if r["certified"] else 1
        c["wrong"] += 1 if r["wrong"] else 0
    return {"points": [cells[k] for k in sorted(cells)], "bound_formula": SZ_FORMULA}


# ---- collecting series ------------------------------------------------------------

def collect(rows, name: str) -> list:
    """[(claim id, series dict)] for every claim whose evidence has series[name]."""
    out = []
    for r in rows:
        ev = r.get("evidence") or {}
        s = ev.get("series") or {}
        if isinstance(s, dict) and isinstance(s.get(name), dict) and s[name].get("points"):
            out.append((r["id"], s[name]))
        elif name == "failure_vs_range" and _rates_table(ev):
            out.append((r["id"], _rates_table(ev)))
    return out


def _rates_table(evidence) -> dict | None:
    """The ``rates`` table of ``probability-one-rate`` (rows with field, d, H, R,
    trials, failures, bound), read as a ``failure_vs_range`` series, for claims
    written before the ``series`` convention."""
    rates = evidence.get("rates")
    need = {"field", "R", "trials", "failures", "bound"}
    if not (isinstance(rates, list) and rates and all(isinstance(t, dict) and need <= set(t) for t in rates)):
        return None
    points = [{"field": t["field"], "d": t.get("d"), "H": t.get("H"), "range": t["R"], "runs": t["trials"],
               "failures": t["failures"], "wrong": t.get("wrong", 0), "bound": t["bound"]} for t in rates]
    out = {"points": points}
    if isinstance(evidence.get("bound"), str):
        out["bound_formula"] = evidence["bound"]
    return out


def _group_label(p) -> str:
    parts = [str(p["field"])]
    parts += [f"{k}={p[k]}" for k in ("d", "H") if p.get(k) is not None]
    return ", ".join(parts)


def _f(x):
    return float(x) if x is not None else None


# ---- drawing --------------------------------------------------------------------

def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")     # legends outside the axes stay whole
    import matplotlib.pyplot as plt
    plt.close(fig)


def _finish(fig, ax, path, title):
    """Title, log grid, the legend outside the axes (kept whole), saved."""
    ax.set_title(title, fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    _save(fig, path)


def draw_queries(path, claim_series, timing_rows) -> Figure:
    plt = _plt()
    from matplotlib.lines import Line2D
    measured = [{"plan": "paper", "d": r["d"], "H": r["H"], "queries": r.get("per_plan", r["queries"])}
                for r in timing_rows if r.get("status") == "certified"]
    sources = ["formula 4Hd^2-2H+1 (exactlearn.pipeline.plan.paper_count)", "prior work d^2+d"]
    if measured:
        sources.append(f"{len(measured)} certified runs of the timing campaign (paper plan)")
    for cid, s in claim_series:
        measured += [dict(p) for p in s["points"]]
        sources.append(f"claim {cid}: {len(s['points'])} points")
    d_max = max([8] + [int(p["d"]) for p in measured])
    hs = sorted(set(H_LINES) | {int(p["H"]) for p in measured})
    colours = {H: f"C{i}" for i, H in enumerate(hs)}
    ds = list(range(1, d_max + 1))
    fig, ax = plt.subplots(figsize=(10.5, 5.5))
    for H in hs:
        ax.plot(ds, [paper_count(d, H) for d in ds], "-", color=colours[H], lw=1.6,
                label=f"paper, H={H}: 4Hd²−2H+1")
    ax.plot(ds, [d * d + d for d in ds], "k--", lw=1.4, label="prior work (H=1): d²+d")
    plans = sorted({str(p.get("plan", "paper")) for p in measured}, key=lambda p: (p != "paper", p))
    markers = dict(zip(plans, "o^sDvP*X"))
    for plan in plans:
        pts = [p for p in measured if str(p.get("plan", "paper")) == plan]
        for H in sorted({int(p["H"]) for p in pts}):
            sel = [p for p in pts if int(p["H"]) == H]
            ax.scatter([int(p["d"]) for p in sel], [int(p["queries"]) for p in sel],
                       marker=markers[plan], s=46, facecolors="none" if plan == "paper" else colours[H],
                       edgecolors=colours[H], linewidths=1.4, zorder=3)
    handles, labels = ax.get_legend_handles_labels()
    for plan in plans:
        handles.append(Line2D([], [], ls="", marker=markers[plan], color="0.3",
                              markerfacecolor="none" if plan == "paper" else "0.3", markersize=7))
        labels.append(f"measured: {plan} plan" if plan in ("paper", "efficient") else f"measured: {plan}")
    labels = [lab + " (per prime, probe excluded)" if lab == "measured: paper plan" else lab
              for lab in labels]
    ax.legend(handles, labels, fontsize=8.5, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0.0)
    ax.set_yscale("log")
    ax.set_xticks(ds)
    ax.set_xlabel("token dimension d")
    ax.set_ylabel("number of value queries (log scale)")
    title = "Queries to learn H heads exactly vs d: paper formula, prior work"
    title += ", measured runs" if measured else ""
    has_eff = any(str(p.get("plan", "")) != "paper" for p in measured)
    ax.set_title(title + (",\nand the efficient plan" if has_eff else ""), fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    _save(fig, path)
    caption = ("Lines: the paper's count 4Hd²−2H+1 for each H and the prior work's d²+d "
               "(arXiv:2601.16873, one head). Hollow circles: queries counted in certified runs "
               "of the paper plan, per run of the plan (the modular field asks it once per prime, "
               "and the real field's scaling probe is left out; its single tokens, 2d − 2, and at d = 1 "
               "its scale family, 2H + 1, are counted)" + ("; filled markers: other plans reported by claims" if has_eff
                                      else "; no claim reported efficient-plan counts in this run") + ".")
    return Figure("queries_vs_d", title.replace("\n", " "), path, caption, sources)


def draw_failure(path, series_list, own: bool) -> Figure:
    """Failure rate against R per (field, d, H): points with exact binomial
    (Clopper-Pearson) 95% intervals, and the bound where it is below 1."""
    cp_lower, cp_upper = rate_claim.cp_lower, rate_claim.cp_upper
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10.5, 5.5))
    sources = []
    k = 0
    floor = 1.0
    for cid, s in series_list:
        fields = []
        for p in s["points"]:
            if _group_label(p) not in fields:
                fields.append(_group_label(p))
        for fname in fields:
            pts = sorted((p for p in s["points"] if _group_label(p) == fname and p["runs"]),
                         key=lambda p: _f(p["range"]))
            if not pts:
                continue
            colour = f"C{k}"
            k += 1
            cells = [(_f(p["range"]), int(p["failures"]), int(p["runs"])) for p in pts]
            nz = [(R, f / n, cp_lower(f, n, 0.025), cp_upper(f, n, 0.025)) for R, f, n in cells if f]
            z = [(R, cp_upper(0, n, 0.025)) for R, f, n in cells if not f]
            if nz:
                ax.errorbar([R for R, *_ in nz], [y for _, y, _, _ in nz],
                            yerr=[[y - lo for _, y, lo, _ in nz], [up - y for _, y, _, up in nz]],
                            fmt="o-", color=colour, lw=1.5, capsize=3, elinewidth=1.0,
                            label=f"{fname}: failure rate, 95% CP interval")
            if z:
                ax.plot([R for R, _ in z], [u for _, u in z], "v", color=colour, mfc="none", ms=8,
                        label=f"{fname}: no failure, 95% CP upper limit")
            bound = [(_f(p["range"]), _f(p["bound"])) for p in pts
                     if p.get("bound") is not None and _f(p["bound"]) < 1]
            if bound:
                ax.plot([R for R, _ in bound], [b for _, b in bound], "--", color=colour, lw=1.3,
                        marker="_", ms=14, label=f"{fname}: Schwartz–Zippel bound (where < 1)")
            floor = min([floor] + [lo for _, _, lo, _ in nz if lo > 0] + [y for _, y, _, _ in nz]
                        + [u for _, u in z] + [b for _, b in bound if b > 0])
            wrong = sum(int(p.get("wrong", 0)) for p in pts)
            sources.append(f"{cid}: {fname}, {sum(p['runs'] for p in pts)} runs, "
                           f"{wrong} certified-but-wrong")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(max(floor / 3, 1e-10), 1.6)
    ax.set_xlabel("sampling half-width R (query entries uniform in [−R, R], log scale)")
    ax.set_ylabel("failure rate (runs not certified, log scale)")
    title = "Learner failure rate vs sampling range (95% Clopper–Pearson intervals), with the bound"
    ax.set_title(title + ("\n(own rational-field campaign: no claim reported this series)" if own else ""),
                 fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    _save(fig, path)
    formula = next((s.get("bound_formula") for _, s in series_list if s.get("bound_formula")), "")
    caption = ("Failure rate of the learner (not certified) against R, with exact binomial "
               "(Clopper–Pearson) 95% intervals; dashed: the bound"
               + (f" {formula}" if formula else "") + ", drawn where it is below 1. Triangles mark "
               "ranges with no failure, at the 95% Clopper–Pearson upper limit 1 − 0.025^(1/runs). ")
    caption += ("No claim reported a failure_vs_range series in this run (probability-one-rate absent "
                "or without series), so this figure comes from its own seeded campaign on the rational "
                "field (random plain models, d = 2, H = 1 and 2)." if own
                else "Data from the claims' evidence.")
    return Figure("failure_vs_range", title, path, caption, sources)


def draw_noise(path, series_list) -> Figure:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10.5, 5.5))
    sources = []
    all_eta, all_err = [], []
    k = 0
    slope_text = []
    for cid, s in series_list:
        models = []
        for p in s["points"]:
            if p.get("model", cid) not in models:
                models.append(p.get("model", cid))
        for m in models:
            pts = sorted((p for p in s["points"] if p.get("model", cid) == m), key=lambda p: _f(p["eta"]))
            eta = [_f(p["eta"]) for p in pts]
            err = [_f(p["error"]) for p in pts]
            colour = f"C{k}"
            k += 1
            ax.plot(eta, err, "o-", color=colour, label=f"measured error: {model_label(m)}")
            eb = [(e, _f(p["error_bound"])) for e, p in zip(eta, pts) if p.get("error_bound") is not None]
            if eb:
                ax.plot([e for e, _ in eb], [b for _, b in eb], "^", color=colour, mfc="none",
                        label=f"learner's a-posteriori bound: {model_label(m)}")
            all_eta += [e for e, v in zip(eta, err) if v > 0]
            all_err += [v for v in err if v > 0]
        sources.append(f"{cid}: {len(s['points'])} points")
        if s.get("slope") is not None:
            slope_text.append((cid, float(s["slope"]), _f(s.get("constant"))))
    if all_eta:
        lx, ly = [math.log10(e) for e in all_eta], [math.log10(v) for v in all_err]
        mx, my = statistics.fmean(lx), statistics.fmean(ly)
        sxx = sum((x - mx) ** 2 for x in lx)
        fit = sum((x - mx) * (y - my) for x, y in zip(lx, ly)) / sxx if sxx else float("nan")
        slope, how = (slope_text[0][1], f"claim {slope_text[0][0]}") if slope_text else (fit, "least squares here")
        xs = [min(all_eta), max(all_eta)]
        ax.plot(xs, [10 ** (my + slope * (math.log10(x) - mx)) for x in xs], "k--", lw=1.2,
                label=f"log–log slope {slope:.3f} ({how})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("output noise η (log scale)")
    ax.set_ylabel("largest parameter error (log scale)")
    title = "Largest parameter error vs oracle noise η, real field (approximate oracle), log–log"
    _finish(fig, ax, path, title)
    consts = [f"C = {c:.3g} ({cid})" for cid, _, c in slope_text if c is not None]
    caption = ("Largest parameter error against the output noise η, both log scales. Circles: the "
               "largest difference between the learned heads and the model's canonical heads; "
               "triangles: the learner's own a-posteriori error bound for the same run (it must lie "
               "above the circle). \"model #N\" is the N-th seeded random model of the claim's "
               "campaign (drawn by trial_rng(seed, 'approximate-oracle:d:H', N), so the same "
               "--seed redraws it); the dashed line has the reported log–log slope (≈ 1 means "
               "error ≤ C·η)" + (": " + ", ".join(consts) if consts else "") + ".")
    return Figure("error_vs_noise", title, path, caption, sources)


def draw_constants(path, series_list) -> Figure:
    """C = error / eta (median over models) against H, per plan and d (log scale)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.5, 5.2))
    sources, eta = [], None
    styles = {"paper": ("o", "-"), "stable": ("s", "--")}
    k = 0
    for cid, s in series_list:
        eta = s.get("eta", eta)
        groups: dict = {}
        for p in s["points"]:
            groups.setdefault((p["plan"], p["d"]), []).append(p)
        for (plan, d), pts in sorted(groups.items()):
            pts = sorted(pts, key=lambda p: p["H"])
            marker, ls = styles.get(plan, ("^", ":"))
            ax.plot([p["H"] for p in pts], [_f(p["C_median"]) for p in pts], marker=marker, ls=ls,
                    color=f"C{k % 10}", label=f"{plan} plan, d = {d} (median over models)")
            k += 1
        sources.append(f"{cid}: {len(s['points'])} cells")
    ax.set_yscale("log")
    ax.set_xlabel("number of heads H")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("C = largest parameter error / η (log scale)")
    title = "Measured constant C of the approximate oracle vs H: paper plan and stable plan"
    _finish(fig, ax, path, title)
    at = f" at η = {eta:.0e}" if eta else ""
    caption = ("The paper's \"model- and query-dependent constant\", measured: for random models "
               f"learned over the real field through a NoisyOracle{at}"
               ", the largest parameter error divided by η (median over the seeded models of each "
               "cell), against the number of heads. Solid lines and circles: the paper's plan "
               "(k = 0..2H); dashed lines and squares: the stable plan (ratio families t = k/m at "
               "geometric nodes, least squares). A cell without a point had no certified run.")
    return Figure("constant_vs_heads", title, path, caption, sources)


def model_label(m: str) -> str:
    """A legend's name for a campaign model: ``"d=2 H=2 #3000"`` reads ``"random model #3000
    (d=2, H=2)"``; other names are kept.

    >>> model_label("d=2 H=2 #3000"), model_label("MiniLM layer 0")
    ('random model #3000 (d=2, H=2)', 'MiniLM layer 0')
    """
    import re
    hit = re.fullmatch(r"d=(\d+) H=(\d+) #(\d+)", str(m))
    return f"random model #{hit[3]} (d={hit[1]}, H={hit[2]})" if hit else str(m)


def draw_time(path, timing_rows, claim_series) -> Figure:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10.5, 5.5))
    cells: dict = {}
    for r in timing_rows:
        if r.get("status") == "certified" and r.get("seconds") is not None:
            cells.setdefault((r["field"], r["H"]), {}).setdefault(r["d"], []).append(float(r["seconds"]))
    if not cells:                          # no own campaign rows: the claims' points make the lines
        for _, s in claim_series:
            for p in s["points"]:
                cells.setdefault((str(p["field"]), int(p["H"])), {}).setdefault(int(p["d"]), []).append(
                    _f(p["seconds"]))
        claim_series = []
    # one line per field, at the H with the most cells (the campaign's timed H)
    per_field: dict = {}
    for (f, H), by_d in cells.items():
        if f not in per_field or len(by_d) > len(cells[(f, per_field[f])]):
            per_field[f] = H
    order = {f: i for i, f in enumerate(("rational", "modular", "symbolic", "real"))}
    extra = 0
    for k, f in enumerate(sorted(per_field, key=lambda f: order.get(f, 99))):
        H = per_field[f]
        by_d = cells[(f, H)]
        ds = sorted(by_d)
        ax.plot(ds, [statistics.median(by_d[d]) for d in ds], "o-", color=f"C{k}", lw=1.6,
                label=f"{f} field, H={H}: median of certified runs (up to "
                      f"{max(len(v) for v in by_d.values())} per d)")
        for cid, s in claim_series:        # the claims' own runs at the same field and H
            pts = [p for p in s["points"] if str(p["field"]) == f and int(p["H"]) == H]
            if pts:
                ax.scatter([int(p["d"]) + 0.08 for p in pts], [_f(p["seconds"]) for p in pts], s=12,
                           color=f"C{k}", alpha=0.35, marker="x",
                           label=f"{f}, H={H}: single runs of claim {cid}")
                extra += len(pts)
    failed = {}
    for r in timing_rows:
        if r.get("status") not in ("certified", "skipped"):
            failed.setdefault(r["field"], []).append((r.get("error") or r.get("status")).split(" (")[0])
    ax.set_yscale("log")
    ax.set_xlabel("token dimension d")
    ax.set_ylabel("wall time of one learning run, s (log scale)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    title = "Wall time of one learning run vs d, per field (exact fields and the real one; learner + oracle)"
    ax.set_title(title, fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7.5 if extra else 8.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    _save(fig, path)
    caption = ("Median wall time of one certified learning run (learner and oracle, measured inside the "
               "worker) against d: random plain models, each field's default query range, one line per "
               "field" + ("; crosses: single runs reported by claims (time_vs_d series) at the same field "
                          "and H" if extra else "") + ". Times depend on the machine and its load. ")
    if failed:
        caption += "Not certified: " + "; ".join(
            f"{f}: {len(v)} run(s), e.g. {v[0][:100]}" for f, v in sorted(failed.items())) + ". "
    wrong = [r for r in timing_rows if r.get("status") == "certified" and not r.get("equal")]
    if wrong:
        caption += (f"WARNING: {len(wrong)} certified run(s) differ from the canonical heads "
                    f"(exactly, or beyond the run's error bound on the real field) "
                    f"({', '.join(sorted({r['field'] for r in wrong}))}). ")
    missing = [f for f in ("rational", "modular", "symbolic", "real") if f not in per_field]
    if missing:
        caption += "No certified runs (or not installed): " + ", ".join(missing) + "."
    sources = [f"timing campaign: {len(timing_rows)} runs"] + \
        [f"claim {c}: {len(s['points'])} points" for c, s in claim_series]
    return Figure("time_vs_d", title, path, caption, sources)


# ---- the whole set ----------------------------------------------------------------

def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def make_figures(rows, outdir, executor, seed: int = 0, level: str = "quick", scale: int = 1,
                 progress=None) -> tuple:
    """Write the PNGs into ``outdir``; returns ``(figures, campaigns)``.

    ``rows`` are the claims' results (:func:`proofs_check.claim.run_claims`);
    ``progress`` follows the :class:`proofs_check.claim.Context` protocol.
    ``campaigns`` describes the figure campaigns run here (trials, seconds)."""
    os.makedirs(outdir, exist_ok=True)

    def run(name, fn, items):
        t0 = time.perf_counter()
        if progress is not None:
            progress.trials_added(len(items))
            out = executor.map(fn, items, progress=progress.trials_done)
        else:
            out = executor.map(fn, items)
        campaigns[name] = {"trials": len(items), "seconds": round(time.perf_counter() - t0, 3)}
        return out

    campaigns: dict = {}
    figures = []
    timing = run("timing", timing_trial, timing_grid(seed, level, scale))
    figures.append(draw_queries(os.path.join(outdir, "queries_vs_d.png"), collect(rows, "queries_vs_d"),
                                timing))
    fail_series = collect(rows, "failure_vs_range")
    own = not fail_series
    if own:
        frows = run("failure_vs_range", failure_trial, failure_grid(seed, level, scale))
        fail_series = [("own campaign", failure_series(frows))]
        campaigns["failure_vs_range"]["wrong"] = sum(1 for r in frows if r["wrong"])
    figures.append(draw_failure(os.path.join(outdir, "failure_vs_range.png"), fail_series, own))
    noise = collect(rows, "error_vs_noise")
    if noise:
        figures.append(draw_noise(os.path.join(outdir, "error_vs_noise.png"), noise))
    else:
        have_real = "real" in available_fields()
        claim_ran = any(r["id"] == "approximate-oracle" for r in rows)
        why = ("the approximate-oracle claim did not run in this campaign" if not claim_ran
               else "the approximate-oracle claim reported no error_vs_noise series")
        if not have_real:
            why += " (and exactlearn.fields.Real is not installed)"
        figures.append(Figure("error_vs_noise", "Parameter error vs oracle noise η", None, "", [],
                              note=why))
    consts = collect(rows, "constant_vs_heads")
    if consts:
        figures.append(draw_constants(os.path.join(outdir, "constant_vs_heads.png"), consts))
    figures.append(draw_time(os.path.join(outdir, "time_vs_d.png"), timing, collect(rows, "time_vs_d")))
    return figures, campaigns
