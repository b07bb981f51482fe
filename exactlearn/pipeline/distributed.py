"""One learn spread over a Dask cluster: the paper plan's configurations, group by group
(README, "Scale"; arXiv:2608.03294, the plan of README "How it works").

The 2d^2 - 1 configurations are independent until matching, except that every
configuration outside the group of x_1 needs V (from that group) for its k = 0 value,
and a matching configuration needs the poles of its two basis configurations.  So the
unit of work is a *group*: group 0 holds the configurations with final token x_1 (and
the shared query); group i >= 1 holds (x_i, e_j), (x_i, e_1 + e_j) for every j and the
across configuration (x_1 + x_i, e_j(i)), whose other basis configuration (x_1, e_j(i))
is in group 0 (the groups >= 1 travel in chunks, about four per worker thread: fewer,
larger tasks).  One prime runs in three rounds on the cluster (Dask's own futures,
``scatter`` of the plan and the model, ``as_completed``; no scheduler of our own):

1. **ask**: every group's queries, on the workers when the black box is a model
   (:class:`~exactlearn.oracle.Oracle`: the model is scattered and evaluated there), else
   asked here and the answers scattered.  The answers stay on the workers.
2. **analyse**: group 0's answers come here: its fits, poles and V
   (:func:`~exactlearn.pipeline.analysis.first_group`); every other group is interpolated,
   limit-checked and its poles read on a worker, with the steps of the serial
   :func:`~exactlearn.pipeline.analysis.analyse`.  Matching and the solve run here
   (:func:`~exactlearn.pipeline.analysis.finish`).
3. **certify**: every group's answers are recomputed from the recovered heads on its
   worker (:func:`~exactlearn.pipeline.certify.certify_plan` on that group).

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

import uuid

from exactlearn.errors import ExactLearnError
from exactlearn.model import HeadEvaluator
from exactlearn.oracle import Oracle
from exactlearn.pipeline import analysis
from exactlearn.pipeline.certify import certify_plan


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
def ask_task(model, K, plan, ns, shared) -> tuple:
    """Ask configurations ``ns`` (and the shared query when ``shared``) of a model through
    ``K``: ``(y_shared, {n: [ints]}, queries, max_length, seconds)``."""
    oracle = Oracle(model, K)
    y0 = int(oracle(plan.configs[ns[0]].tokens(0))) if shared else None
    values = {n: [int(oracle(plan.configs[n].tokens(k))) for k in range(1, 2 * plan.H + 1)]
              for n in ns}
    return y0, values, oracle.queries, oracle.max_length, oracle.seconds


def _field_values(K, asked) -> tuple:
    y0, values = asked[0], asked[1]
    return (None if y0 is None else K(y0)), {n: [K(y) for y in ys] for n, ys in values.items()}


def analyse_task(K, plan, asked, V, first_poles) -> dict:
    """Interpolate, limit-check and read the poles of one group >= 1 (the serial steps):
    ``{n: poles}`` for its configurations, or the ExactLearnError raised.  V and the poles
    of the group of x_1 come as residues (flint elements do not pickle)."""
    V = [K(x) for x in V]
    first_poles = {n: [(K(r), K(c)) for r, c in p] for n, p in first_poles.items()}
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
    except ExactLearnError as exc:
        return exc
    return {n: [(int(r), int(c)) for r, c in poles_of[n]] for n in ns}


def log_task(K, rhos) -> list:
    """Discrete logs ``K.log`` of residues (one group's labelled rho): the exponents D*log."""
    out = []
    for r in rhos:
        q = K.log(K(r))
        out.append(int(q.numerator) * (K.D // int(q.denominator)))
    return out


_EVALUATORS: dict = {}


def certify_task(K, plan, asked, heads, token) -> int | None:
    """Certify one group's answers: the number checked, or None when some value is not
    reproduced (the driver replays the whole certificate to report it).  ``heads`` is
    scattered once per round; its evaluator is built once per worker and round (``token``)."""
    key = (token, K.p)
    ev = _EVALUATORS.get(key)
    if ev is None:
        _EVALUATORS.clear()
        ev = _EVALUATORS[key] = HeadEvaluator(heads, plan.d, K)
    y0, values = _field_values(ev.K, asked)
    try:
        return certify_plan(heads, plan, y0, values, ev.K, configs=sorted(values), evaluator=ev)
    except ExactLearnError:
        return None


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
        self.rows = [list(range(plan.d))[t:t + size] for t in range(0, plan.d, size)]
        self.model = oracle.model if isinstance(oracle, Oracle) else None
        self._plan_f = client.scatter(plan, broadcast=True, hash=False)
        self._model_f = (client.scatter(self.model, broadcast=True, hash=False)
                         if self.model is not None else None)

    def ask(self, rec, K) -> list:
        """Round 1: futures of every group's answers, asked through ``rec`` (a
        :class:`~exactlearn.oracle.Recorder`): on the workers when the black box is a model
        (their counts added to ``rec`` and the box), else here and the answers scattered."""
        plan, client = self.plan, self.client
        if self._model_f is not None:
            futs = [client.submit(ask_task, self._model_f, K, self._plan_f, ns, g == 0, pure=False)
                    for g, ns in enumerate(self.groups)]
            counts = [client.submit(_counts, f, pure=False) for f in futs]
            for c in counts:           # the answers stay on the workers; counts come back
                q, length, seconds = c.result()
                rec.add_remote(q, length, seconds)
                rec.oracle.add_remote(q, length, seconds)
            return futs
        y_shared, values = analysis.ask_plan(plan, rec)
        return client.scatter([(int(y_shared) if g == 0 else None,
                                {n: [int(y) for y in values[n]] for n in ns})
                               for g, ns in enumerate(self.groups)], hash=False)

    def gather(self, futs, K) -> tuple:
        """Every answer here, in field elements: ``(y_shared, values)``."""
        y_shared, values = None, {}
        for asked in self.client.gather(futs):
            y0, vs = _field_values(K, asked)
            y_shared = y0 if y0 is not None else y_shared
            values.update(vs)
        return y_shared, values

    def analyse(self, futs, K) -> tuple:
        """Round 2 and the matching: the recovered canonical heads (or the serial failure)."""
        from distributed import as_completed
        plan = self.plan
        y0, vals0 = _field_values(K, futs[0].result())
        try:
            rfs, poles_of, V = analysis.first_group(plan, y0, vals0, K)
        except ExactLearnError:
            return analysis.analyse(plan, *self.gather(futs, K), K, None)
        first = {n: [(int(r), int(c)) for r, c in poles_of[n]] for n in poles_of}
        Vi = [int(x) for x in V]
        # the group of x_1's own matching configurations are read here (the serial steps)
        joint: dict = {}
        for n in self.groups[0]:
            if plan.configs[n].kind != "basis":
                try:
                    analysis.joint_poles(plan, n, rfs, poles_of, joint, K)
                except ExactLearnError:
                    return analysis.analyse(plan, *self.gather(futs, K), K, None)
        tasks = [self.client.submit(analyse_task, K, self._plan_f, f, Vi, first, pure=False)
                 for f in futs[1:]]
        failed = False
        for fut in as_completed(tasks):
            got = fut.result()
            if isinstance(got, Exception):
                failed = True
                continue
            for n, pl in got.items():
                poles_of[n] = [(K(r), K(c)) for r, c in pl]
        if failed:        # the serial run's failure, message and all
            return analysis.analyse(plan, *self.gather(futs, K), K, None)
        try:
            return self.finish(poles_of, K)
        except ExactLearnError:
            return analysis.analyse(plan, *self.gather(futs, K), K, None)

    def finish(self, poles_of, K):
        """:func:`~exactlearn.pipeline.analysis.finish` with the discrete logs of each
        group's labelled rho taken on the workers."""
        from gmpy2 import mpq
        from distributed import as_completed
        from exactlearn.model import canonicalize
        from exactlearn.pipeline.match import label_basis
        from exactlearn.pipeline.solve import solve_heads
        plan = self.plan
        labelled = label_basis(plan, poles_of, K)
        m = len(labelled[(0, 0)])
        cells = [[(i, j, h) for i in rows for j in range(plan.d) for h in range(m)]
                 for rows in self.rows]
        tasks = {self.client.submit(log_task, K, [int(labelled[(i, j)][h][0]) for i, j, h in cells[t]],
                                    pure=False): t for t in range(len(cells))}
        logs: dict = {}
        for fut in as_completed(list(tasks)):
            for key, n in zip(cells[tasks[fut]], fut.result()):
                logs[key] = mpq(n, K.D)
        return canonicalize(solve_heads(plan, labelled, K, lambda i, j, h: logs[(i, j, h)]))

    def certify(self, futs, heads, K) -> int:
        """Round 3: every answer recomputed from ``heads`` on its worker; a failure is
        replayed here with the serial certificate."""
        from distributed import as_completed
        heads_f = self.client.scatter(heads, broadcast=True, hash=False)
        token = uuid.uuid4().hex
        tasks = [self.client.submit(certify_task, K, self._plan_f, f, heads_f, token, pure=False)
                 for f in futs]
        counts = [fut.result() for fut in as_completed(tasks)]
        if any(c is None for c in counts):
            y_shared, values = self.gather(futs, K)
            return certify_plan(heads, self.plan, y_shared, values, K)
        return sum(counts)


    def run_prime(self, rec, K) -> tuple:
        """Ask, analyse and certify the plan modulo one prime: ``(heads, n_certified)``."""
        futs = self.ask(rec, K)
        heads = self.analyse(futs, K)
        return heads, self.certify(futs, heads, K)

    def confirm(self, rec, heads, K) -> int:
        """Ask the plan modulo the confirmation prime and certify ``heads`` there."""
        return self.certify(self.ask(rec, K), heads, K)


def _counts(asked) -> tuple:
    """The counts of an ask task, without its answers (sent back small)."""
    return asked[2], asked[3], asked[4]
