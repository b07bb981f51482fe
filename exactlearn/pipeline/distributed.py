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
(``scatter`` of the plan's configurations and of the model, ``submit`` with futures as
arguments, ``as_completed``; no scheduler of our own), the driver stopping twice:

1. **ask and analyse**: every chunk's queries are asked on the workers when the black
   box is a model (:class:`~exactlearn.oracle.Oracle`: the model is scattered and
   evaluated there, one oracle per worker and prime), else here and the answers
   scattered; the answers stay on the workers.  A task fed by group 0's answers reads its
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
its message is the serial one too.  Counts: every query a worker's oracle answers is
added to the recorders and to the driver's oracle (``add_remote``).  The one difference
from a serial run: a query that raises in the oracle (a softmax denominator vanishing
modulo a prime, probability about 2^-100) stops the serial run at that query, while
the other groups' queries were already asked on the cluster and are counted.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid

from exactlearn.errors import ExactLearnError
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


def ask_task(model, K, plan, ns, shared, run=None) -> tuple:
    """Ask configurations ``ns`` (and the shared query when ``shared``) of a model through
    ``K``: ``(y_shared, {n: [ints]}, queries, max_length, seconds)``, the counts those of
    this task alone."""
    oracle = _cached(run, "oracle", K, lambda: Oracle(model, K)) if run else Oracle(model, K)
    oracle.reset()
    y0 = int(oracle(plan.configs[ns[0]].tokens(0))) if shared else None
    values = {n: [int(oracle(plan.configs[n].tokens(k))) for k in range(1, 2 * plan.H + 1)]
              for n in ns}
    return y0, values, oracle.queries, oracle.max_length, oracle.seconds


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
    scattered once per round; its evaluator is built once per worker and round (``token``)."""
    ev = _cached(run, token, K, lambda: HeadEvaluator(heads, plan.d, K))
    y0, values = _field_values(ev.K, asked)
    try:
        return certify_plan(heads, plan, y0, values, ev.K, configs=sorted(values), evaluator=ev)
    except ExactLearnError:
        return None


def confirm_task(model, K, plan, ns, shared, heads, run, token) -> tuple:
    """Ask one chunk modulo the confirmation prime and certify ``heads`` on it, in one
    task (the answers never travel): ``(n certified, None)``, or ``(None, asked)`` when
    some value is not reproduced (the driver replays the certificate on ``asked``); the
    counts of the ask follow."""
    asked = ask_task(model, K, plan, ns, shared, run)
    n = certify_task(K, plan, asked, heads, run, token)
    return (n, None if n is not None else asked[:2]) + asked[2:]


# -- the driver ------------------------------------------------------------------------------
class ClusterPlan:
    """A paper plan spread over a Dask ``Client``: one :meth:`run_prime` per prime."""

    def __init__(self, client, plan, oracle):
        self.client = client
        self.plan = plan
        # group 0 alone (its answers come here), the others in about 4 chunks per worker
        # thread: fewer, larger tasks (each builds its oracle and caches once)
        gs = groups(plan)
        slots = max(1, 4 * sum(client.nthreads().values()))
        rest = gs[1:]
        size = max(1, -(-len(rest) // slots))
        self.groups = [gs[0]] + [sum(rest[t:t + size], []) for t in range(0, len(rest), size)]
        self.model = oracle.model if isinstance(oracle, Oracle) else None
        self.token = uuid.uuid4().hex
        # the workers need the configurations, not the 4Hd^2 Query objects (10 MB pickled at d = 64)
        self._plan_f = client.scatter(dataclasses.replace(plan, queries=[]), broadcast=True, hash=False)
        self._model_f = (client.scatter(self.model, broadcast=True, hash=False)
                         if self.model is not None else None)

    def _add_counts(self, rec, counts) -> None:
        for q, length, seconds in counts:
            rec.add_remote(q, length, seconds)
            rec.oracle.add_remote(q, length, seconds)

    def ask(self, rec, K) -> list:
        """Round 1: futures of every group's answers, asked through ``rec`` (a
        :class:`~exactlearn.oracle.Recorder`): on the workers when the black box is a model
        (their counts added to ``rec`` and the box when :meth:`counted`), else here and the
        answers scattered."""
        plan, client = self.plan, self.client
        if self._model_f is not None:
            return [client.submit(ask_task, self._model_f, K, self._plan_f, ns, g == 0,
                                  self.token, pure=False)
                    for g, ns in enumerate(self.groups)]
        y_shared, values = analysis.ask_plan(plan, rec)
        return client.scatter([(int(y_shared) if g == 0 else None,
                                {n: [int(y) for y in values[n]] for n in ns})
                               for g, ns in enumerate(self.groups)], hash=False)

    def counted(self, rec, futs) -> None:
        """Wait for the ask tasks and add their counts (a remote failure is raised here)."""
        if self._model_f is not None:
            self._add_counts(rec, self.client.gather(
                [self.client.submit(_counts, f, pure=False) for f in futs]))

    def gather(self, futs, K) -> tuple:
        """Every answer here, in field elements: ``(y_shared, values)``."""
        y_shared, values = None, {}
        for asked in self.client.gather(futs):
            y0, vs = _field_values(K, asked)
            y_shared = y0 if y0 is not None else y_shared
            values.update(vs)
        return y_shared, values

    def analyse(self, rec, futs, K) -> tuple:
        """Rounds 1 and 2 (the analysis tasks follow the ask tasks without a stop here),
        then the matching: the recovered canonical heads (or the serial failure)."""
        from distributed import as_completed
        plan, client = self.plan, self.client
        expected = getattr(K, "expected_exponents", None) or {}

        def hints(g):                  # another prime's exponents for these configurations
            return {n: expected[n] for n in self.groups[g] if n in expected} or None
        first = client.submit(first_task, K, self._plan_f, futs[0], hints(0), pure=False)
        tasks = [client.submit(analyse_task, K, self._plan_f, f, first, hints(g), pure=False)
                 for g, f in enumerate(futs[1:], start=1)]
        self.counted(rec, futs)
        got0 = first.result()
        if isinstance(got0, Exception):
            client.cancel(tasks)
            return analysis.analyse(plan, *self.gather(futs, K), K, None)
        cells, logs = dict(got0[3]), dict(got0[2])
        failed = False
        for fut in as_completed(tasks):
            got = fut.result()
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
        from distributed import as_completed
        client = self.client
        heads_f = client.scatter(heads, broadcast=True, hash=False)
        token = uuid.uuid4().hex
        where = client.who_has(futs)
        tasks = [client.submit(certify_task, K, self._plan_f, f, heads_f, self.token, token, pure=False,
                               workers=list(where.get(f.key, ())) or None, allow_other_workers=True)
                 for f in futs]
        counts = [fut.result() for fut in as_completed(tasks)]
        if any(c is None for c in counts):
            y_shared, values = self.gather(futs, K)
            return certify_plan(heads, self.plan, y_shared, values, K)
        return sum(counts)

    def run_prime(self, rec, K) -> tuple:
        """Ask, analyse and certify the plan modulo one prime: ``(heads, n_certified)``."""
        current().phase(current().asking, self.plan.count)        # progress= (counts come when gathered)
        futs = self.ask(rec, K)
        heads = self.analyse(rec, futs, K)
        n = self.certify(futs, heads, K)
        self.client.cancel(futs)
        return heads, n

    def confirm(self, rec, heads, K) -> int:
        """Ask the plan modulo the confirmation prime and certify ``heads`` there: one task
        per chunk that asks and certifies (a model), else :meth:`ask` and :meth:`certify`."""
        current().phase(current().asking, self.plan.count)        # progress=
        if self._model_f is None:
            return self.certify(self.ask(rec, K), heads, K)
        client = self.client
        heads_f = client.scatter(heads, broadcast=True, hash=False)
        token = uuid.uuid4().hex
        tasks = [client.submit(confirm_task, self._model_f, K, self._plan_f, ns, g == 0,
                               heads_f, self.token, token, pure=False)
                 for g, ns in enumerate(self.groups)]
        got = client.gather(tasks)
        self._add_counts(rec, [r[2:] for r in got])
        if any(r[0] is None for r in got):    # the serial certificate, on the chunks that failed
            failing = [r[1] for r in got if r[0] is None]
            y0 = next((a[0] for a in failing if a[0] is not None), None)
            values = {n: [K(y) for y in ys] for a in failing for n, ys in a[1].items()}
            replayed = certify_plan(heads, self.plan, None if y0 is None else K(y0), values, K,
                                    configs=sorted(values))
            return replayed + sum(r[0] for r in got if r[0] is not None)
        return sum(r[0] for r in got)


def _counts(asked) -> tuple:
    """The counts of an ask task, without its answers (sent back small)."""
    return asked[2], asked[3], asked[4]
