"""The Markdown report of a proofs-check run (``proofs-check --report FILE.md``).

Sections: a summary line, the run's parameters (command, seed, size, executor,
code version and library versions, so the run can be repeated), the claims
table (id, statement, status, trials), the figures (linked by paths relative
to the report, with captions), and the evidence of every claim: its scalar
entries as a table, its structured entries as JSON.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

STATUS_MARK = {"verified": "✅", "refuted": "❌", "inconclusive": "⚠️", "not checked": "–"}
LIBRARIES = ("exactlearn", "sympy", "gmpy2", "mpmath", "python-flint", "dask", "distributed",
             "matplotlib", "rich")


def versions() -> dict:
    """Python, platform and the installed versions of the libraries a run depends on."""
    out = {"python": platform.python_version(), "platform": platform.platform(terse=True)}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_revision() -> str | None:
    """``<commit>`` (plus ``+local changes`` when the package sources differ from it), or None."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--",
                                "exactlearn", "proofs_check"], capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + (" +local changes" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def run_info(argv, seed: int, level: str, scale: int, executor_info: dict) -> dict:
    """The run's parameters, for the JSON (``run``) and the report."""
    from .executors import code_fingerprint
    return {"command": "proofs-check " + " ".join(argv), "seed": seed, "level": level,
            "quick": level != "full", "scale": scale, **executor_info,
            "started": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "git": git_revision(), "code_fingerprint": code_fingerprint(), "versions": versions()}


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _scalar(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def evidence_markdown(evidence: dict) -> str:
    scal = [(k, v) for k, v in evidence.items() if _scalar(v) and k != "traceback"]
    rest = {k: v for k, v in evidence.items() if not _scalar(v) and k != "series"}
    lines = []
    if scal:
        lines += ["| key | value |", "|---|---|"]
        lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in scal]
        lines.append("")
    if rest:
        text = json.dumps(rest, indent=1, default=str)
        if len(text) > 6000:
            text = json.dumps(rest, default=str)
        lines += ["```json", text, "```", ""]
    series = evidence.get("series")
    if isinstance(series, dict):
        named = {n: s for n, s in series.items() if isinstance(s, dict) and isinstance(s.get("points"), list)}
        if named:
            names = ", ".join(f"`{n}` ({len(s['points'])} points)" for n, s in named.items())
            lines += [f"Figure data (`series`): {names}.", ""]
        else:
            lines += ["```json", json.dumps({"series": series}, default=str), "```", ""]
    if "traceback" in evidence:
        lines += ["<details><summary>traceback</summary>", "", "```", str(evidence["traceback"]).rstrip(),
                  "```", "", "</details>", ""]
    return "\n".join(lines)


def write_report(path, rows, info: dict, figures=(), campaigns=None, wall_seconds=None) -> str:
    """Write the Markdown report to ``path``; returns its text."""
    path = Path(path)
    base = path.resolve().parent
    counts: dict = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    lines = ["# proofs-check: the claims of arXiv:2608.03294, checked mechanically", ""]
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    lines += [f"**{len(rows)} claims: {summary}.** Each claim is a seeded campaign of trials; "
              f"its verdict and evidence depend only on the seed and the campaign size, not on the "
              f"executor that ran it.", ""]
    # parameters
    lines += ["## Run parameters", "", "| parameter | value |", "|---|---|"]
    ex = info.get("executor", "?")
    where = (f"dask, scheduler {info.get('scheduler')}, {info.get('workers')} workers, "
             f"{info.get('threads')} threads" if ex == "dask" else f"local, {info.get('workers', 1)} process(es)")
    params = [("command", f"`{info.get('command', '')}`"), ("seed", info.get("seed")),
              ("campaign size", info.get("level")), ("scale (full runs)", info.get("scale")),
              ("executor", where), ("started", info.get("started")),
              ("wall time", f"{wall_seconds:.1f} s" if wall_seconds is not None else None),
              ("git commit", info.get("git")), ("code fingerprint", info.get("code_fingerprint"))]
    params += [(f"version: {k}", v) for k, v in info.get("versions", {}).items()]
    lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in params if v is not None]
    lines.append("")
    # claims table
    lines += ["## Claims", "", "| claim | statement | status | trials | time (s) |", "|---|---|---|---:|---:|"]
    for r in rows:
        ev = r.get("evidence", {})
        lines.append(f"| [`{r['id']}`](#claim-{r['id']}) | {_cell(r['statement'])} | "
                     f"{STATUS_MARK.get(r['status'], '')} {r['status']} | {ev.get('trials', '')} | "
                     f"{ev.get('seconds', '')} |")
    lines.append("")
    # figures
    lines += ["## Figures", ""]
    figures = list(figures)
    if not figures:
        lines += ["No figures in this run (matplotlib is not installed: "
                  "`pip install 'exactlearn[campaign]'`).", ""]
    for n, f in enumerate(figures, 1):
        if f.path is None:
            lines += [f"**Figure {n}. {f.title}.** Not drawn: {f.note}.", ""]
            continue
        rel = os.path.relpath(Path(f.path).resolve(), base).replace(os.sep, "/")
        lines += [f"![{f.title}]({rel})", "", f"**Figure {n}. {f.title}.** {f.caption}",
                  f"Data: {'; '.join(f.sources)}. File: [`{rel}`]({rel}).", ""]
    if campaigns:
        lines += ["Figure campaigns run for this report (seeded like the claims; times are wall "
                  "times of the whole campaign):", ""]
        lines += [f"- `{k}`: {v['trials']} trials, {v['seconds']} s"
                  + (f", {v['wrong']} certified-but-wrong" if "wrong" in v else "") for k, v in campaigns.items()]
        lines.append("")
    # evidence
    lines += ["## Evidence", ""]
    for r in rows:
        lines += [f'<a id="claim-{r["id"]}"></a>', "", f"### {r['id']}: {r['status']}", "",
                  f"> {r['statement']}", ""]
        why = r.get("evidence", {}).get("why_not_verified")
        if why:
            lines += [f"**Why not verified:** {why if isinstance(why, str) else '; '.join(map(str, why))}", ""]
        lines.append(evidence_markdown(r.get("evidence", {})))
    text = "\n".join(lines).rstrip() + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return text


__all__ = ["versions", "git_revision", "run_info", "write_report", "evidence_markdown"]
