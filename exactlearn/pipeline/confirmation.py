"""v modulo a further prime, with W exact (:mod:`~exactlearn.pipeline.multimodular`, step 3;
docs: explanation/multimodular.md): from a paper plan's answers (:func:`solve_v_plan`) or from
recorded observations (:func:`solve_v_observations`), the plan's exponents looked up from the
last prime's heads (:func:`plan_exponents`), and the checks that a confirmation's answers
determine v (:func:`check_design_rank_plan`, :func:`check_design_rank`).
"""

from __future__ import annotations

import flint
from gmpy2 import mpq

from exactlearn.errors import ExactLearnError, PrimesDisagree, SingularMatrix
from exactlearn.model import Head, HeadEvaluator, HeadSet
from exactlearn.pipeline.certify import certify, certify_plan
from exactlearn.pipeline.interpolate import batch_inverse


def solve_v_plan(W_set, plan, y_shared, values, Kc, certify_all=True) -> tuple:
    """v modulo ``Kc.p`` for heads with the exact ``W_set``, from a paper plan's answers
    there: for each direction e_j the family (x_1, e_j) gives
    ``f(q_k) = V.x_1 + sum_h t_h(k) v_h.e_j``, ``t_h(k) = k w_h / (k w_h + 1)``, a
    (2H+1) x (m+1) linear system (the one :func:`check_design_rank_plan` checks), and
    ``E^T v_h = (v_h.e_j)_j``.  Then (``certify_all``) every answer is recomputed from
    (W, v).  Returns ``(residue vectors in the order of W_set, n_certified)``; raises
    :class:`PrimesDisagree` when the system is undetermined or inconsistent, and
    :class:`CertificateError` when (W, v) do not reproduce an answer.

    The plan for biases (docs: explanation/biases.md): ``W_set`` holds each head's exact
    ``(W, u)``, the families are (x_0, e_j) with ``f(q_k) = c + V.x_0 + sum_h t_h(k) v_h.e_j``
    (``w_h = exp(e_j^T (W_h x_0 + u_h))``), the same system's first unknown is ``c + V.x_0``,
    so ``c`` follows once V is known; the residues end with ``(c,)``, as an analysis
    prime's do (:func:`~exactlearn.pipeline.crt.reconstruct_heads`)."""
    d, m = plan.d, len(W_set)
    if plan.bias:
        return _solve_v_plan_bias(W_set, plan, y_shared, values, Kc, certify_all)
    if m == 0:
        return [], (certify_plan((), plan, y_shared, values, Kc) if certify_all else 0)
    vs, _ = _v_from_first_group([Head(W, (mpq(0),) * d) for W in W_set], plan, y_shared, values, Kc)
    n_cert = 0
    if certify_all:
        n_cert = certify_plan([Head(W, v) for W, v in zip(W_set, vs)], plan, y_shared, values, Kc)
    return vs, n_cert


def _solve_v_plan_bias(W_set, plan, y_shared, values, Kc, certify_all) -> tuple:
    """:func:`solve_v_plan` for the plan for biases: ``(v residues + [(c,)], n_certified)``."""
    d = plan.d
    if not W_set:                          # no heads: f = c on every query, b = c = f((x_0))
        vs, b = [], Kc(y_shared)
    else:
        vs, b = _v_from_first_group([Head(W, (mpq(0),) * d, u) for W, u in W_set], plan,
                                    y_shared, values, Kc)
    V = [sum((Kc(v[r]) for v in vs), Kc.zero) for r in range(d)]
    c = mpq(int(b - sum((a * Kc(x) for a, x in zip(V, plan.X[0])), Kc.zero)))  # b = c + V.x_0
    heads = HeadSet([Head(W, v, u) for (W, u), v in zip(W_set, vs)], c, True)
    n_cert = certify_plan(heads, plan, y_shared, values, Kc) if certify_all else 0
    return list(vs) + [(c,)], n_cert


def _v_from_first_group(zero_heads, plan, y_shared, values, Kc) -> tuple:
    """``(v residues, b)`` from the families (x_1, e_j) (with biases (x_0, e_j)) of the heads
    ``zero_heads`` (their W exact, v zero): the (2H+1) x (m+1) system per e_j, then
    ``E^T v_h = (v_h.e_j)_j``; ``b`` is the common first unknown (V.x_1, or c + V.x_0)."""
    d, m = plan.d, len(zero_heads)
    ev = HeadEvaluator(zero_heads, d, Kc)
    ctx = Kc.scalar_ctx
    C = []                                   # C[j] = [v_h . e_j for h]
    for j in range(d):
        n = plan.index("basis", 0, j)
        c = plan.configs[n]
        fam = ev.family(c.summed(), c.x)
        if fam is None:
            raise PrimesDisagree(f"the family (x_{0 if plan.bias else 1}, e_{j + 1}) has no "
                                 f"integer path modulo the further prime")
        rows = [Kc.one] + [Kc.zero] * m + [Kc(y_shared)]
        for k, y in enumerate(values[n], start=1):
            rows.append(Kc.one)
            rows.extend(k * w / (k * w + 1) for w, _, _ in fam)
            rows.append(Kc(y))
        R, rank = flint.fmpz_mod_mat(len(values[n]) + 1, m + 2, rows, ctx).rref()
        if rank != m + 1 or any(R[i, i] != 1 for i in range(m + 1)):
            raise PrimesDisagree(
                f"the family (x_{0 if plan.bias else 1}, e_{j + 1}) modulo the further prime is "
                + ("inconsistent with the analysed W" if rank == m + 2 else "undetermined")
                + f" (rank {rank} of {m + 1})")
        C.append([R[1 + h, m + 1] for h in range(m)])
        b = R[0, m + 1]                      # the same for every j: the k = 0 query is shared
    Et = flint.fmpz_mod_mat(d, d, [plan.E[j][r] for j in range(d) for r in range(d)], ctx)
    if Et.rank() < d:
        raise SingularMatrix("E is singular modulo the further prime")
    V = Et.solve(flint.fmpz_mod_mat(d, m, [C[j][h] for j in range(d) for h in range(m)], ctx))
    return [tuple(mpq(int(V[r, h])) for r in range(d)) for h in range(m)], Kc(int(b))


def solve_v_observations(W_set, d, observations, Kc) -> tuple:
    """:func:`solve_v_plan` for any recorded observations: ``f(X) = sum_h v_h . y_h(X)``
    with the softmax averages y_h from the exact W; rows are taken as
    :func:`check_design_rank` takes them until the rank is full, the system solved, and
    every observation certified with (W, v)."""
    m = len(W_set)
    if m == 0:
        return [], certify((), d, observations, Kc)
    cols = m * d
    zero_v = HeadEvaluator([Head(W, (mpq(0),) * d) for W in W_set], d, Kc)
    vs = _solve_v_by_families(zero_v, d, m, observations, Kc)
    if vs is not None:
        return vs, certify([Head(W, v) for W, v in zip(W_set, vs)], d, observations, Kc)
    averages = zero_v.averages
    groups: dict = {}
    for tokens, y in observations:
        groups.setdefault(tuple(tokens[-1]), []).append((tokens, y))
    rows: list = []
    rank = 0
    for group in sorted(groups.values(), key=len, reverse=True):
        for tokens, y in group:
            rows.extend(x for yh in averages(tokens) for x in yh)
            rows.append(Kc(y))
        R, rank = flint.fmpz_mod_mat(len(rows) // (cols + 1), cols + 1, rows, Kc.scalar_ctx).rref()
        if rank == cols and all(R[i, i] == 1 for i in range(cols)):
            break
    else:
        raise PrimesDisagree(f"the answers modulo the further prime determine v only up to rank "
                             f"{rank} of {cols}, or contradict the analysed W")
    vs = [tuple(mpq(int(R[h * d + r, cols])) for r in range(d)) for h in range(m)]
    return vs, certify([Head(W, v) for W, v in zip(W_set, vs)], d, observations, Kc)


def plan_exponents(plan, heads, D) -> dict:
    """``{configuration index: [D e^T W_h x for h]}`` over ``plan``'s configurations (x, e)
    for ``heads`` (their W exact; one ``fmpz_mat`` product ``E^T (D W_h) X`` per head, the
    matching configurations' exponents sums of two of its entries); {} when some D W_h is
    not integral.  A later prime's analysis tries them first
    (:meth:`~exactlearn.fields.modular.Modular.know_exponents`).

    >>> from exactlearn.pipeline.plan import paper_plan
    >>> plan = paper_plan([[1, 0], [0, 1]], [[1, 1], [0, 1]], 1)
    >>> got = plan_exponents(plan, [Head(((mpq(1), mpq(2)), (mpq(0), mpq(3))), (1, 1))], 1)
    >>> [(c.kind, c.i, c.j, got[n]) for n, c in enumerate(plan.configs)]   # doctest: +NORMALIZE_WHITESPACE
    [('basis', 0, 0, [1]), ('basis', 0, 1, [0]), ('within', 0, 1, [1]),
     ('basis', 1, 0, [5]), ('basis', 1, 1, [3]), ('within', 1, 1, [8]), ('across', 1, 0, [6])]
    """
    d = plan.d
    if plan.bias:
        return _plan_exponents_bias(plan, heads, D)
    X = flint.fmpz_mat(d, d, [plan.X[i][r] for r in range(d) for i in range(d)])
    Et = flint.fmpz_mat(d, d, [plan.E[j][r] for j in range(d) for r in range(d)])
    Ms = []
    for h in heads:
        DW = [x * D for row in h.W for x in row]
        if any(x.denominator != 1 for x in DW):
            return {}
        M = Et * flint.fmpz_mat(d, d, [int(x) for x in DW]) * X       # M[j, i] = D e_j^T W x_i
        Ms.append([[int(M[j, i]) for i in range(d)] for j in range(d)])
    out = {}
    for n, c in enumerate(plan.configs):
        if c.kind == "basis":
            out[n] = [M[c.j][c.i] for M in Ms]
        elif c.kind == "within":
            out[n] = [M[0][c.i] + M[c.j][c.i] for M in Ms]
        else:                                    # across: x = x_1 + x_i
            out[n] = [M[c.j][0] + M[c.j][c.i] for M in Ms]
    return out


def _plan_exponents_bias(plan, heads, D) -> dict:
    """:func:`plan_exponents` for the plan for biases: ``D e^T (W_h x + u_h)`` of every
    configuration (x, e), directly; {} when some D W_h or D u_h is not integral."""
    scaled = []
    for h in heads:
        DW = [[x * D for x in row] for row in h.W]
        Du = [x * D for x in h.u]
        if any(x.denominator != 1 for row in DW for x in row) or any(x.denominator != 1 for x in Du):
            return {}
        scaled.append(([[int(x) for x in row] for row in DW], [int(x) for x in Du]))
    out = {}
    for n, c in enumerate(plan.configs):
        out[n] = [sum(e * (sum(w * x for w, x in zip(row, c.x)) + b)
                      for e, row, b in zip(c.e, W, u)) for W, u in scaled]
    return out


def check_design_rank_plan(heads, plan, K) -> None:
    """:func:`check_design_rank` for the observations of a paper plan (the queries of
    ``plan``, in order), with a sufficient condition checked first.

    Head h's softmax average on q_k = (a^k, x) is ``x + t_h(k) e`` with
    ``t_h(k) = k w_h / (k w_h + 1)``, ``w_h = exp(e^T W_h x)``, so the row of q_k is
    ``x (x) 1 + sum_h t_h(k) e (x) delta_h``.  If for every family (x_1, e_j) the
    (2H+1) x (m+1) matrix ``[1, t_1(k), ..., t_m(k)]`` (k = 0 is the shared query) has
    full column rank, the rows of that family span ``x_1 (x) 1`` and every
    ``e_j (x) delta_h``, and over all j (E invertible) the whole space: the rank is full.
    With a constant c (the plan for biases, docs: explanation/biases.md) every row has a
    further entry 1; the family then spans ``(x_1 (x) 1, 1)`` and every ``(e_j (x) delta_h, 0)``,
    hence ``(0, 1)`` too: the same condition gives the full rank ``m d + 1``.
    Otherwise the rows are built as :func:`check_design_rank` builds them, whose
    verdict depends only on the rank of all of them -- the same verdict either way."""
    if not heads:
        return
    m = len(heads)
    ev = HeadEvaluator(heads, plan.d, K)
    ctx = K.scalar_ctx
    try:
        for j in range(plan.d):
            c = plan.configs[plan.index("basis", 0, j)]
            fam = ev.family(c.summed(), c.x)
            if fam is None:
                raise ArithmeticError("no integer path")
            rows = [K.one] + [K.zero] * m
            kws = [k * w for k in range(1, 2 * plan.H + 1) for w, _, _ in fam]
            ts = [kw * z for kw, z in zip(kws, batch_inverse([kw + 1 for kw in kws], K))]
            for k in range(2 * plan.H):             # k w / (k w + 1), one inversion a family
                rows.append(K.one)
                rows.extend(ts[k * m:(k + 1) * m])
            if flint.fmpz_mod_mat(2 * plan.H + 1, m + 1, rows, ctx).rank() != m + 1:
                raise ArithmeticError("not decided by the first group")
        return
    except (ArithmeticError, ExactLearnError):
        pass
    check_design_rank(heads, ((t, None) for t in plan.tokens_of(plan.queries)), K)


def check_design_rank(heads, observations, K) -> None:
    """The answers modulo p' must determine every v: the rows (y_1(X), ..., y_m(X)) over the
    observed X span F_p'^(m d).  Rows are taken final token by final token (the largest
    group first) until the rank is full.  Raises :class:`PrimesDisagree` otherwise."""
    if not heads:
        return
    bias = getattr(heads, "bias", False)      # c is unknown too: a column of ones
    d = len(heads[0].v)
    cols = len(heads) * d + (1 if bias else 0)
    if not bias:
        observations = list(observations)
        if _full_rank_by_families(HeadEvaluator(heads, d, K), d, len(heads), observations, K):
            return
    groups: dict = {}
    for tokens, _ in observations:
        groups.setdefault(tuple(tokens[-1]), []).append(tokens)
    rows: list = []
    rank = 0
    averages = HeadEvaluator(heads, d, K).averages
    for group in sorted(groups.values(), key=len, reverse=True):
        for tokens in group:
            rows.extend(int(x) for y in averages(tokens) for x in y)
            if bias:
                rows.append(1)
        n = len(rows) // cols
        rank = flint.fmpz_mod_mat(n, cols, rows, K._ctx).rank()
        if rank == cols:
            return
    raise PrimesDisagree(
        f"the confirmation modulo p' is undecided: the answers determine v only up to rank "
        f"{rank} of {cols}")


def _families(observations, d) -> list:
    """The observations of the form ``(a^k, x)`` (k copies of one token a, then x != a;
    k = 0: the single token x), grouped: ``[(x, {a: {k: y}}, y of (x) or None)]``, the
    final tokens with the most families first."""
    by_x: dict = {}
    for tokens, y in observations:
        tokens = [tuple(t) for t in tokens]
        x = tokens[-1]
        fams, single = by_x.setdefault(x, ({}, []))
        if len(tokens) == 1:
            single.append(y)
            continue
        a = tokens[0]
        if a == x or any(t != a for t in tokens[:-1]):
            continue
        fams.setdefault(a, {})[len(tokens) - 1] = y
    out = [(x, fams, single[0] if single else None) for x, (fams, single) in by_x.items()]
    return sorted(out, key=lambda g: len(g[1]), reverse=True)


def _family_systems(ev, m, x, fams, y0, K, with_values):
    """For each family (a, x) with the single (x) observed: the rows ``[1, t_1(k), ...,
    t_m(k)]`` (and the answer, ``with_values``) over k = 0 and its observed k, where
    ``t_h(k) = k w_h / (k w_h + 1)`` and ``w_h`` the weight of a in head h
    (:meth:`~exactlearn.model.HeadEvaluator.family`): head h's softmax average on
    (a^k, x) is ``x + t_h(k) (a - x)``.  Yields ``(a - x, rows, number of rows)``."""
    if y0 is None:
        return
    for a, ys in fams.items():
        fam = ev.family(a, x)
        if fam is None or len(fam) != m:
            continue
        rows = [K.one] + [K.zero] * m + ([K(y0)] if with_values else [])
        for k, y in sorted(ys.items()):
            rows.append(K.one)
            rows.extend(k * w / (k * w + 1) for w, _, _ in fam)
            if with_values:
                rows.append(K(y))
        yield tuple(p - q for p, q in zip(a, x)), rows, len(ys) + 1


def _full_rank_by_families(ev, d, m, observations, K) -> bool:
    """A sufficient condition for :func:`check_design_rank`'s full rank, checked on small
    systems (no dense rank of all the rows): some final token x has families (a^k, x), with
    the single (x) observed, whose (#k + 1) x (m + 1) matrices ``[1, t_h(k)]`` have full
    column rank and whose directions a - x span F_p^d.  Then the rows of such a family span
    ``x (x) 1`` and every ``(a - x) (x) delta_h`` (its rows are ``x (x) 1 + sum_h t_h(k)
    (a - x) (x) delta_h``), and over d independent directions the whole F_p^(m d): the rank
    is full.  False when the condition does not hold (the dense check then decides)."""
    ctx = K.scalar_ctx
    try:
        for x, fams, y0 in _families(observations, d):
            dirs = []
            for e, rows, n in _family_systems(ev, m, x, fams, y0, K, False):
                if n >= m + 1 and flint.fmpz_mod_mat(n, m + 1, rows, ctx).rank() == m + 1:
                    dirs.extend(e)
            if len(dirs) >= d * d and flint.fmpz_mod_mat(len(dirs) // d, d, dirs, ctx).rank() == d:
                return True
    except (ArithmeticError, ExactLearnError):
        pass
    return False


def _solve_v_by_families(ev, d, m, observations, K):
    """:func:`solve_v_observations`' v from small systems, or None (then the dense solve):
    for a final token x, each family (a^k, x) with the single (x) observed gives
    ``f = V.x + sum_h t_h(k) c_h``, ``c_h = v_h . (a - x)`` (the system of
    :func:`solve_v_plan`); where it has full column rank m + 1 and is consistent, c is
    determined, and d such families with independent directions give every v_h from
    ``D^T v_h = c_h`` (D the directions).  These rows determine v, so when the answers are
    consistent with some v it is this one, the v of the dense solve; either way every
    observation is then certified with it.  Any other outcome returns None."""
    ctx = K.scalar_ctx
    try:
        for x, fams, y0 in _families(observations, d):
            dirs, cs = [], []
            for e, rows, n in _family_systems(ev, m, x, fams, y0, K, True):
                R, rank = flint.fmpz_mod_mat(n, m + 2, rows, ctx).rref()
                if rank != m + 1 or any(R[i, i] != 1 for i in range(m + 1)):
                    if rank == m + 2:
                        return None          # inconsistent: the dense solve says how
                    continue
                trial = dirs + list(e)
                if flint.fmpz_mod_mat(len(trial) // d, d, trial, ctx).rank() == len(trial) // d:
                    dirs, cs = trial, cs + [[R[1 + h, m + 1] for h in range(m)]]
                if len(dirs) == d * d:
                    Dt = flint.fmpz_mod_mat(d, d, dirs, ctx)          # rows: the directions
                    V = Dt.solve(flint.fmpz_mod_mat(d, m, [c for row in cs for c in row], ctx))
                    return [tuple(mpq(int(V[r, h])) for r in range(d)) for h in range(m)]
    except (ArithmeticError, ExactLearnError, ZeroDivisionError):
        pass
    return None
