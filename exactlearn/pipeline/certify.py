"""The certificate (docs: explanation/algorithm.md#what-a-failure-means): recompute every observed value from the recovered heads.

It costs no queries.  Exact fields compare with ``==``; the real field with its
own tolerance (``K.eq``).  The first mismatching observation is reported.
"""

from __future__ import annotations

import operator

import flint

from exactlearn.algebra.cauchy import sum_of_fractions
from exactlearn.fields.base import ExactnessError
from exactlearn.errors import ExactLearnError, FieldError
from exactlearn.model import HeadEvaluator
from exactlearn.errors import CertificateError
from exactlearn.pipeline.heap import paused_gc
from exactlearn.progress import current


def certify(heads, d: int, observations, K) -> int:
    """Check ``f_heads(tokens) == value`` for every ``(tokens, value)``.

    Returns the number of observations checked; raises :class:`CertificateError`.
    """
    current().stage("certify")                     # progress=
    ev = HeadEvaluator(heads, d, K)
    n = 0
    for tokens, value in observations:
        _check(ev, tokens, value, K)
        n += 1
    return n


def _check(ev, tokens, value, K) -> None:
    try:
        got = ev(tokens)
    except ExactnessError as exc:      # recovered heads the field cannot even evaluate
        raise CertificateError(
            f"the recovered heads cannot be evaluated exactly on an observed query ({exc}); "
            f"they do not describe the black box") from None
    if not K.eq(got, value):
        raise CertificateError(
            f"recovered heads do not reproduce the oracle on a query of length {len(tokens)} "
            f"(final token {list(map(str, tokens[-1]))})")


def certify_plan(heads, plan, y_shared, values, K, configs=None, evaluator=None) -> int:
    """:func:`certify` on the observations of a paper plan, asked in its order (the shared
    k = 0 query, then ``values[n] = [f(q_1), ..., f(q_2H)]`` per configuration n):
    every observed value is recomputed from ``heads``.

    A family q_k = (a^k, x) is evaluated at once: with ``(w_h, A_h, B_h)`` from the
    recovered heads (:meth:`~exactlearn.model.HeadEvaluator.family`: the per-final-token
    work ``W_h x`` done once, from the heads, never from the oracle),
    ``f(q_k) = N(k) / D(k)`` for ``N / D = c + sum_h (k w_h A_h + B_h) / (k w_h + 1)``
    (c the heads' constant, docs: explanation/biases.md; 0 without biases),
    ``D = prod_h (k w_h + 1)`` (python-flint polynomials, :func:`~exactlearn.algebra.cauchy.sum_of_fractions`),
    and the check is ``N(k) == f_observed D(k)`` with ``D(k) != 0``.  Any other case
    (no integer path, a vanishing D(k), a mismatch) is checked query by query as in
    :func:`certify`, so the outcome and the first failure reported are the same.
    Returns the number of observations checked (the plan's count).  ``configs``: only
    these configuration indices (a group of :mod:`exactlearn.pipeline.distributed`), and
    the shared query only when ``y_shared`` is given; ``evaluator``: a
    :class:`~exactlearn.model.HeadEvaluator` of ``heads`` over K already built.  The
    cyclic garbage collector is paused meanwhile (:func:`~exactlearn.pipeline.heap.paused_gc`).
    """
    with paused_gc():
        return _certify_plan(heads, plan, y_shared, values, K, configs, evaluator)


def _certify_plan(heads, plan, y_shared, values, K, configs, evaluator) -> int:
    current().stage("certify")                     # progress=
    ev = evaluator if evaluator is not None else HeadEvaluator(heads, plan.d, K)
    ring = getattr(K, "poly_ring", None)
    if not isinstance(ring, flint.fmpz_mod_poly_ctx):
        ring = None
    n = 0
    if configs is None or y_shared is not None:
        _check(ev, plan.configs[0].tokens(0), y_shared, K)
        n = 1
    idxs = list(range(len(plan.configs)) if configs is None else configs)
    if ring is None or not heads:
        for idx in idxs:
            c = plan.configs[idx]
            for k, y in enumerate(values[idx], start=1):
                _check(ev, c.tokens(k), y, K)
            n += len(values[idx])
        return n
    known = {} if _derivable(ev, plan, K) else None
    for t in range(0, len(idxs), _CHUNK):
        n += _certify_families(ev, plan, idxs[t:t + _CHUNK], values, K, ring, known)
    return n


#: Families per batched evaluation of :func:`certify_plan` (bounds the memory of one batch).
_CHUNK = 256


def _certify_families(ev, plan, idxs, values, K, ring, known=None) -> int:
    """:func:`certify_plan` over F_p for the configurations ``idxs``, in order: every
    family's ``N`` and ``D`` (:func:`~exactlearn.algebra.cauchy.sum_of_fractions`) are
    evaluated at all its k by two ``fmpz_mod_mat`` products (coefficients times a
    Vandermonde matrix), then ``N(k) == f_observed D(k)``, ``D(k) != 0`` is checked
    value by value; a family without ``family`` terms, and any failing value, go
    query by query (:func:`_check`), in the order of the serial loop.  ``known``: the
    basis families met so far (:func:`_families`)."""
    try:                                            # batched per final token
        fams = _families(ev, plan, idxs, known)
    except (ExactLearnError, ArithmeticError):      # then pair by pair, as before
        fams = []
        for idx in idxs:
            c = plan.configs[idx]
            try:
                fam = ev.family(c.summed(), c.x)
            except (ExactLearnError, ArithmeticError):
                fam = None                          # the query-by-query path says why
            fams.append(fam)
    rows = [n for n, fam in enumerate(fams) if fam is not None]
    evals = {}
    if rows:
        one = ring([1])
        m = len(fams[rows[0]])
        width = m + 1
        L = max(len(values[idxs[r]]) for r in rows)
        Ncs, Dcs = [], []
        const = ev.constant                     # c (docs: explanation/biases.md): N + c D
        for r in rows:
            Nk, Dk = _family_fraction(fams[r], const, ring, one)
            for poly, out in ((Nk, Ncs), (Dk, Dcs)):
                cs = poly.coeffs()
                out.extend(cs)
                out.extend([0] * (width - len(cs)))
        ctx = K.scalar_ctx
        V = flint.fmpz_mod_mat(width, L, [ctx(k) ** i for i in range(width) for k in range(1, L + 1)], ctx)
        Nv = (flint.fmpz_mod_mat(len(rows), width, Ncs, ctx) * V).entries()
        Dv = (flint.fmpz_mod_mat(len(rows), width, Dcs, ctx) * V).entries()
        if _all_agree(rows, idxs, values, L, Nv, Dv):
            return sum(len(values[idx]) for idx in idxs)   # every family: no query-by-query check
        for t, r in enumerate(rows):
            evals[r] = (Nv[t * L:(t + 1) * L], Dv[t * L:(t + 1) * L])
    n = 0
    for r, idx in enumerate(idxs):
        c = plan.configs[idx]
        ys = values[idx]
        got = evals.get(r)
        if got is None:
            bad = range(1, len(ys) + 1)
        elif len(ys) == L and 0 not in got[1] and list(map(operator.mul, ys, got[1])) == got[0]:
            bad = ()                                # every value at once: N(k) == f D(k), D(k) != 0
        else:
            bad = [k for k, (nv, dv, y) in enumerate(zip(got[0], got[1], ys), start=1)
                   if dv == 0 or nv != y * dv]
        for k in bad:
            _check(ev, c.tokens(k), ys[k - 1], K)   # the query-by-query verdict
        n += len(ys)
    return n


def _all_agree(rows, idxs, values, L, Nv, Dv) -> bool:
    """Whether every configuration of the batch has its ``L`` values, ``N(k) == f_observed
    D(k)`` and ``D(k) != 0`` at all of them: the checks of :func:`_certify_families`' loop
    over the whole batch at once (then that loop would check nothing query by query)."""
    if len(rows) != len(idxs) or any(len(values[idx]) != L for idx in idxs):
        return False
    ys = [y for idx in idxs for y in values[idx]]
    return 0 not in Dv and list(map(operator.mul, ys, Dv)) == Nv


def _derivable(ev, plan, K) -> bool:
    """Whether :func:`_families` may form a within family (x_i, e_1 + e_j) from the basis
    families (x_i, e_1) and (x_i, e_j): a plan without biases, heads without u_h on the
    integer path of an F_p field, and every within exponent ``D (e_1 + e_j)^T W_h x_i``
    provably inside the field's range (``|.| <= max|e_1 + e_j| max|x_i| sum|D W_h|``
    below ``max_exponent``), so ``K.power`` of it would neither raise nor differ from the
    product of the two."""
    ints = ev.integer_weights()
    mx = getattr(K, "max_exponent", False)
    if plan.bias or ints is None or mx is False or not ints[0] or any(map(any, ints[1])):
        return False
    if mx is None:                                  # no range: power(n) for any n
        return True
    dw = max(sum(abs(int(v)) for v in M.entries()) for M in ints[0])
    xs = max((abs(v) for x in plan.X for v in x), default=0)
    es = 2 * max((abs(v) for e in plan.E for v in e), default=0)
    return dw * xs * es < mx


def _families(ev, plan, idxs, known) -> list:
    """``ev.families`` of the configurations ``idxs`` -- a within configuration's from its
    basis configurations' when they are in ``known`` (a dict, or None: never): with
    ``e = e_1 + e_j``, ``w_h = w_h(e_1) w_h(e_j)`` (T to a sum of exponents),
    ``A_h = v_h.(x + e) = A_h(e_1) + A_h(e_j) - B_h`` and the same ``B_h``: the same field
    elements as :meth:`~exactlearn.model.HeadEvaluator.families` computes (docs:
    explanation/performance.md), without a power per head.  Raises as ``ev.families``
    on the others.

    >>> import random
    >>> from exactlearn.fields import Modular
    >>> from exactlearn.model import Head
    >>> from exactlearn.pipeline.plan import draw_paper_plan
    >>> plan, K = draw_paper_plan(3, 2, random.Random(0), 2**32), Modular()
    >>> ev = HeadEvaluator([Head(((1, 0, 2), (0, -1, 1), (3, 0, 0)), (1, 2, 3)),
    ...                     Head(((0, 1, 0), (2, 0, -1), (1, 1, 1)), (-1, 0, 2))], 3, K)
    >>> idxs, known = list(range(len(plan.configs))), {}
    >>> got = [f for t in range(0, 17, 4) for f in _families(ev, plan, idxs[t:t + 4], known)]
    >>> _derivable(ev, plan, K), got == ev.families([(c.summed(), c.x) for c in plan.configs])
    (True, True)
    """
    cs = plan.configs
    if known is None:
        return ev.families([(cs[idx].summed(), cs[idx].x) for idx in idxs])
    pend = [r for r, idx in enumerate(idxs) if cs[idx].kind != "within" or cs[idx].j == 0]
    fams = [None] * len(idxs)
    for r, fam in zip(pend, ev.families([(cs[idxs[r]].summed(), cs[idxs[r]].x) for r in pend])):
        fams[r] = fam
        c = cs[idxs[r]]
        if c.kind == "basis" and fam is not None and c.x == plan.X[c.i] and c.e == plan.E[c.j]:
            known[(c.i, c.j)] = fam             # only (x_i, e_j) itself (a plan built by hand)
    late = []
    for r, idx in enumerate(idxs):
        c = cs[idx]
        if c.kind != "within" or c.j == 0:
            continue
        f1, fj = known.get((c.i, 0)), known.get((c.i, c.j))
        if (f1 is None or fj is None or c.x != plan.X[c.i]
                or c.e != tuple(map(operator.add, plan.E[0], plan.E[c.j]))):
            late.append(r)
            continue
        fams[r] = [(w1 * wj, A1 + Aj - B, B) for (w1, A1, B), (wj, Aj, _) in zip(f1, fj)]
    for r, fam in zip(late, ev.families([(cs[idxs[r]].summed(), cs[idxs[r]].x) for r in late])):
        fams[r] = fam
    if idxs:                                        # keep the last final token's group only
        last = cs[idxs[-1]].i
        for key in [key for key in known if key[0] != last]:
            del known[key]
    return fams


def _family_fraction(fam, const, ring, one) -> tuple:
    """``(N, D)`` with ``N / D = c + sum_h (k w_h A_h + B_h) / (k w_h + 1)`` and
    ``D = prod_h (k w_h + 1)`` for ``fam = [(w_h, A_h, B_h)]`` (``const`` c, or None: 0),
    computed as ``(c + sum_h A_h) D + sum_h (B_h - A_h) D / (k w_h + 1)`` -- the same
    polynomials -- with the heads taken two by two into fractions of degree 2 before
    :func:`~exactlearn.algebra.cauchy.sum_of_fractions` (fewer python-flint calls)."""
    fracs, SA = [], None
    for t in range(0, len(fam) - 1, 2):
        (w1, A1, B1), (w2, A2, B2) = fam[t], fam[t + 1]
        e1, e2 = B1 - A1, B2 - A2
        SA = A1 + A2 if SA is None else SA + A1 + A2
        fracs.append((ring([e1 + e2, e1 * w2 + e2 * w1]), ring([1, w1 + w2, w1 * w2])))
    if len(fam) % 2:
        w, A, B = fam[-1]
        SA = A if SA is None else SA + A
        fracs.append((ring([B - A]), ring([1, w])))
    if const is not None:
        SA = const if SA is None else SA + const
    E, D = sum_of_fractions(fracs, one)
    return (E if SA is None else E + D * SA), D


def verify_fresh(oracle, heads, d, H, K, convert, rng, R, n) -> tuple:
    """``n`` fresh random queries (length 1..2H+1, entries in [-R, R]) comparing
    ``heads`` with the black box (``--verify N``): ``(agreed, error or None)``.

    They are reported apart from the learning queries (``verify_queries``)."""
    ev = HeadEvaluator(heads, d, K)
    for _ in range(n):
        length = rng.randint(1, 2 * H + 1)
        tokens = [tuple(rng.randint(-R, R) for _ in range(d)) for _ in range(length)]
        try:
            y = oracle(tokens)
            if convert:
                y = K(y)
            agrees = K.eq(ev(tokens), y)
        except (FieldError, ValueError, TypeError) as exc:
            return False, f"verification failed: a fresh random query could not be compared ({exc})"
        if not agrees:
            return False, "verification failed: a fresh random query disagrees with the certified heads"
    return True, None
