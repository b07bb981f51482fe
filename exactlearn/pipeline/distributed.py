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
asked on the cluster and are counted.  And a box outside the model class modulo a further
prime only: the v (and c) that prime's answers give join the CRT after a check on the group
of x_1 alone (its other answers stay on the workers), where the serial run checks them all;
the cluster run then fails later -- explicitly, every query counted -- with another message
("rational height exceeds what N primes reconstruct" against "the primes disagree").

**Counts.**  Every answer a worker's oracle gives is counted, whichever execution of a task
gave it, a dead worker's included (:mod:`~exactlearn.pipeline.cluster_counts`, where the
tally is described).

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

**Modules.** This module is the driver (:class:`ClusterPlan`); the tasks the workers run are
in :mod:`~exactlearn.pipeline.cluster_tasks`, the count of their answers and the driver's
timeouts in :mod:`~exactlearn.pipeline.cluster_counts`.  Their public names stay importable
from here.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid

from exactlearn.errors import ClusterError, ExactLearnError
from exactlearn.oracle import Oracle
from exactlearn.pipeline import analysis
from exactlearn.pipeline.certify import certify_plan
from exactlearn.pipeline.cluster_counts import (NO_WORKER_SECONDS, POLL_SECONDS, STOP_SECONDS,
                                                Tally, describe_cluster_error, shared_value)
from exactlearn.pipeline.cluster_tasks import (analyse_task, ask_counts, ask_task, certify_task,
                                               confirm_task, field_values, first_task, groups)
from exactlearn.progress import current

# the names this module had before its split stay importable from here
from exactlearn.pipeline.cluster_counts import Tap  # noqa: F401,E402


#: Most configurations in one chunk of groups (one ask, analysis and certificate task).
CHUNK_CONFIGS = 8192


class ClusterPlan:
    """A paper plan spread over a Dask ``Client``: one :meth:`run_prime` per prime.

    A worker that dies costs recomputation, not counts or a hang (module docstring,
    "A worker that dies"): the shared data are tasks the scheduler can recompute, every
    wait looks at the cluster every POLL_SECONDS, and the cluster's own failures end the
    stage with :class:`~exactlearn.errors.ClusterError`, its answered queries counted."""

    def __init__(self, client, plan, oracle):
        self.client = client
        self.plan = plan
        # the workers evaluate the model themselves only for an Oracle proper: a subclass may
        # answer otherwise (review helper-74: a shifted box was certified as its model), so
        # its own answers are asked here, as for any other black box
        self.model = oracle.model if type(oracle) is Oracle else None
        self.token = uuid.uuid4().hex
        self.tally = Tally(self.token)
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
            # thread: fewer, larger tasks (each builds its oracle and caches once), of at
            # most CHUNK_CONFIGS configurations (an analysis task's memory grows with its
            # chunk: at d = 384 four chunks per thread were 37,000 configurations each)
            gs = groups(plan)
            slots = max(1, 4 * sum(nthreads.values()))
            rest = gs[1:]
            size = max(1, min(-(-len(rest) // slots), CHUNK_CONFIGS // max(map(len, gs))))
            self.groups = [gs[0]] + [sum(rest[t:t + size], []) for t in range(0, len(rest), size)]
            # the plan's queries are computed, not stored (FamilyQueries); tasks, not
            # scatter, so that a dead worker's copy is recomputed
            self._plan_f = client.submit(shared_value, plan, pure=False)
            self._model_f = (client.submit(shared_value, self.model, pure=False)
                             if self.model is not None else None)
        except ExactLearnError:
            raise
        except Exception as exc:            # distributed's own: the scheduler is gone, ...
            raise ClusterError(describe_cluster_error(exc)) from None

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
                    raise ClusterError(f"a task failed ({describe_cluster_error(exc)})")
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
            raise ClusterError(describe_cluster_error(exc)
                               + (f"; {note}" if note else "")) from None
        try:
            if not self.shared:             # a worker lost since the last look
                self._watch()
        except Exception as exc:            # noqa: BLE001 -- distributed's own
            note = self._count(rec, stage)
            raise ClusterError(describe_cluster_error(exc)
                               + (f"; {note}" if note else "")) from None
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
        return [client.submit(shared_value, (int(y_shared) if g == 0 else None,
                                       {n: [int(y) for y in values[n]] for n in ns}), pure=False)
                for g, ns in enumerate(self.groups)]

    def counted(self, rec, futs) -> None:
        """Wait for the ask tasks and add the counts that are not in the tally (a worker
        not sharing this file system; a remote failure is raised here)."""
        if self._model_f is not None:
            got = self._results([self.client.submit(ask_counts, f, pure=False) for f in futs])
            self._add_counts(rec, [c[:3] for c in got if not c[3]])

    def gather(self, futs, K) -> tuple:
        """Every answer here, in field elements: ``(y_shared, values)``."""
        y_shared, values = None, {}
        for asked in self._results(futs):
            y0, vs = field_values(K, asked)
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
        c0 = None if got0[4] is None else K(got0[4])          # the plan for biases: c
        failed, row_logs = False, {}
        for got in self._results(tasks):
            if not isinstance(got, dict):
                failed = True
                continue
            row_logs.update(got)
        if failed:        # the serial run's failure, message and all
            return analysis.analyse(plan, *self.gather(futs, K), K, None)
        try:
            return self.finish(dict(got0[3]), dict(got0[2]), row_logs, K, c0)
        except ExactLearnError:
            return analysis.analyse(plan, *self.gather(futs, K), K, None)

    def finish(self, cells, logs, row_logs, K, c0=None):
        """:func:`~exactlearn.pipeline.analysis.finish` from the cells of the row of x_1
        and their logs (:func:`~exactlearn.pipeline.cluster_tasks.first_task`: poles and
        c-values, logs by configuration and rho) and the other rows' logs, head by head
        (``row_logs``, :func:`~exactlearn.pipeline.cluster_tasks.analyse_task`); with biases
        ``c0`` is the constant c (:func:`~exactlearn.pipeline.solve.solve_heads_bias`)."""
        from gmpy2 import mpq
        from exactlearn.model import canonicalize
        from exactlearn.pipeline.solve import solve_heads, solve_heads_bias
        plan = self.plan
        # the solve reads the c-values of the row of x_1 and every cell's logs
        labelled = {key: [(K(r), K(c)) for r, c in pl] for key, pl in cells.items()}

        def log(i, j, h):
            if i:
                n = row_logs[(i, j)][h]
                return K.log(K(n[1])) if isinstance(n, tuple) else mpq(n, K.D)
            rho = labelled[(i, j)][h][0]
            n = logs[plan.index("basis", i, j)].get(int(rho))
            return K.log(K(rho)) if n is None else mpq(n, K.D)
        if plan.bias:
            return canonicalize(solve_heads_bias(plan, labelled, K, log), K.to_param(c0), True)
        return canonicalize(solve_heads(plan, labelled, K, log))

    def certify(self, futs, heads, K) -> int:
        """Round 3: every answer recomputed from ``heads`` on the worker that holds it; a
        failure is replayed here with the serial certificate."""
        client = self.client
        heads_f = client.submit(shared_value, heads, pure=False)
        token = uuid.uuid4().hex
        where = client.who_has(futs)
        tasks = [client.submit(certify_task, K, self._plan_f, f, heads_f, self.token, token, pure=False,
                               **({"workers": list(where[f.key]), "allow_other_workers": True}
                                  if where.get(f.key) else {}))
                 for f in futs]
        counts = self._results(tasks)
        failing = [c for c in counts if not isinstance(c, int)]
        return self._replay(heads, failing, K) if failing else sum(counts)

    def _replay(self, heads, failing, K):
        """The serial certificate on the first failure of each failing chunk
        (:func:`~exactlearn.pipeline.cluster_tasks.certify_task`): it raises the error the
        serial run raises, the first failure in the plan's order.  A replay that passes
        would mean the workers and the driver disagree: an error, never a count."""
        y0 = next((a[0] for a in failing if a[0] is not None), None)
        values = {n: [K(y) for y in ys] for a in failing for n, ys in a[1].items()}
        certify_plan(heads, self.plan, None if y0 is None else K(y0), values, K,
                     configs=sorted(values))
        raise ClusterError("a worker's certificate failed where the driver's replay of it "
                           "passes: the cluster's arithmetic disagrees with this process's")

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
        confirmation's v comes from them (:func:`~exactlearn.pipeline.confirmation.solve_v_plan`)."""
        self.first_group = None
        current().phase(current().asking, self.plan.count)        # progress=
        with self._stage_of(rec):
            if self._model_f is None:
                futs = self.ask(rec, K)
                self.first_group = self._results([futs[0]])[0][:2]
                return self.certify(futs, heads, K)
            client = self.client
            heads_f = client.submit(shared_value, heads, pure=False)
            token = uuid.uuid4().hex
            tasks = [client.submit(confirm_task, self._model_f, K, self._plan_f, ns, g == 0,
                                   heads_f, self.token, token, self._tally(), pure=False)
                     for g, ns in enumerate(self.groups)]
            got = self._results(tasks)
            self._add_counts(rec, [r[2:5] for r in got if not r[5]])
            self.first_group = got[0][1]      # the group of x_1's answers: v modulo this prime
            failing = [r[0] for r in got if not isinstance(r[0], int)]
            return self._replay(heads, failing, K) if failing else sum(r[0] for r in got)
