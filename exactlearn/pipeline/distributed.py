"""One learn spread over a Dask cluster: the paper plan's configurations, group by group
(docs: explanation/performance.md#scale; arXiv:2608.03294, the plan of docs: explanation/algorithm.md#how-it-works).

The 2d^2 - 1 configurations are independent until matching, except that every
configuration outside the group of x_1 needs V (from that group) for its k = 0 value,
and a matching configuration needs the poles of its two basis configurations.  So the
unit of work is a *group*: group 0 holds the configurations with final token x_1 (and
the shared query); group i >= 1 holds (x_i, e_j), (x_i, e_1 + e_j) for every j and the
across configuration (x_1 + x_i, e_j(i)), whose other basis configuration (x_1, e_j(i))
is in group 0 (the groups >= 1 travel in chunks, about four per worker thread: fewer,
larger tasks).  One analysis prime runs on the cluster with Dask's own futures
(the plan's configurations and the model are each the result of a task, ``submit`` with
futures as arguments; no scheduler of our own), the driver stopping twice:

1. **ask and analyse**: every chunk's queries are asked on the workers when the black
   box is a model (:class:`~exactlearn.oracle.Oracle`: the model is sent once and
   evaluated there, one oracle per worker and prime), else here and the answers
   sent as tasks; the answers stay on the workers.  A task fed by group 0's answers reads its
   fits, poles and V (:func:`~exactlearn.pipeline.analysis.first_group`), and every other
   chunk's analysis task, fed by its answers and that result, interpolates,
   limit-checks, reads the poles (the steps of the serial
   :func:`~exactlearn.pipeline.analysis.analyse`) and takes the discrete logs of its
   basis poles.  Only poles, logs and counts come back.  Matching and the solve run here
   (:func:`~exactlearn.pipeline.analysis.finish`, the logs looked up by rho).
2. **certify**: every chunk's answers are recomputed from the recovered heads on the
   worker that holds them (:func:`~exactlearn.pipeline.certify.certify_plan` on that
   chunk).

The confirmation prime is one round: each task asks its chunk and certifies the heads
on it, and only the counts come back.

Every step is the serial one applied to the same values, so the heads, the counts and
the report are those of the serial run.  A failure anywhere (a degenerate draw, a
certificate that fails) is replayed here on all the answers with the serial code, so
its message is the serial one too.  The one difference from a serial run: a query that
raises in the oracle (a softmax denominator vanishing modulo a prime, probability about
2^-100) stops the serial run at that query, while the other groups' queries were already
asked on the cluster and are counted.

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

**A worker that dies** costs recomputation, never a hang or a raw traceback: the shared
data (the plan, the model, the heads, a callable box's answers) are tasks the scheduler
can recompute (``scatter`` cannot: lost scattered data is lost for good), and every wait
looks at the cluster each POLL_SECONDS.  A stage fails with
:class:`~exactlearn.errors.ClusterError` (``status`` failed, the reason "the Dask cluster
failed: ...", its answers counted, no redraw) when the cluster has had no live worker for
NO_WORKER_SECONDS (30 s), when a task has killed Dask's ``allowed-failures`` + 1 workers
(``KilledWorker``, at once), when the scheduler reports a task erred or forgotten whose
result never arrives (checked every 5 polls), or when the scheduler connection is lost
(docs/explanation/performance.md, "A worker that dies").
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import struct
import tempfile
import threading
import time
import uuid
import weakref

from exactlearn.errors import ClusterError, ExactLearnError
from exactlearn.model import HeadEvaluator
from exactlearn.oracle import Oracle
from exactlearn.pipeline import analysis
from exactlearn.pipeline.certify import certify_plan
from exactlearn.pipeline.match import label_cells
from exactlearn.progress import current


def groups(plan) -> list:
    """Config indices per group: group 0 = final token x_1; group i = (x_i, .) and the
    across configuration of i.

    >>> from exactlearn.pipeline.plan import paper_plan
    >>> plan = paper_plan([[1, 0], [0, 1]], [[1, 1], [0, 1]], 1)
    >>> [[plan.configs[n].kind[0] + str(plan.configs[n].i) for n in g] for g in groups(plan)]
    [['b0', 'b0', 'w0'], ['b1', 'b1', 'w1', 'a1']]
    """
    out = [[] for _ in range(plan.d)]
    for n, c in enumerate(plan.configs):
        out[c.i].append(n)
    return out


# -- tasks (run on the workers; module-level so they pickle by reference) ------------------
#: Per worker process and thread: the Oracle or HeadEvaluator of the current run and prime
#: (built once, its per-final-token work and the field's power cache kept across tasks).
_WORKER: dict = {}


def _cached(run, kind, K, make):
    """``make()`` once per (run, kind, prime, thread) on this worker; the entries of other
    runs are dropped, and at most four are kept per thread."""
    key = (run, kind, K.p, K.omega, threading.get_ident())
    got = _WORKER.get(key)
    if got is None:
        for old in [k for k in _WORKER if k[0] != run]:
            del _WORKER[old]
        mine = [k for k in _WORKER if k[4] == key[4]]
        for old in mine[:max(0, len(mine) - 3)]:
            del _WORKER[old]
        got = _WORKER[key] = make()
    return got


#: One execution's counts in its tally file: queries, longest query, oracle seconds.
_RECORD = struct.Struct("<qqd")


class _Tap:
    """The worker's side of the tally (:class:`_Tally`): one file per execution of an ask
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


def ask_task(model, K, plan, ns, shared, run=None, tally=None) -> tuple:
    """Ask configurations ``ns`` (and the shared query when ``shared``) of a model through
    ``K``: ``(y_shared, {n: [ints]}, queries, max_length, seconds, tallied)``, the counts
    those of this task alone; ``tallied`` when they are also in the driver's tally
    (``tally``: its folder, the run and the stage; :class:`_Tap`)."""
    oracle = _cached(run, "oracle", K, lambda: Oracle(model, K)) if run else Oracle(model, K)
    oracle.reset()
    tap = _Tap(tally)
    oracle.listener = tap.note if tap.fd is not None else None
    try:
        def one(tokens):
            tap.check()
            return int(oracle(tokens))
        y0 = one(plan.configs[ns[0]].tokens(0)) if shared else None
        values = {n: [one(plan.configs[n].tokens(k)) for k in range(1, 2 * plan.H + 1)]
                  for n in ns}
        return y0, values, oracle.queries, oracle.max_length, oracle.seconds, tap.fd is not None
    finally:
        oracle.listener = None
        tap.close()


def _field_values(K, asked) -> tuple:
    y0, values = asked[0], asked[1]
    return (None if y0 is None else K(y0)), {n: [K(y) for y in ys] for n, ys in values.items()}


def _logs(K, plan, poles_of, ns) -> dict:
    """``{n: {rho: D log rho}}`` for the basis configurations among ``ns`` (``K.log``; the
    driver labels the poles by head, then looks the logs up), None for a pole whose log
    fails (the driver's own ``K.log`` then raises the serial error)."""
    out = {}
    for n in ns:
        if plan.configs[n].kind != "basis":
            continue
        got = {}
        for r, _ in poles_of[n]:
            try:
                q = K.log(r)
                got[int(r)] = int(q.numerator) * (K.D // int(q.denominator))
            except ExactLearnError:
                got[int(r)] = None
        out[n] = got
    return out


def _hinted(K, hints):
    """K with the exponents another prime found for these configurations (the driver's
    :meth:`~exactlearn.fields.modular.Modular.know_exponents`, which does not pickle)."""
    if hints:
        K.know_exponents(hints)
    return K


def first_task(K, plan, asked, hints=None) -> tuple | Exception:
    """The group of x_1 (:func:`~exactlearn.pipeline.analysis.first_group`, then its
    matching configurations' poles): ``(V, {n: poles}, {n: logs})`` as residues, or the
    ExactLearnError raised (the driver replays the serial analysis)."""
    K = _hinted(K, hints)
    y0, values = _field_values(K, asked)
    try:
        rfs, poles_of, V = analysis.first_group(plan, y0, values, K)
        joint: dict = {}
        ns = sorted(values)
        for n in ns:
            if plan.configs[n].kind != "basis":
                analysis.joint_poles(plan, n, rfs, poles_of, joint, K)
        cells = label_cells(plan, poles_of, K, [])
    except ExactLearnError as exc:
        return exc
    return ([int(x) for x in V], {n: [(int(r), int(c)) for r, c in poles_of[n]] for n in ns},
            _logs(K, plan, poles_of, ns), _ints(cells))


def _ints(cells) -> dict:
    return {key: [(int(r), int(c)) for r, c in pl] for key, pl in cells.items()}


def analyse_task(K, plan, asked, first, hints=None) -> dict | Exception | None:
    """Interpolate, limit-check and read the poles of one chunk of groups >= 1 (the serial
    steps), and the logs of its basis poles: ``({n: poles}, {n: logs})``, the
    ExactLearnError raised, or None when the group of x_1 failed (``first``, the result of
    :func:`first_task`).  Residues travel as ints (flint elements do not pickle)."""
    if isinstance(first, Exception):
        return None
    K = _hinted(K, hints)
    V = [K(x) for x in first[0]]
    first_poles = {n: [(K(r), K(c)) for r, c in p] for n, p in first[1].items()}
    _, values = _field_values(K, asked)
    ns = sorted(values)
    ks = [K(k) for k in range(2 * plan.H + 1)]
    rfs: dict = {}
    poles_of = dict(first_poles)
    joint: dict = {}
    try:
        analysis.fit(rfs, ns, [analysis.dot(V, plan.configs[n].x, K) for n in ns], values,
                     ks, plan.H, K)
        for n in ns:
            analysis.check_limit(plan, n, rfs[n], V, K)
        for n in ns:
            if plan.configs[n].kind == "basis":
                analysis.basis_poles(plan, n, rfs, poles_of, joint, K)
        for n in ns:
            if plan.configs[n].kind != "basis":
                analysis.joint_poles(plan, n, rfs, poles_of, joint, K)
        rows = sorted({plan.configs[n].i for n in ns})
        cells = label_cells(plan, poles_of, K, [(i, j) for i in rows for j in range(plan.d)])
    except ExactLearnError as exc:
        return exc
    return ({key: pl for key, pl in _ints(cells).items() if key[0] in rows},
            _logs(K, plan, poles_of, ns))


def certify_task(K, plan, asked, heads, run, token) -> int | None:
    """Certify one group's answers: the number checked, or None when some value is not
    reproduced (the driver replays the certificate to report it).  ``heads`` is
    sent once per round (a task's result); its evaluator is built once per worker and round
    (``token``)."""
    ev = _cached(run, token, K, lambda: HeadEvaluator(heads, plan.d, K))
    y0, values = _field_values(ev.K, asked)
    try:
        return certify_plan(heads, plan, y0, values, ev.K, configs=sorted(values), evaluator=ev)
    except ExactLearnError:
        return None


def confirm_task(model, K, plan, ns, shared, heads, run, token, tally=None) -> tuple:
    """Ask one chunk modulo the confirmation prime and certify ``heads`` on it, in one
    task (the answers never travel): ``(n certified, None)``, or ``(None, asked)`` when
    some value is not reproduced (the driver replays the certificate on ``asked``); the
    counts of the ask follow (:func:`ask_task`)."""
    asked = ask_task(model, K, plan, ns, shared, run, tally)
    n = certify_task(K, plan, asked, heads, run, token)
    return (n, asked[:2] if n is None or shared else None) + asked[2:]


# -- the driver ------------------------------------------------------------------------------
#: A stage fails once the cluster has had no live worker for this many seconds.
NO_WORKER_SECONDS = 30.0

#: After a stage, how long the driver waits for ask tasks still running to stop.
STOP_SECONDS = 30.0

#: How often the driver looks at the cluster while it waits (seconds).
POLL_SECONDS = 1.0


def _value(x):
    """``x`` as a task's result: data the workers share that the scheduler can recompute
    when the worker holding it dies (``scatter`` cannot: lost scattered data is lost)."""
    return x


class _Tally:
    """The driver's side of the count of answered queries (module docstring, "Counts"): a
    private folder that every ask execution's :class:`_Tap` file lands in, when the worker
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


class ClusterPlan:
    """A paper plan spread over a Dask ``Client``: one :meth:`run_prime` per prime.

    A worker that dies costs recomputation, not counts or a hang (module docstring,
    "A worker that dies"): the shared data are tasks the scheduler can recompute, every
    wait looks at the cluster every POLL_SECONDS, and the cluster's own failures end the
    stage with :class:`~exactlearn.errors.ClusterError`, its answered queries counted."""

    def __init__(self, client, plan, oracle):
        self.client = client
        self.plan = plan
        self.model = oracle.model if isinstance(oracle, Oracle) else None
        self.token = uuid.uuid4().hex
        self.tally = _Tally(self.token)
        self.lost: set = set()
        self._stage = None
        self._suspect: set = set()
        try:
            nthreads = client.nthreads()
            self._seen = set(nthreads)
            marker = self.tally.marker()
            # every worker sees the tally: the answers of one that dies are still counted
            self.shared = marker is not None and all(client.run(os.path.exists, marker).values())
            # group 0 alone (its answers come here), the others in about 4 chunks per worker
            # thread: fewer, larger tasks (each builds its oracle and caches once)
            gs = groups(plan)
            slots = max(1, 4 * sum(nthreads.values()))
            rest = gs[1:]
            size = max(1, -(-len(rest) // slots))
            self.groups = [gs[0]] + [sum(rest[t:t + size], []) for t in range(0, len(rest), size)]
            # the workers need the configurations, not the 4Hd^2 Query objects (10 MB pickled
            # at d = 64); tasks, not scatter, so that a dead worker's copy is recomputed
            self._plan_f = client.submit(_value, dataclasses.replace(plan, queries=[]), pure=False)
            self._model_f = (client.submit(_value, self.model, pure=False)
                             if self.model is not None else None)
        except ExactLearnError:
            raise
        except Exception as exc:            # distributed's own: the scheduler is gone, ...
            raise ClusterError(_describe(exc)) from None

    # -- waiting, counting and failing ----------------------------------------------------
    def _watch(self) -> int:
        """The number of live workers now; a worker seen before and gone now is lost."""
        now = set(self.client.nthreads())
        self.lost |= self._seen - now
        self._seen |= now
        return len(now)

    def _results(self, futs) -> list:
        """The results of ``futs``, waiting while the cluster has a live worker: an
        ExactLearnError a task raised is raised here; ClusterError once the cluster has had
        no live worker for NO_WORKER_SECONDS, or when a task errs otherwise (KilledWorker:
        Dask's ``allowed-failures`` workers died running it) or is cancelled."""
        futs = list(futs)
        idle = None
        polls = 0
        while True:
            until = time.monotonic() + POLL_SECONDS
            while not all(f.done() for f in futs) and time.monotonic() < until:
                time.sleep(0.005)
            polls += 1
            if polls % 5 == 0 and not all(f.done() for f in futs):
                self._check_scheduler([f for f in futs if not f.done()])
            for f in futs:
                if f.status == "error":
                    exc = f.exception()
                    if isinstance(exc, ExactLearnError):
                        raise exc
                    raise ClusterError(f"a task failed ({_describe(exc)})")
                if f.status == "cancelled":
                    raise ClusterError("a task was cancelled by the scheduler")
            if all(f.status == "finished" for f in futs):
                try:
                    return [f.result(timeout=5 * POLL_SECONDS) for f in futs]
                except TimeoutError:        # its worker died since: recomputed, wait again
                    pass
            if self._watch():
                idle = None
            elif idle is None:
                idle = time.monotonic()
            elif time.monotonic() - idle > NO_WORKER_SECONDS:
                raise ClusterError(f"no live Dask worker for {NO_WORKER_SECONDS:g} s")

    def _check_scheduler(self, futs) -> None:
        """ClusterError when the scheduler has given up on a task whose future here still
        waits, at two checks in a row (an error whose traceback the client failed to read,
        a task it forgot; a report merely on its way arrives in between): the future would
        wait forever."""
        keys = [f.key for f in futs]

        def states(dask_scheduler=None):      # a closure: pickled by value, no import there
            return [getattr(dask_scheduler.tasks.get(k), "state", None) for k in keys]
        suspect = {k for k, state in zip(keys, self.client.run_on_scheduler(states))
                   if state in (None, "erred", "forgotten")}
        for f in futs:
            if f.key in suspect and f.key in self._suspect and not f.done():
                raise ClusterError("the scheduler gave up on a task whose result never "
                                   "arrived here")
        self._suspect = suspect

    def _tally(self):
        return self.tally.arg(self._stage)

    def _count(self, rec, stage) -> str:
        """Add what the executions of ``stage`` answered (the tally) to ``rec``; a note
        naming any answers that cannot be counted (empty when none)."""
        got, late = self.tally.collect(stage)
        self._add_counts(rec, got)
        missing = []
        if late:
            missing.append(f"{late} ask task(s) still running {STOP_SECONDS:g} s after the "
                           f"stage ended: their later answers are not counted")
        if self.lost and not self.shared:
            missing.append(f"{len(self.lost)} worker(s) lost on a cluster whose workers do not "
                           f"all share this machine's file system: the queries a lost worker "
                           f"answered before it died cannot be counted")
        return "; ".join(missing)

    @contextlib.contextmanager
    def _stage_of(self, rec):
        """One stage (a prime's run, a confirmation): the queries its ask tasks answered
        are counted on every exit, the cluster's own failures (distributed's
        ``CommClosedError``, ``KilledWorker``, ``FutureCancelledError``, ...) become
        ClusterError, and a result whose counts could miss answers is not returned."""
        stage = self._stage = uuid.uuid4().hex
        try:
            yield
        except ExactLearnError as exc:
            note = self._count(rec, stage)
            if note:
                raise ClusterError(f"{exc.kind}: {exc}; {note}") from None
            raise
        except Exception as exc:
            note = self._count(rec, stage)
            raise ClusterError(_describe(exc) + (f"; {note}" if note else "")) from None
        try:
            if not self.shared:             # a worker lost since the last look
                self._watch()
        except Exception as exc:            # noqa: BLE001 -- distributed's own
            note = self._count(rec, stage)
            raise ClusterError(_describe(exc) + (f"; {note}" if note else "")) from None
        note = self._count(rec, stage)
        if note:
            raise ClusterError(note)

    def _add_counts(self, rec, counts) -> None:
        for q, length, seconds in counts:
            rec.add_remote(q, length, seconds)
            rec.oracle.add_remote(q, length, seconds)

    # -- the stages -------------------------------------------------------------------------
    def ask(self, rec, K) -> list:
        """Round 1: futures of every group's answers, asked through ``rec`` (a
        :class:`~exactlearn.oracle.Recorder`): on the workers when the black box is a model
        (their counts added to ``rec`` and the box by :meth:`counted` and the stage's
        tally), else here and the answers sent as tasks the scheduler can recompute."""
        plan, client = self.plan, self.client
        if self._model_f is not None:
            return [client.submit(ask_task, self._model_f, K, self._plan_f, ns, g == 0,
                                  self.token, self._tally(), pure=False)
                    for g, ns in enumerate(self.groups)]
        y_shared, values = analysis.ask_plan(plan, rec)
        return [client.submit(_value, (int(y_shared) if g == 0 else None,
                                       {n: [int(y) for y in values[n]] for n in ns}), pure=False)
                for g, ns in enumerate(self.groups)]

    def counted(self, rec, futs) -> None:
        """Wait for the ask tasks and add the counts that are not in the tally (a worker
        not sharing this file system; a remote failure is raised here)."""
        if self._model_f is not None:
            got = self._results([self.client.submit(_counts, f, pure=False) for f in futs])
            self._add_counts(rec, [c[:3] for c in got if not c[3]])

    def gather(self, futs, K) -> tuple:
        """Every answer here, in field elements: ``(y_shared, values)``."""
        y_shared, values = None, {}
        for asked in self._results(futs):
            y0, vs = _field_values(K, asked)
            y_shared = y0 if y0 is not None else y_shared
            values.update(vs)
        return y_shared, values

    def analyse(self, rec, futs, K) -> tuple:
        """Rounds 1 and 2 (the analysis tasks follow the ask tasks without a stop here),
        then the matching: the recovered canonical heads (or the serial failure)."""
        plan, client = self.plan, self.client
        expected = getattr(K, "expected_exponents", None) or {}

        def hints(g):                  # another prime's exponents for these configurations
            return {n: expected[n] for n in self.groups[g] if n in expected} or None
        first = client.submit(first_task, K, self._plan_f, futs[0], hints(0), pure=False)
        tasks = [client.submit(analyse_task, K, self._plan_f, f, first, hints(g), pure=False)
                 for g, f in enumerate(futs[1:], start=1)]
        self.counted(rec, futs)
        got0 = self._results([first])[0]
        if isinstance(got0, Exception):
            client.cancel(tasks)
            return analysis.analyse(plan, *self.gather(futs, K), K, None)
        cells, logs = dict(got0[3]), dict(got0[2])
        failed = False
        for got in self._results(tasks):
            if not isinstance(got, tuple):
                failed = True
                continue
            cells.update(got[0])
            logs.update(got[1])
        if failed:        # the serial run's failure, message and all
            return analysis.analyse(plan, *self.gather(futs, K), K, None)
        try:
            return self.finish(cells, logs, K)
        except ExactLearnError:
            return analysis.analyse(plan, *self.gather(futs, K), K, None)
    def finish(self, cells, logs, K):
        """:func:`~exactlearn.pipeline.analysis.finish` from the cells labelled on the
        workers (:func:`~exactlearn.pipeline.match.label_cells`, chunk by chunk) and the
        discrete logs taken there (looked up by configuration and rho)."""
        from gmpy2 import mpq
        from exactlearn.model import canonicalize
        from exactlearn.pipeline.solve import solve_heads
        plan = self.plan
        # the solve reads the c-values of the row of x_1 and the logs: the other cells stay ints
        labelled = {key: pl if key[0] else [(K(r), K(c)) for r, c in pl] for key, pl in cells.items()}

        def log(i, j, h):
            rho = labelled[(i, j)][h][0]
            n = logs[plan.index("basis", i, j)].get(int(rho))
            return K.log(K(rho)) if n is None else mpq(n, K.D)
        return canonicalize(solve_heads(plan, labelled, K, log))

    def certify(self, futs, heads, K) -> int:
        """Round 3: every answer recomputed from ``heads`` on the worker that holds it; a
        failure is replayed here with the serial certificate."""
        client = self.client
        heads_f = client.submit(_value, heads, pure=False)
        token = uuid.uuid4().hex
        where = client.who_has(futs)
        tasks = [client.submit(certify_task, K, self._plan_f, f, heads_f, self.token, token, pure=False,
                               **({"workers": list(where[f.key]), "allow_other_workers": True}
                                  if where.get(f.key) else {}))
                 for f in futs]
        counts = self._results(tasks)
        if any(c is None for c in counts):
            y_shared, values = self.gather(futs, K)
            return certify_plan(heads, self.plan, y_shared, values, K)
        return sum(counts)

    def run_prime(self, rec, K) -> tuple:
        """Ask, analyse and certify the plan modulo one prime: ``(heads, n_certified)``."""
        current().phase(current().asking, self.plan.count)        # progress= (counts come when gathered)
        with self._stage_of(rec):
            futs = self.ask(rec, K)
            heads = self.analyse(rec, futs, K)
            n = self.certify(futs, heads, K)
            self.client.cancel(futs)
        return heads, n

    def confirm(self, rec, heads, K) -> int:
        """Ask the plan modulo the confirmation prime and certify ``heads`` there: one task
        per chunk that asks and certifies (a model), else :meth:`ask` and :meth:`certify`.
        The answers of the group of x_1 stay here (``first_group``, ints): a refuted
        confirmation's v comes from them (:func:`~exactlearn.pipeline.multimodular.solve_v_plan`)."""
        self.first_group = None
        current().phase(current().asking, self.plan.count)        # progress=
        with self._stage_of(rec):
            if self._model_f is None:
                futs = self.ask(rec, K)
                self.first_group = self._results([futs[0]])[0][:2]
                return self.certify(futs, heads, K)
            client = self.client
            heads_f = client.submit(_value, heads, pure=False)
            token = uuid.uuid4().hex
            tasks = [client.submit(confirm_task, self._model_f, K, self._plan_f, ns, g == 0,
                                   heads_f, self.token, token, self._tally(), pure=False)
                     for g, ns in enumerate(self.groups)]
            got = self._results(tasks)
            self._add_counts(rec, [r[2:5] for r in got if not r[5]])
            self.first_group = got[0][1]      # the group of x_1's answers: v modulo this prime
            if any(r[0] is None for r in got):    # the serial certificate, on the chunks that failed
                failing = [r[1] for r in got if r[0] is None]
                y0 = next((a[0] for a in failing if a[0] is not None), None)
                values = {n: [K(y) for y in ys] for a in failing for n, ys in a[1].items()}
                replayed = certify_plan(heads, self.plan, None if y0 is None else K(y0), values, K,
                                        configs=sorted(values))
                return replayed + sum(r[0] for r in got if r[0] is not None)
            return sum(r[0] for r in got)


def _describe(exc) -> str:
    """One line for an exception of the cluster's: its type and message."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _counts(asked) -> tuple:
    """The counts of an ask task, without its answers (sent back small), and whether they
    are in the tally."""
    return asked[2], asked[3], asked[4], asked[5]
