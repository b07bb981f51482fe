"""``proofs-check``: run the paper's claims as seeded campaigns and report them.

Usage::

    proofs-check --quick                          # every claim, small campaigns, one process
    proofs-check --workers 2                      # full campaigns on two local processes
    proofs-check --quick --scheduler tcp://HOST:8786 --json   # on an existing Dask cluster
    proofs-check --quick --plots figs/ --report report.md     # PNG figures and a Markdown report

Campaign sizes: ``--tiny`` (the test suite's), ``--quick`` (about a minute on
one core) or full (the default).  A full run is sized to finish in under an
hour on one 2-core machine (``--workers 2``).

Executors: trials run in this process (``--workers 1``, the default), in a
pool of local processes (``--workers N``), or on a Dask cluster
(``--scheduler tcp://HOST:PORT``).  Each trial is a pure function of the seed,
the claim and its index, so statuses and evidence (timings aside) do not depend
on the executor.  The JSON output names it (``"executor": "local"`` or
``"dask"``); every claim's evidence gives its number of ``trials``.

Scaling up on a cluster.  Install the same exactlearn on every machine
(``pip install 'exactlearn[dask]'``), start a scheduler and workers, and
point ``--scheduler`` at it::

    dask scheduler --port 8786                                   # one machine
    dask worker tcp://SCHEDULER:8786 --nworkers 8 --nthreads 1   # each worker machine
    proofs-check --scheduler tcp://SCHEDULER:8786 --scale 10 --report run.md

The client refuses workers whose exactlearn/proofs_check sources differ from
its own (restart them after an upgrade).  Give each worker process one thread
(``--nthreads 1``): trials are pure Python and hold the GIL, so parallelism
comes from worker processes.  Each claim's trials go out as tasks (strided
chunks, so the costly trials spread over the workers); the wall time is about
the campaign's total CPU time divided by the worker processes.  To make the
campaigns themselves bigger, ``--scale K`` multiplies the full run's
repetitions of every claim that sizes its campaign through ``ctx.size`` (the
JSON marks each claim ``scaled``, and the CLI names those that ignore it), and
runs with other ``--seed`` values add independent, reproducible campaigns.

Progress bars (rich) go to stderr when it is a terminal, unless ``--quiet``.
Exit status: 0 when no claim is refuted or inconclusive, 1 otherwise, 2 on bad
input (one line on stderr), including an unreachable scheduler.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from exactlearn.cli.numbers import integer_option
from exactlearn.cli.parser import OneLineParser
from exactlearn.limits import MAX_LOCAL_WORKERS

from .claim import INCONCLUSIVE, REFUTED, discover, run_claims
from .executors import ExecutorError, make_executor


class BadInput(Exception):
    pass


#: Largest --scale (the full campaigns' repetitions times K)
MAX_SCALE = 1000


class _Parser(OneLineParser):
    """exactlearn's parser (every option shows its default; one given twice is refused),
    raising this command's BadInput."""

    def error(self, message):
        raise BadInput(message)


def build_parser():
    p = _Parser(prog="proofs-check", description="Check the claims of arXiv:2608.03294 mechanically.")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="small campaigns (about a minute; default: the full campaigns)")
    size.add_argument("--tiny", action="store_true", help="the test suite's campaigns (seconds)")
    p.add_argument("--json", action="store_true", help="print {\"claims\": [...], ...} as JSON")
    p.add_argument("--only", nargs="+", metavar="ID",
                   help="run only these claim ids (see --list; default: every claim)")
    p.add_argument("--list", action="store_true", help="list the claim ids and exit")
    p.add_argument("--seed", type=integer_option("--seed"), default=0, help="base seed of every campaign")
    p.add_argument("--workers", type=integer_option("--workers"), default=None,
                   help="local worker processes (default 1: this process)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="run the trials on this Dask scheduler (needs the 'dask' extra; "
                        "default: no cluster)")
    p.add_argument("--scheduler-timeout", type=float, default=None, metavar="S",
                   help="seconds to wait for the scheduler and a worker (needs --scheduler; "
                        "default 10)")
    p.add_argument("--scale", type=integer_option("--scale"), default=1, metavar="K",
                   help="multiply full-run repetitions by K, 1..1000 (claims that use ctx.size; not with "
                        "--quick or --tiny)")
    p.add_argument("--plots", metavar="DIR",
                   help="write PNG figures into DIR (needs matplotlib; default: none, or "
                        "FILE_figures/ with --report)")
    p.add_argument("--report", metavar="FILE.md",
                   help="write a Markdown report (figures go to --plots, else FILE_figures/; "
                        "default: no report)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _short(evidence: dict, width=70) -> str:
    keys = [k for k in evidence if k not in ("traceback", "seconds", "series")]
    text = "; ".join(f"{k}={evidence[k]}" for k in keys[:4])
    return text if len(text) <= width else text[: width - 3] + "..."


def table(rows) -> str:
    w = max([len(r["id"]) for r in rows] + [5])
    lines = [f"{'claim'.ljust(w)}  {'status':13}  evidence", "-" * (w + 90)]
    for r in rows:
        lines.append(f"{r['id'].ljust(w)}  {r['status']:13}  {_short(r['evidence'])}")
        lines.append(f"{''.ljust(w)}  {'':13}  {r['statement']}")
    return "\n".join(lines)


# ---- progress ---------------------------------------------------------------------

class RichProgress:
    """Two rich bars on stderr: claims done, and trials of the current claim."""

    def __init__(self, stream, n_claims: int):
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
        self.console = Console(file=stream)
        self.bars = Progress(TextColumn("{task.description:<42}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), console=self.console, transient=True)
        self.claims = self.bars.add_task("claims", total=n_claims)
        self.trials = self.bars.add_task("trials", total=0)
        self._total = 0

    def __enter__(self):
        self.bars.start()
        return self

    def __exit__(self, *exc):
        self.bars.stop()

    def phase(self, name: str):
        self._total = 0
        self.bars.reset(self.trials, total=0, description=f"trials: {name}")

    def claim_started(self, cid, index, total):
        self.bars.update(self.claims, description=f"claims ({cid})")
        self.phase(cid)

    def claim_finished(self, row):
        self.bars.advance(self.claims)
        ev = row.get("evidence", {})
        style = {"verified": "green", "refuted": "red", "inconclusive": "yellow"}.get(row["status"], "")
        self.console.print(f"[{style}]{row['status']:>12}[/{style}]  {row['id']}  "
                           f"({ev.get('trials', '?')} trials, {ev.get('seconds', 0):.1f} s)", highlight=False)

    def trials_added(self, n):
        self._total += n
        self.bars.update(self.trials, total=self._total)

    def trials_done(self, k):
        self.bars.advance(self.trials, k)


def make_progress(quiet: bool, n_claims: int, stream=None):
    """A :class:`RichProgress`, or None when quiet, stderr is not a terminal, or rich is missing."""
    stream = sys.stderr if stream is None else stream
    if quiet or not getattr(stream, "isatty", lambda: False)():
        return None
    try:
        return RichProgress(stream, n_claims)
    except ImportError:
        return None


class _NoProgress:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


# ---- output paths ---------------------------------------------------------------

def check_output_path(path: str, what: str, directory: bool) -> None:
    """Refuse (BadInput, one line) an output path that cannot be written, *before* any
    campaign runs: ``directory`` for ``--plots``, else a file (``--report``).  The directory
    (for a file, its parent) is created as the run would create it, and a file is opened
    for appending (never truncated; removed again if it did not exist), so that what the
    operating system refuses is refused now, not after the campaigns."""
    import os
    import tempfile
    p = Path(path)
    if directory and p.exists() and not p.is_dir():
        raise BadInput(f"{what} {path}: exists and is not a directory")
    if not directory and p.is_dir():
        raise BadInput(f"{what} {path}: is a directory, not a file")
    folder = p if directory else p.absolute().parent
    q = folder.absolute()
    while not q.exists():
        q = q.parent
    if not q.is_dir():
        raise BadInput(f"{what} {path}: {q} is not a directory")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if directory:
            with tempfile.TemporaryFile(dir=folder):
                pass
        else:
            existed = p.exists()
            with open(p, "a"):
                pass
            if not existed:
                os.unlink(p)
    except OSError as exc:
        raise BadInput(f"{what} {path}: cannot write there ({exc.strerror or exc.__class__.__name__})") from None


# ---- main -----------------------------------------------------------------------

def _level(args) -> str:
    return "tiny" if args.tiny else ("quick" if args.quick else "full")


def main(argv=None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # piped into `head`: stop quietly
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    t_start = time.perf_counter()
    ex = None
    try:
        args = build_parser().parse_args(argv)
        if args.workers is not None and args.workers < 1:
            raise BadInput("--workers must be >= 1")
        if args.workers is not None and args.scheduler:
            raise BadInput("give --workers (local processes) or --scheduler (Dask), not both")
        if args.workers is not None and args.workers > MAX_LOCAL_WORKERS:
            raise BadInput(f"--workers {args.workers} is more than {MAX_LOCAL_WORKERS} local "
                           f"processes (MAX_LOCAL_WORKERS)")
        if not 1 <= args.scale <= MAX_SCALE:
            raise BadInput(f"--scale must be 1..{MAX_SCALE}, got {args.scale}")
        for opt, value in (("--plots", args.plots), ("--report", args.report)):
            if value is not None and not value.strip():
                raise BadInput(f"{opt} needs a name, got {value!r}")
        if args.scheduler_timeout is not None and not args.scheduler:
            raise BadInput("--scheduler-timeout applies to --scheduler only")
        if args.scheduler_timeout is None:
            args.scheduler_timeout = 10.0
        if not 0 < args.scheduler_timeout <= 3600:          # nan and inf too
            raise BadInput(f"--scheduler-timeout must be a number of seconds in (0, 3600], "
                           f"got {args.scheduler_timeout}")
        if args.scale != 1 and (args.quick or args.tiny):
            raise BadInput("--scale multiplies the full campaigns; it does not apply to "
                           + ("--quick" if args.quick else "--tiny"))
        registry = discover()
        if args.list:
            for cid, c in registry.items():
                print(f"{cid}: {c.statement}")
            return 0
        if args.only:
            unknown = [i for i in args.only if i not in registry]
            if unknown:
                raise BadInput(f"unknown claim id(s): {', '.join(unknown)} "
                               f"(proofs-check --list prints the claim ids)")
        plots = args.plots
        if args.report and not plots:
            rp = Path(args.report)
            plots = str(rp.with_name(rp.stem + "_figures"))
        from .figures import matplotlib_available
        if args.plots and not matplotlib_available():
            raise BadInput("--plots needs matplotlib: pip install 'exactlearn[campaign]'")
        if not matplotlib_available():
            plots = None
        if args.report:                   # output paths are checked before anything runs
            check_output_path(args.report, "--report", directory=False)
        if plots:
            check_output_path(plots, "--plots" if args.plots else "--report's figures",
                              directory=True)
        try:
            ex = make_executor(args.scheduler, args.workers or 1, timeout=args.scheduler_timeout)
        except ExecutorError as exc:
            raise BadInput(str(exc)) from None
        from .report import run_info
        info = run_info(argv, args.seed, _level(args), args.scale, ex.describe())
        selected = args.only or list(registry)
        progress = make_progress(args.quiet, len(selected) + (1 if plots else 0))
        figures, campaigns = [], {}
        with progress if progress is not None else _NoProgress():
            rows = run_claims(selected, quick=not _level(args) == "full", seed=args.seed, executor=ex,
                              tiny=args.tiny, scale=args.scale, reporter=progress)
            if plots:
                from .figures import make_figures
                if progress is not None:
                    progress.bars.update(progress.claims, description="figures")
                    progress.phase("figure campaigns")
                figures, campaigns = make_figures(rows, plots, ex, seed=args.seed, level=_level(args),
                                                  scale=args.scale, progress=progress)
                if progress is not None:
                    progress.bars.advance(progress.claims)
    except BadInput as exc:
        print(f"proofs-check: error: {exc}", file=sys.stderr)
        return 2
    except ExecutorError as exc:          # the executor lost its workers mid-run
        print(f"proofs-check: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("proofs-check: interrupted", file=sys.stderr)
        return 130
    finally:
        if ex is not None:
            ex.close()
    wall = time.perf_counter() - t_start
    info["wall_seconds"] = round(wall, 3)
    ignored = [r["id"] for r in rows if r.get("scaled") is False]
    if ignored:
        print(f"proofs-check: note: --scale {args.scale} not applied by {', '.join(ignored)} "
              f"(they size their campaigns themselves)", file=sys.stderr)
    if args.report:
        from .report import write_report
        write_report(args.report, rows, info, figures, campaigns, wall_seconds=wall)
    if args.json:
        print(json.dumps({"claims": rows, "quick": _level(args) != "full", "level": _level(args),
                          "seed": args.seed, "executor": info["executor"], "run": info,
                          "figures": [f.to_json() for f in figures],
                          "figure_campaigns": campaigns}, default=str))
    else:
        print(table(rows))
        for f in figures:
            print(f"figure: {f.path}" if f.path else f"figure {f.name}: not drawn: {f.note}")
        if args.report:
            print(f"report: {args.report}")
    return 1 if any(r["status"] in (REFUTED, INCONCLUSIVE) for r in rows) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
