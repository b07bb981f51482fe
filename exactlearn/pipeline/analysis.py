"""The exact analysis core of the paper's plan (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works).

:func:`ask_plan` asks every query of a plan (the plan is data: its length is
the count).  :func:`analyse` turns the answers into canonical heads: Cauchy
interpolation of each family, poles and c-values, V from the group of x_1,
the limit check ``f(q_k) -> V.a``, poles of the matching configurations among
products of basis poles, labelling by head, and the solve.
:func:`analyse_and_certify` adds the certificate, over the field's analysis
fields in turn (:func:`over_analysis_fields`).

>>> from exactlearn import MultiHeadAttention, Oracle
>>> from exactlearn.fields import Rational
>>> from exactlearn.pipeline.plan import paper_plan
>>> model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2])])
>>> plan = paper_plan([[1, 2], [3, 1]], [[1, 0], [1, 1]], 1)
>>> y0, values = ask_plan(plan, Oracle(model, Rational()))
>>> analyse(plan, y0, values, Rational(scale=1), None) == model.canonical_heads()
True
"""

from __future__ import annotations

import flint

from exactlearn.algebra import linalg
from exactlearn.errors import (BadReduction, CertificateError, DegenerateDraw,
                               ReconstructionError)
from exactlearn.fields.base import Field
from exactlearn.fields.multimodular import analysis_fields
from exactlearn.model import canonicalize
from exactlearn.pipeline.certify import certify, certify_plan
from exactlearn.pipeline.heap import paused_gc
from exactlearn.pipeline.interpolate import (interpolate_many, poles, poles_among, poles_expected,
                                             poles_paired)
from exactlearn.pipeline.match import label_basis
from exactlearn.pipeline.plan import FamilyQueries, across_direction
from exactlearn.pipeline.solve import solve_heads, solve_heads_bias
from exactlearn.progress import current


def ask_plan(plan, ask) -> tuple:
    """Ask every query of the plan (the plan is data: its length is the count).

    Returns the shared k = 0 value and ``{config index: [f(q_1), ..., f(q_2H)]}``."""
    values: dict = {}
    y_shared = None
    many = getattr(ask, "ask_all", None)        # a Recorder: counted once for the plan
    queries = plan.queries
    current().phase(current().asking, len(queries))      # progress=: "ask" or "confirm"
    if many is not None:
        ys = many(plan.tokens_of(queries))
        if type(queries) is FamilyQueries and queries.per:     # in order: slices, no Query
            per = queries.per
            return ys[0], {n: ys[1 + n * per:1 + (n + 1) * per] for n in range(queries.configs)}
    else:
        ys = map(ask, plan.tokens_of(queries))
    for q, y in zip(queries, ys):
        if q.k == 0:
            y_shared = y
        else:
            values.setdefault(q.config, []).append(y)
    return y_shared, values


def ask_and_analyse(plan, ask, K: Field, trace) -> tuple:
    """Ask the plan, then analyse it in K (no certificate): the recovered heads."""
    y_shared, values = ask_plan(plan, ask)
    return analyse(plan, y_shared, values, K, trace)


def analyse(plan, y_shared, values, K: Field, trace) -> tuple:
    """Interpolate, read poles, get V, match and solve: the recovered canonical heads
    (for the plan for biases, :func:`analyse_bias`).  The cyclic garbage collector is
    paused meanwhile (:func:`~exactlearn.pipeline.heap.paused_gc`)."""
    with paused_gc():
        return _analyse(plan, y_shared, values, K, trace)


def _analyse(plan, y_shared, values, K: Field, trace) -> tuple:
    if plan.bias:
        return analyse_bias(plan, y_shared, values, K, trace)
    d, H = plan.d, plan.H
    configs = plan.configs
    current().phase("analyse", len(configs), "configurations")     # progress=
    tick = current().advance
    # 2. the group of x_1 shares the k = 0 query; it gives V (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works)
    rfs, poles_of, V = first_group(plan, y_shared, values, K)
    ks = [K(k) for k in range(2 * H + 1)]

    # 3. every other configuration takes its k = 0 value V.x by computation
    rest = [n for n in range(len(configs)) if n not in rfs]
    vx, ve = distinct_dots(V, [c.x for c in configs], K), distinct_dots(V, [c.e for c in configs], K)
    fit(rfs, rest, [vx[configs[n].x] for n in rest], values, ks, H, K)
    for n, c in enumerate(configs):                  # V.a = V.x + V.e (a = x + e)
        check_limit(plan, n, rfs[n], V, K, va=vx[c.x] + ve[c.e])
    # poles: root finding for the basis configurations -- over F_p, (x_i, e_j) with i, j >= 2
    # from (x_i, e_1) and (x_i, e_1 + e_j) by gcds instead (poles_paired, the same poles); a
    # matching configuration's poles can only be products of two basis configurations' rho
    # (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works), so they are looked for among those first
    # (poles_among falls back to roots)
    joint_roots: dict = {}
    for n, c in enumerate(configs):
        if c.kind == "basis" and n not in poles_of:
            basis_poles(plan, n, rfs, poles_of, joint_roots, K)
        tick(c.kind == "basis")
    for n, c in enumerate(configs):
        if c.kind != "basis":
            joint_poles(plan, n, rfs, poles_of, joint_roots, K)
        tick(c.kind != "basis")
    fits = {n: (rfs[n], poles_of[n]) for n in rfs} if trace is not None else None
    del rfs        # the families' P and Q are not read again: freed before the solve
    out, labelled = finish(plan, poles_of, K)
    if trace is not None:
        trace.extend(trace_rows(plan, fits, labelled, V, y_shared, values, K))
    return out


def analyse_bias(plan, y_shared, values, K: Field, trace) -> tuple:
    """:func:`analyse` for the plan for biases (docs: explanation/biases.md).

    f(q_k) = c + V.a + sum_h c_h / (1 + k rho_h) on every family: the group of x_0
    gives V as before, then ``c = f((x_0)) - V.x_0``; every other k = 0 value is
    computed as ``c + V.x`` and every limit checked against ``c + V.a``.  The across
    configurations (2 x_i - x_0, e_j) have the poles ``rho(x_i)^2 / rho(x_0)``; the
    labelled poles give ``[W_h | u_h] = E^{-T} M_h X~^{-1}``
    (:func:`~exactlearn.pipeline.solve.solve_heads_bias`).  Returns a
    :class:`~exactlearn.model.HeadSet` carrying c."""
    H = plan.H
    configs = plan.configs
    rfs, poles_of, V = first_group(plan, y_shared, values, K)
    c0 = y_shared - dot(V, plan.X[0], K)
    ks = [K(k) for k in range(2 * H + 1)]
    rest = [n for n in range(len(configs)) if n not in rfs]
    fit(rfs, rest, [c0 + dot(V, configs[n].x, K) for n in rest], values, ks, H, K)
    for n in range(len(configs)):
        check_limit(plan, n, rfs[n], V, K, c0)
    joint_roots: dict = {}
    for n, c in enumerate(configs):
        if c.kind == "basis" and n not in poles_of:
            basis_poles(plan, n, rfs, poles_of, joint_roots, K)
    for n, c in enumerate(configs):
        if c.kind != "basis":
            joint_poles(plan, n, rfs, poles_of, joint_roots, K)
    fits = {n: (rfs[n], poles_of[n]) for n in rfs} if trace is not None else None
    del rfs        # the families' P and Q are not read again: freed before the solve
    labelled = label_basis(plan, poles_of, K)
    out = canonicalize(solve_heads_bias(plan, labelled, K), K.to_param(c0), True)
    if trace is not None:
        trace.extend(trace_rows(plan, fits, labelled, V, y_shared, values, K))
        trace.append({"constant": c0})
    return out


def finish(plan, poles_of, K) -> tuple:
    """4. label every basis configuration by head (products in the field); 5. solve for
    W_h (param domain) and v_h (field, then to_param).  Returns ``(canonical heads,
    labelled poles)``."""
    labelled = label_basis(plan, poles_of, K)
    return canonicalize(solve_heads(plan, labelled, K)), labelled


def first_group(plan, y_shared, values, K) -> tuple:
    """The group of x_1 (it shares the k = 0 query): its fits, the poles of its basis
    configurations, and V from them (``E^T V = (V.e_j)_j``).  Returns ``(rfs, poles_of, V)``."""
    d, H = plan.d, plan.H
    ks = [K(k) for k in range(2 * H + 1)]
    rfs: dict = {}
    poles_of: dict = {}
    first = [n for n, c in enumerate(plan.configs) if c.shares_k0]
    fit(rfs, first, [y_shared] * len(first), values, ks, H, K)
    for j in range(d):
        n = plan.index("basis", 0, j)
        got = _expected(rfs[n], n, K, True)
        if not got and j > 0 and not plan.bias:     # (x_1, e_j) paired with (x_1, e_1 + e_j)
            got = _paired(rfs[n], rfs[plan.index("within", 0, j)],
                          poles_of[plan.index("basis", 0, 0)], K)
        poles_of[n] = got or poles(rfs[n], K)
    Et = [[K(plan.E[j][r]) for r in range(d)] for j in range(d)]      # rows e_j^T
    sums = [-_sum((c for _, c in poles_of[plan.index("basis", 0, j)]), K) for j in range(d)]
    V = linalg.matvec(linalg.inverse(Et, K), sums, K)               # E^T V = (V.e_j)_j
    return rfs, poles_of, V


def fit(rfs, ns, y0s, values, ks, H, K) -> None:
    """Interpolate configurations ``ns`` (their k = 0 values ``y0s``) into ``rfs``."""
    for n, rf in zip(ns, interpolate_many(ks, [[y0] + values[n] for n, y0 in zip(ns, y0s)], H, K)):
        rfs[n] = rf


def check_limit(plan, n, rf, V, K, constant=None, va=None) -> None:
    """lim f(q_k) = V.a (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works), or DegenerateDraw;
    with the plan for biases ``c + V.a`` (docs: explanation/biases.md).  ``va``: V.a
    already computed (:func:`dots`)."""
    c = plan.configs[n]
    if constant is None:
        if not K.eq(rf.limit(K), dot(V, c.summed(), K) if va is None else va):
            raise DegenerateDraw(f"configuration {c.kind}{(c.i + 1, c.j + 1)}: the limit of f(q_k) "
                                 f"is not V.a (more heads than the bound H = {plan.H}, an additive "
                                 f"constant, or a bias)")
    elif not K.eq(rf.limit(K), constant + dot(V, c.summed(), K)):
        raise DegenerateDraw(f"configuration {c.kind}{(c.i, c.j + 1)}: the limit of f(q_k) "
                             f"is not c + V.a (more heads than the bound H = {plan.H}, or a black "
                             f"box outside the biased model class)")


def basis_poles(plan, n, rfs, poles_of, joint_roots, K) -> None:
    """The poles of basis configuration n into ``poles_of`` (over F_p (x_i, e_j), i, j >= 2,
    by :func:`~exactlearn.pipeline.interpolate.poles_paired`; the rho of (x_i, e_1 + e_j)
    it finds go into ``joint_roots``)."""
    c = plan.configs[n]
    got = _expected(rfs[n], n, K, True)
    if got is not None:
        poles_of[n] = got
        return
    if c.i > 0 and c.j > 0:
        nw = plan.index("within", c.i, c.j)
        alphas = [r for r, _ in poles_of[plan.index("basis", c.i, 0)]]
        got = poles_paired(rfs[n], rfs[nw], alphas, K)
    elif c.i > 0 and not plan.bias:
        poles_of[n] = first_column(plan, c.i, rfs, poles_of, K) or poles(rfs[n], K)
        return
    if got is None:
        poles_of[n] = poles(rfs[n], K)
    else:
        poles_of[n], joint_roots[nw] = got


def first_column(plan, i, rfs, poles_of, K):
    """The poles of (x_i, e_1), i >= 2, without root finding, or None (then the caller
    finds the roots): the across configuration (x_1 + x_i, e_j), j = j(i), has the rho
    ``rho(x_1, e_j) * rho(x_i, e_j)``, so :func:`~exactlearn.pipeline.interpolate.poles_paired`
    gives the poles of (x_i, e_j) from the known ones of (x_1, e_j) (stored in
    ``poles_of``), and then those of (x_i, e_1) from (x_i, e_1 + e_j), whose rho are
    ``rho(x_i, e_1) * rho(x_i, e_j)``.  Each list found is the one :func:`poles` returns
    (:func:`~exactlearn.pipeline.interpolate.poles_paired`), so the analysis is the same."""
    j = across_direction(i, plan.d)
    nb = plan.index("basis", i, j)
    got = poles_of.get(nb)
    if not got:                 # a chunk of a cluster may lack a configuration: then None
        rf_b, rf_a = rfs.get(nb), rfs.get(plan.index("across", i, j))
        known = poles_of.get(plan.index("basis", 0, j))
        if rf_b is None or rf_a is None or not known:
            return None
        got = _paired(rf_b, rf_a, known, K)
    if not got or j == 0:
        return got
    poles_of[nb] = got
    rf_b, rf_w = rfs.get(plan.index("basis", i, 0)), rfs.get(plan.index("within", i, j))
    return None if rf_b is None or rf_w is None else _paired(rf_b, rf_w, got, K)


def _paired(rf_b, rf_w, known, K):
    """:func:`~exactlearn.pipeline.interpolate.poles_paired`'s poles of ``rf_b`` from
    ``rf_w``, whose rho are those of ``rf_b`` times the ``known`` poles' (one each), or None."""
    got = poles_paired(rf_b, rf_w, [r for r, _ in known], K)
    return None if got is None else got[0]


def joint_poles(plan, n, rfs, poles_of, joint_roots, K) -> None:
    """The poles of matching configuration n, among the products of its two basis
    configurations' rho (:func:`~exactlearn.pipeline.interpolate.poles_among`)."""
    c = plan.configs[n]
    got = _expected(rfs[n], n, K, False)
    if got is not None:
        poles_of[n] = got
        return
    known = joint_roots.get(n)
    if known is not None:       # the products paired by poles_paired: all the poles, in order
        poles_of[n] = poles_among(rfs[n], known, K, known)
        return
    i0 = 0 if c.kind == "across" else c.i
    a = poles_of[plan.index("basis", i0, 0 if c.kind == "within" else c.j)]
    b = poles_of[plan.index("basis", c.i, c.j)]
    if plan.bias and c.kind == "across":    # rho(2 x_i - x_0) = rho(x_i)^2 / rho(x_0)
        poles_of[n] = poles_among(rfs[n], [rb * rb / ra for ra, _ in a for rb, _ in b], K)
        return
    poles_of[n] = poles_among(rfs[n], [ra * rb for ra, _ in a for rb, _ in b], K)


def _expected(rf, n, K, ordered):
    """Configuration n's poles from the exponents another prime found
    (:meth:`~exactlearn.fields.modular.Modular.know_exponents`, tested as roots by
    :func:`~exactlearn.pipeline.interpolate.poles_expected`), or None."""
    expected = getattr(K, "expected_exponents", None)
    ns = expected.get(n) if expected else None
    if not ns:
        return None
    return poles_expected(rf, [K.power(x) for x in ns], K, ordered)


def dot(u, x, K):
    return _sum((a * K(b) for a, b in zip(u, x)), K)


def distinct_dots(u, xs, K) -> dict:
    """``{x: dot(u, x, K)}`` over the distinct vectors of ``xs`` (:func:`dots`): a plan's
    2d^2 - 1 configurations have only about 2d distinct final tokens x and directions e.

    >>> from exactlearn.fields import Modular
    >>> K = Modular(p=97)
    >>> distinct_dots([K(3), K(5)], [(1, 2), (0, 1), (1, 2)], K) == {(1, 2): K(13), (0, 1): K(5)}
    True
    """
    keys = list(dict.fromkeys(tuple(x) for x in xs))
    return dict(zip(keys, dots(u, keys, K)))


def dots(u, xs, K) -> list:
    """``[dot(u, x, K) for x in xs]``; over F_p with integer vectors one ``fmpz_mod_mat``
    product (the same field elements).

    >>> from exactlearn.fields import Modular
    >>> K = Modular(p=97)
    >>> u, xs = [K(3), K(5)], [(1, 2), (-4, 7), (0, 0)]
    >>> dots(u, xs, K) == [dot(u, x, K) for x in xs]
    True
    """
    ctx = getattr(K, "scalar_ctx", None)
    if (ctx is None or not xs or not u
            or not all(type(b) is int for x in xs for b in x) or any(len(x) != len(u) for x in xs)):
        return [dot(u, x, K) for x in xs]
    d = len(u)
    cols = flint.fmpz_mod_mat(d, len(xs), [x[r] for r in range(d) for x in xs], ctx)
    return (flint.fmpz_mod_mat(1, d, [K(a) for a in u], ctx) * cols).entries()


def analyse_and_certify(plan, y_shared, values, K, observations, trace) -> tuple:
    """Analyse in ``K`` -- or in each of :func:`~exactlearn.fields.multimodular.analysis_fields`
    ``(K)`` in turn (the rational field: its reductions modulo large primes) -- and
    certify the result over ``K`` itself: on ``observations``, or with ``observations``
    None on the plan's own (``y_shared``, ``values``; :func:`~exactlearn.pipeline.certify.certify_plan`).

    Only a bad reduction (a denominator divisible by p, a rational past the
    reconstruction bound, a certificate that fails after reconstruction) moves
    on to the next prime; no further queries are asked.
    """
    def analyse_and_certify(A):
        if A is K:
            recovered = analyse(plan, y_shared, values, A, trace)
        else:
            vals = {c: [A(y) for y in vs] for c, vs in values.items()}
            recovered = analyse(plan, A(y_shared), vals, A, trace)
        if observations is None:         # the plan's own observations, in its order
            return recovered, certify_plan(recovered, plan, y_shared, values, K)
        return recovered, certify(recovered, plan.d, observations, K)

    return over_analysis_fields(K, analyse_and_certify, trace)


def over_analysis_fields(K, run, trace=None):
    """``run(A)`` for A in ``analysis_fields(K)`` (or just K), moving on to the
    next only after a bad reduction: a denominator divisible by p, a rational
    past the reconstruction bound, or a certificate over K that fails after
    reconstruction (``run`` analyses in A and certifies over K)."""
    fields = analysis_fields(K)
    for n, A in enumerate(fields):
        try:
            return run(A)
        except (BadReduction, ReconstructionError, CertificateError):
            if n == len(fields) - 1:
                raise
            if trace is not None:
                trace.clear()
    raise AssertionError("unreachable")


def _sum(it, K):
    acc = K.zero
    for x in it:
        acc = acc + x
    return acc


def trace_rows(plan, fits, labelled, V, y_shared, values, K) -> list:
    rows = []
    for n, c in enumerate(plan.configs):
        rf, pl = fits[n]
        rows.append({"config": c, "y0": y_shared if c.shares_k0 else None,
                     "values": values[n], "P": rf.P, "Q": rf.Q, "poles": pl,
                     "labelled": labelled.get((c.i, c.j)) if c.kind == "basis" else None})
    rows.append({"V": V})
    return rows
