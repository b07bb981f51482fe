"""The tasks a cluster runs for one prime (:mod:`~exactlearn.pipeline.distributed`; docs:
explanation/performance.md#scale): the plan's groups of configurations (:func:`groups`), asking
a chunk (:func:`ask_task`), the analysis of group 0 (:func:`first_task`) and of every other
chunk (:func:`analyse_task`), and the certificate on a chunk (:func:`certify_task`,
:func:`confirm_task`).  Module-level, so they pickle by reference.
"""

from __future__ import annotations

import threading

from exactlearn.errors import ExactLearnError
from exactlearn.model import HeadEvaluator
from exactlearn.oracle import Oracle
from exactlearn.pipeline import analysis
from exactlearn.pipeline.certify import certify_plan
from exactlearn.pipeline.cluster_counts import Tap
from exactlearn.pipeline.match import label_cells


def groups(plan) -> list:
    """Config indices per group: group 0 = final token x_1; group i = (x_i, .) and the
    across configuration of i.

    >>> from exactlearn.pipeline.plan import paper_plan
    >>> plan = paper_plan([[1, 0], [0, 1]], [[1, 1], [0, 1]], 1)
    >>> [[plan.configs[n].kind[0] + str(plan.configs[n].i) for n in g] for g in groups(plan)]
    [['b0', 'b0', 'w0'], ['b1', 'b1', 'w1', 'a1']]
    """
    out = [[] for _ in range(plan.d + 1 if plan.bias else plan.d)]     # biases: x_0 .. x_d
    for n, c in enumerate(plan.configs):
        out[c.i].append(n)
    return out


# -- tasks (run on the workers; module-level so they pickle by reference) ------------------
#: Per worker process and thread: the Oracle or HeadEvaluator of the current run and prime
#: (built once, its per-final-token work and the field's power cache kept across tasks).
_WORKER: dict = {}


def _cached(run, kind, K, make):
    """``make()`` once per (run, kind, prime, thread) on this worker; the entries of other
    runs and, on this thread, of other primes are dropped (a run asks its primes one after
    another: at d = 384 each prime's oracle and evaluator hold the heads anew, hundreds of
    MB), and at most four are kept per thread."""
    key = (run, kind, K.p, K.omega, threading.get_ident())
    got = _WORKER.get(key)
    if got is None:
        for old in [k for k in _WORKER if k[0] != run
                    or (k[4] == key[4] and (k[2], k[3]) != (key[2], key[3]))]:
            del _WORKER[old]
        mine = [k for k in _WORKER if k[4] == key[4]]
        for old in mine[:max(0, len(mine) - 3)]:
            del _WORKER[old]
        got = _WORKER[key] = make()
    return got


def ask_task(model, K, plan, ns, shared, run=None, tally=None) -> tuple:
    """Ask configurations ``ns`` (and the shared query when ``shared``) of a model through
    ``K``: ``(y_shared, {n: [ints]}, queries, max_length, seconds, tallied)``, the counts
    those of this task alone; ``tallied`` when they are also in the driver's tally
    (``tally``: its folder, the run and the stage;
    :class:`~exactlearn.pipeline.cluster_counts.Tap`)."""
    oracle = _cached(run, "oracle", K, lambda: Oracle(model, K)) if run else Oracle(model, K)
    oracle.reset()
    tap = Tap(tally)
    oracle.listener = tap.note if tap.fd is not None else None
    try:
        def one(tokens):
            tap.check()
            return int(oracle(tokens))
        y0 = one(plan.configs[ns[0]].tokens(0)) if shared else None
        values = {}
        for n in ns:            # a = x + e once per configuration, not kept on the plan
            a, x = plan.configs[n].summed(), plan.configs[n].x
            values[n] = [one([a] * k + [x]) for k in range(1, 2 * plan.H + 1)]
        return y0, values, oracle.queries, oracle.max_length, oracle.seconds, tap.fd is not None
    finally:
        oracle.listener = None
        tap.close()


def field_values(K, asked) -> tuple:
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
    matching configurations' poles): ``(V, {n: poles}, {n: logs}, cells, c)`` as residues
    (``c`` the constant of the plan for biases, ``f((x_0)) - V.x_0``, else None), or the
    ExactLearnError raised (the driver replays the serial analysis).  The group's limits are
    checked as the serial analysis checks them."""
    K = _hinted(K, hints)
    y0, values = field_values(K, asked)
    try:
        rfs, poles_of, V = analysis.first_group(plan, y0, values, K)
        c0 = y0 - analysis.dot(V, plan.X[0], K) if plan.bias else None
        joint: dict = {}
        ns = sorted(values)
        for n in ns:
            analysis.check_limit(plan, n, rfs[n], V, K, c0)
        for n in ns:
            if plan.configs[n].kind != "basis":
                analysis.joint_poles(plan, n, rfs, poles_of, joint, K)
        cells = label_cells(plan, poles_of, K, [])
    except ExactLearnError as exc:
        return exc
    return ([int(x) for x in V], {n: [(int(r), int(c)) for r, c in poles_of[n]] for n in ns},
            _logs(K, plan, poles_of, ns), _ints(cells), None if c0 is None else int(c0))


def _ints(cells) -> dict:
    return {key: [(int(r), int(c)) for r, c in pl] for key, pl in cells.items()}


def analyse_task(K, plan, asked, first, hints=None) -> dict | Exception | None:
    """Interpolate, limit-check and read the poles of one chunk of groups >= 1 (the serial
    steps), label its cells and take their logs: ``{(i, j): [D log rho_h, head by head]}``
    (a pole whose log fails as ``("rho", rho)``: the driver's own ``K.log`` then raises the
    serial error), the ExactLearnError raised, or None when the group of x_1 failed
    (``first``, the result of :func:`first_task`).  Only what the solve reads travels: at
    d = 384 the labelled poles and a log per pole were about 500 MB on the driver.
    Residues travel as ints (flint elements do not pickle)."""
    if isinstance(first, Exception):
        return None
    K = _hinted(K, hints)
    V = [K(x) for x in first[0]]
    c0 = None if first[4] is None else K(first[4])         # the plan for biases: c
    first_poles = {n: [(K(r), K(c)) for r, c in p] for n, p in first[1].items()}
    _, values = field_values(K, asked)
    ns = sorted(values)
    ks = [K(k) for k in range(2 * plan.H + 1)]
    rfs: dict = {}
    poles_of = dict(first_poles)
    joint: dict = {}
    try:
        vx = analysis.distinct_dots(V, [plan.configs[n].x for n in ns], K)
        analysis.fit(rfs, ns, [vx[plan.configs[n].x] if c0 is None else c0 + vx[plan.configs[n].x]
                               for n in ns], values, ks, plan.H, K)
        for n in ns:
            analysis.check_limit(plan, n, rfs[n], V, K, c0)
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
    logs = _logs(K, plan, poles_of, ns)
    out = {}
    for key, pl in cells.items():
        if key[0] in rows:
            lg = logs[plan.index("basis", *key)]
            out[key] = [("rho", int(r)) if lg[int(r)] is None else lg[int(r)] for r, _ in pl]
    return out


def certify_task(K, plan, asked, heads, run, token) -> int | tuple:
    """Certify one group's answers: the number checked, or, when some value is not
    reproduced, the first observation that fails as ``(y_shared or None, {n: answers})``
    (ints; the driver replays the certificate on it to report it, and only it travels:
    a refuted confirmation at d = 384 would otherwise bring all 7 million answers back).
    ``heads`` is sent once per round (a task's result); its evaluator is built once per
    worker and round (``token``)."""
    ev = _cached(run, token, K, lambda: HeadEvaluator(heads, plan.d, K))
    y0, values = field_values(ev.K, asked)
    try:
        return certify_plan(heads, plan, y0, values, ev.K, configs=sorted(values), evaluator=ev)
    except ExactLearnError:
        return _first_failure(heads, plan, asked, y0, values, ev)


def _first_failure(heads, plan, asked, y0, values, ev) -> tuple:
    """The first of a chunk's observations that ``certify_plan`` refutes, in its order (the
    shared query first), as ``(y_shared or None, {n: answers})`` in ints."""
    def fails(y, configs) -> bool:
        try:
            certify_plan(heads, plan, y, values, ev.K, configs=configs, evaluator=ev)
        except ExactLearnError:
            return True
        return False
    if y0 is not None and fails(y0, []):
        return asked[0], {}
    n = next((n for n in sorted(values) if fails(None, [n])), None)
    return None, ({} if n is None else {n: asked[1][n]})


def confirm_task(model, K, plan, ns, shared, heads, run, token, tally=None) -> tuple:
    """Ask one chunk modulo the confirmation prime and certify ``heads`` on it, in one
    task (the answers never travel): ``(n certified or the first failure, the answers
    when shared)`` (:func:`certify_task`), the counts of the ask following
    (:func:`ask_task`)."""
    asked = ask_task(model, K, plan, ns, shared, run, tally)
    n = certify_task(K, plan, asked, heads, run, token)
    return (n, asked[:2] if shared else None) + asked[2:]


def ask_counts(asked) -> tuple:
    """The counts of an ask task, without its answers (sent back small), and whether they
    are in the tally."""
    return asked[2], asked[3], asked[4], asked[5]
