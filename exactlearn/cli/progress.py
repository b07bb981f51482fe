"""``exactlearn learn``'s progress on stderr (docs: reference/cli.md#exactlearn-learn; howto/progress.md).

A rich bar on stderr shows the phase, the prime or attempt, and how much of the phase
is done out of its total (:class:`~exactlearn.progress.ProgressEvent`).  It is shown only
when stderr is a terminal, not with ``--quiet``, not when ``--json`` goes to a pipe or a
file, and not when rich is not installed (it is an optional dependency: the ``progress``,
``test``, ``campaign`` and ``dask`` extras).  It writes to stderr only: the output on
stdout is the same with or without it.
"""

from __future__ import annotations

import contextlib
import sys


def add_learn_options(lp) -> None:
    """``--quiet``: no progress on stderr."""
    lp.add_argument("--quiet", "-q", action="store_true",
                    help="no progress on stderr (default: a progress bar when stderr is a "
                         "terminal and rich is installed; never when --json goes to a pipe)")


def wanted(args, stderr=None, stdout=None) -> bool:
    """Whether ``learn`` shows progress: not ``--quiet``, stderr a terminal, and not
    ``--json`` to a pipe or a file."""
    stderr = sys.stderr if stderr is None else stderr
    stdout = sys.stdout if stdout is None else stdout

    def tty(stream):
        return bool(getattr(stream, "isatty", lambda: False)())
    if getattr(args, "quiet", False) or not tty(stderr):
        return False
    return not (getattr(args, "json", False) and not tty(stdout))


class RichBar:
    """One rich bar on stderr that follows the :class:`~exactlearn.progress.ProgressEvent`
    stream: a new phase (or prime, or attempt) starts it again."""

    def __init__(self, stream):
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn)
        self.bars = Progress(TextColumn("{task.description:<40}"), BarColumn(),
                             MofNCompleteColumn(), TextColumn("{task.fields[unit]}"),
                             TimeElapsedColumn(), console=Console(file=stream), transient=True)
        self.task = self.bars.add_task("starting", total=None, unit="")
        self._key = None

    def __call__(self, event) -> None:
        key = (event.phase, event.prime, event.attempt, event.detail)
        new = key != self._key
        if new:
            self._key = key
            self.bars.reset(self.task, total=event.total, description=event.describe(),
                            unit=event.unit)
        self.bars.update(self.task, completed=event.done, total=event.total, refresh=new)

    def __enter__(self):
        self.bars.start()
        return self

    def __exit__(self, *exc):
        self.bars.stop()
        return False


@contextlib.contextmanager
def progress_for(args, stream=None):
    """The ``progress=`` callback for ``learn`` (a :class:`RichBar`), or None when progress
    is off (:func:`wanted`) or rich is missing -- then nothing is shown and nothing fails."""
    stream = sys.stderr if stream is None else stream
    if not wanted(args, stream):
        yield None
        return
    try:
        bar = RichBar(stream)
    except ImportError:
        yield None
        return
    with bar:
        yield bar
