"""The count of a cluster's answered queries and the cluster's waits
(:mod:`~exactlearn.pipeline.distributed`; docs/explanation/performance.md, "A worker that
dies"): an ask execution's tally file (:class:`Tap`, on the worker), the driver's folder of
them (:class:`Tally`), the timeouts of the driver's waits, shared data as tasks
(:func:`shared_value`) and the one line naming a cluster's failure
(:func:`describe_cluster_error`).

**Counts.**  Every answer a worker's oracle gives is added to the recorders and to the
driver's oracle (``add_remote``), whichever execution of a task gave it: a task that a
dead worker was running, and a task Dask runs again because the worker holding its
result died, each count what they were answered.  A query counts as *answered* once the
oracle has returned its value to the ask task, which records the count before it uses
the value: each execution of an ask task keeps one file in a private folder of the
driver's (:class:`_Tally`), rewritten after every answer and locked while the task
runs.  At the end of a stage (a prime's run, a confirmation) the driver marks the stage
stopped (its tasks still running raise before their next query), waits for every lock
(a dead process holds none; at most STOP_SECONDS) and adds what the files gained.  So
the killed execution's answers count up to the last one its oracle returned; a query
it was computing when it died was never answered and does not count.  A worker that
does not share this machine's file system (a remote ``--scheduler`` cluster) sends its
counts with its result instead: exact while no worker dies, and when one does, the
stage fails rather than return counts that could miss its answers.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import time
import uuid
import weakref


#: One execution's counts in its tally file: queries, longest query, oracle seconds.
_RECORD = struct.Struct("<qqd")


class Tap:
    """The worker's side of the tally (:class:`Tally`): one file per execution of an ask
    task, locked while it runs, holding the counts of every answer the oracle has given
    so far -- a store into the file's shared mapping from the oracle's own count, the first
    thing after each answer (:attr:`~exactlearn.oracle.CountingOracle.listener`), no
    system call in between.  A worker that dies leaves its file behind with the answers it
    was given; a driver that has stopped the stage (``stop-<stage>``) makes it stop before
    the next query.  None of this when the driver's folder is not on this worker's file
    system (``self.fd`` None): the counts then travel with the result."""

    def __init__(self, tally):
        self.fd = None
        if tally is None:
            return
        folder, run, stage = tally
        try:
            import fcntl
        except ImportError:                 # no flock here: the result carries the counts
            return
        if not os.path.exists(os.path.join(folder, "run-" + run)):
            return
        import mmap
        self.stop = os.path.join(folder, "stop-" + stage)
        fd = os.open(os.path.join(folder, "ask-" + uuid.uuid4().hex), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, _RECORD.size)
        self.map = mmap.mmap(fd, _RECORD.size)
        self.fd = fd

    def check(self) -> None:
        """Raise when the driver has stopped this stage (the task's result is not wanted)."""
        if self.fd is not None and os.path.exists(self.stop):
            raise RuntimeError("exactlearn: the driver has stopped this stage")

    def note(self, oracle) -> None:
        """Record ``oracle``'s counts: the longest query and the seconds, then the count of
        queries (a process killed between the two stores leaves that answer uncounted and
        its time counted, never the reverse)."""
        struct.pack_into("<qd", self.map, 8, oracle.max_length, oracle.seconds)
        struct.pack_into("<q", self.map, 0, oracle.queries)

    def close(self) -> None:
        if self.fd is not None:
            self.map.close()
            os.close(self.fd)               # releases the lock
            self.fd = None


# -- the driver's waits ---------------------------------------------------------------------------
#: A stage fails once the cluster has had no live worker for this many seconds.
NO_WORKER_SECONDS = 30.0

#: After a stage, how long the driver waits for ask tasks still running to stop.
STOP_SECONDS = 30.0

#: How often the driver looks at the cluster while it waits (seconds).
POLL_SECONDS = 1.0


def shared_value(x):
    """``x`` as a task's result: data the workers share that the scheduler can recompute
    when the worker holding it dies (``scatter`` cannot: lost scattered data is lost)."""
    return x


class Tally:
    """The driver's side of the count of answered queries (module docstring, "Counts"): a
    private folder that every ask execution's :class:`Tap` file lands in, when the worker
    shares this machine's file system; ``folder`` None without ``fcntl``."""

    def __init__(self, run):
        self.run = run
        self.counted: dict = {}
        try:
            import fcntl  # noqa: F401
        except ImportError:
            self.folder = None
            return
        self.folder = tempfile.mkdtemp(prefix="exactlearn-tally-")
        with open(os.path.join(self.folder, "run-" + run), "w"):
            pass
        weakref.finalize(self, shutil.rmtree, self.folder, True)

    def arg(self, stage):
        """What an ask task needs to find its folder and its stage's stop file."""
        return None if self.folder is None else (self.folder, self.run, stage)

    def marker(self) -> str | None:
        return None if self.folder is None else os.path.join(self.folder, "run-" + self.run)

    def collect(self, stage) -> tuple:
        """Stop ``stage`` (its ask tasks raise before their next query), wait for every
        execution's lock, and read what each answered since the last collect:
        ``([(queries, max_length, seconds)], late)``, ``late`` the executions still holding
        their lock after STOP_SECONDS (their files are read as they stand)."""
        if self.folder is None:
            return [], 0
        import fcntl
        with open(os.path.join(self.folder, "stop-" + stage), "w"):
            pass
        out, late = [], 0
        deadline = time.monotonic() + STOP_SECONDS
        for name in sorted(os.listdir(self.folder)):
            if not name.startswith("ask-"):
                continue
            fd = os.open(os.path.join(self.folder, name), os.O_RDONLY)
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            late += 1
                            break
                        time.sleep(0.005)
                data = os.pread(fd, _RECORD.size, 0)
            finally:
                os.close(fd)
            if len(data) != _RECORD.size:
                continue
            q, length, seconds = _RECORD.unpack(data)
            q0, s0 = self.counted.get(name, (0, 0.0))
            if (q, seconds) != (q0, s0):
                out.append((q - q0, length, seconds - s0))
                self.counted[name] = (q, seconds)
        return out, late


def describe_cluster_error(exc) -> str:
    """One line for an exception of the cluster's: its type and message."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
