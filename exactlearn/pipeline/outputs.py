"""Vector outputs over the exact fields: every output's readout from the recorded answers
(docs: explanation/biases.md#vector-outputs).

The learner runs the plan on the scalar view ``r . y`` of a box of m outputs
(:class:`~exactlearn.oracle.OutputsView`) and certifies its heads (W_h, u_h).  Given them,
every output is *linear* in the readouts: for a query X,

    y_j(X) = c_j + sum_h V_h[j] . a_h(X),    a_h(X) = sum_i softmax_i(s_h) x_i,

with the same features a_h(X) (and 1 for c) for all m outputs.  :func:`solve_outputs` picks
recorded answers whose features are independent until their rank is H d (+ 1), solves that
square system once with m right-hand sides (exact Gauss--Jordan), and
:func:`certify_outputs` recomputes every recorded answer of every output from the result with
``==``.  A head whose ``r . V_h`` vanished is missing from the scalar run: the answers are
then inconsistent and the certificate fails (the learner redraws r).

>>> from exactlearn import MultiHeadAttention, Oracle, learn
>>> from exactlearn.fields import Rational
>>> model = MultiHeadAttention([([[1, 0], [0, -1]], [[1, 2], [0, 0], [3, -1]])], outputs=3)
>>> res = learn(Oracle(model, Rational()), d=2, heads=1, seed=1, outputs=3)
>>> res.status, res.heads == model.canonical_heads(), res.queries
('certified', True, 15)
"""

from __future__ import annotations

import math

from gmpy2 import mpq

from exactlearn.algebra.linalg import inverse
from exactlearn.errors import CertificateError, DegenerateDraw, SingularMatrix
from exactlearn.fields.base import ExactnessError
from exactlearn.fields.modular import ReconstructionError, crt_reconstruct
from exactlearn.model import Head, HeadEvaluator, VectorEvaluator, canonicalize, is_matrix
from exactlearn.pipeline.multimodular import log2_wrong_bound
from exactlearn.progress import current


def draw_combination(m: int, rng, bits: int = 32) -> list:
    """m random nonzero integers of at most ``bits`` bits: the exact fields' combination r
    (integers, so that the same r holds modulo every prime)."""
    out = []
    for _ in range(m):
        x = rng.getrandbits(bits) | 1
        out.append(x if rng.getrandbits(1) else -x)
    return out


def features(heads, d: int, K):
    """``tokens -> [a_1 (d values), ..., a_H (d values)]`` (a flat list): each head's softmax
    average from its exact (W, u)."""
    zero = tuple(mpq(0) for _ in range(d))
    ev = HeadEvaluator([Head(h.W, zero, h.u) for h in heads], d, K)

    def of(tokens):
        return [x for a in ev.averages(tokens) for x in a]
    return of


def solve_outputs(heads, d: int, records, K, m: int, bias: bool, residues: bool = False) -> tuple:
    """The m outputs' readouts from ``records`` (``(tokens, [y_1..y_m])`` in ``K``) and the
    scalar run's heads (their (W, u) only): returns ``(vector heads, constant)``, the
    heads with their m x d v and the length-m constant (zeros without ``bias``), not yet
    canonical; with ``residues`` (modulo a prime of the multi-modular method) the values are
    the residues as integers.  Raises :class:`~exactlearn.errors.DegenerateDraw` when the answers do not
    determine the readouts (their rank is short)."""
    current().stage("analyse")          # progress=: the outputs' solve
    H = len(heads)
    n = H * d + (1 if bias else 0)
    if n == 0:
        return (), tuple(K.zero for _ in range(m))
    feat = features(heads, d, K)
    flint_kind = _flint_kind(K)
    if flint_kind is not None:
        X = _solve_flint(flint_kind, feat, records, K, n, m, bias)
    else:
        X = _solve_python(feat, records, K, n, m, bias)
    to = (lambda x: mpq(int(x))) if residues else K.to_param
    try:
        out = []
        for h, head in enumerate(heads):
            V = tuple(tuple(to(X[h * d + c][j]) for c in range(d)) for j in range(m))
            out.append(Head(head.W, V, head.u))
        const = (tuple(to(X[n - 1][j]) for j in range(m)) if bias
                 else tuple(mpq(0) for _ in range(m)))
    except (ValueError, ArithmeticError) as exc:
        raise CertificateError(f"the outputs' readouts are not parameters of the {K.name} field "
                               f"({exc}): a black box outside the model class") from None
    return tuple(out), const


def _short(got, n, m, bias):
    return DegenerateDraw(f"the recorded answers determine {got} of the {n} unknowns of the {m} "
                          f"outputs' readouts (H d{' + 1' if bias else ''}): a degenerate draw")


def _flint_kind(K):
    """``"q"`` over Q (python-flint ``fmpq_mat``), ``"p"`` over F_p (``fmpz_mod_mat``), else
    None (the generic Gauss--Jordan)."""
    if getattr(K, "scalar_ctx", None) is not None:
        return "p"
    if getattr(K, "is_rational", False) and getattr(K.param, "is_rational", False):
        return "q"
    return None


def _solve_flint(kind, feat, records, K, n, m, bias) -> list:
    """The n x m readouts by python-flint: the records' feature rows are taken in growing
    chunks until their rank is n (the pivot rows of the transposed chunk's rref), and the
    square system of those rows solved with the m right-hand sides (the same exact solution
    as Gauss--Jordan)."""
    import flint
    if kind == "q":
        conv = lambda x: flint.fmpq(int(x.numerator), int(x.denominator))     # noqa: E731
        mat = flint.fmpq_mat
        back = lambda x: mpq(int(x.p), int(x.q))                               # noqa: E731
    else:
        ctx = K.scalar_ctx
        conv = K
        mat = lambda r, c, entries: flint.fmpz_mod_mat(r, c, entries, ctx)      # noqa: E731
        back = lambda x: x                                                     # noqa: E731
    rows, rhs = [], []
    size, pivots = 2 * n, []
    select = (lambda r: _pivot_rows_mod(r, n)) if kind == "q" else (lambda r: _pivot_rows(mat, r, n))
    for tokens, ys in records:
        rows.append([conv(x) for x in feat(tokens)] + ([conv(K.one)] if bias else []))
        rhs.append([conv(y) for y in ys])
        if len(rows) < size:
            continue
        pivots = select(rows)
        if len(pivots) == n:
            break
        size *= 2
    else:
        if rows:
            pivots = select(rows)
    if len(pivots) < n:
        raise _short(len(pivots), n, m, bias)
    A = mat(n, n, [rows[q][i] for q in pivots for i in range(n)])
    B = mat(n, m, [rhs[q][j] for q in pivots for j in range(m)])
    try:
        Xm = A.solve(B)
    except (ZeroDivisionError, ValueError):
        raise DegenerateDraw("the chosen answers' features are singular") from None
    return [[back(Xm[i, j]) for j in range(m)] for i in range(n)]


#: The prime 2^127 - 1: rows independent modulo it are independent over Q.
_SELECT_P = 2 ** 127 - 1


def _pivot_rows_mod(rows, n) -> list:
    """:func:`_pivot_rows` for rows over Q, decided modulo :data:`_SELECT_P` (an rref over Q
    of the plan's tall rationals costs minutes): rows independent modulo p are independent
    over Q, so the square system they give is invertible.  A row with a denominator that p
    divides is left out."""
    import flint
    ctx = flint.fmpz_mod_ctx(_SELECT_P)
    keep, red = [], []
    for q, row in enumerate(rows):
        dens = [int(x.q) for x in row]
        if any(den % _SELECT_P == 0 for den in dens):
            continue
        keep.append(q)
        red.append([int(x.p) * pow(den, -1, _SELECT_P) % _SELECT_P for x, den in zip(row, dens)])
    if not keep:
        return []
    mat = lambda r, c, entries: flint.fmpz_mod_mat(r, c, entries, ctx)           # noqa: E731
    return [keep[i] for i in _pivot_rows(mat, red, n)]


def _pivot_rows(mat, rows, n) -> list:
    """Indices of rows that are linearly independent, as many as the rank (at most n): the
    pivot columns of the rref of the transposed rows."""
    N = len(rows)
    R, rank = mat(n, N, [rows[q][i] for i in range(n) for q in range(N)]).rref()
    pivots, col = [], 0
    for i in range(rank):
        while R[i, col] == 0:
            col += 1
        pivots.append(col)
    return pivots


def _solve_python(feat, records, K, n, m, bias) -> list:
    """The n x m readouts by Gauss--Jordan over any exact field (the symbolic field)."""
    basis: list = []          # reduced rows (pivot col, row over features, its m values)
    chosen: list = []
    for tokens, ys in records:
        row = feat(tokens) + ([K.one] if bias else [])
        rhs = list(ys)
        red = list(row)
        for col, brow, _ in basis:
            f = red[col]
            if not K.is_zero(f):
                red = [a - f * b for a, b in zip(red, brow)]
        piv = next((i for i, a in enumerate(red) if not K.is_zero(a)), None)
        if piv is None:
            continue
        inv = K.one / red[piv]
        basis.append((piv, [a * inv for a in red], None))
        chosen.append((row, rhs))
        if len(chosen) == n:
            break
    if len(chosen) < n:
        raise _short(len(chosen), n, m, bias)
    try:
        Ainv = inverse([r for r, _ in chosen], K)
    except SingularMatrix:
        raise DegenerateDraw("the chosen answers' features are singular") from None
    return [[sum((Ainv[i][k] * chosen[k][1][j] for k in range(n)), K.zero) for j in range(m)]
            for i in range(n)]                                # n x m


def canonical_outputs(heads, constant, bias: bool):
    """The canonical form of vector heads: equal (W, u) merged, v matrices summed, zero
    matrices dropped; with ``bias`` a :class:`~exactlearn.model.HeadSet` carrying the
    length-m constant."""
    if bias:
        return canonicalize(heads, tuple(constant), True)
    return canonicalize(heads, 0, False)


def certify_outputs(heads, d: int, records, K, m: int) -> int:
    """Every recorded answer of every output recomputed from the vector heads with ``==``:
    returns the number of values checked (records times m); raises
    :class:`~exactlearn.errors.CertificateError` naming the output that misses."""
    current().stage("certify")
    constant = getattr(heads, "constant", 0)
    if not isinstance(constant, tuple):
        constant = tuple(0 for _ in range(m))
    heads = tuple(heads)
    if heads and not all(is_matrix(h.v) and len(h.v) == m for h in heads):
        raise CertificateError("the vector heads do not have m rows each")
    if not heads:
        rows = [(lambda tokens, c=c: K(c)) for c in constant]
    else:
        rows = VectorEvaluator(heads, d, K, constant).rows
    n = 0
    for tokens, ys in records:
        for j, (ev, y) in enumerate(zip(rows, ys)):
            try:
                got = ev(tokens)
            except ExactnessError as exc:
                raise CertificateError(f"the recovered heads cannot be evaluated exactly on an "
                                       f"observed query ({exc})") from None
            if not K.eq(got, y):
                raise CertificateError(
                    f"the recovered heads do not reproduce output {j + 1} of {m} on a query of "
                    f"length {len(tokens)} (a head invisible in the combination r . y, or a "
                    f"black box outside the model class)")
            n += 1
    return n


def learn_outputs(heads, d: int, records, K, m: int, bias: bool) -> tuple:
    """:func:`solve_outputs`, canonical form and :func:`certify_outputs` over one field:
    ``(canonical vector heads, values certified)``."""
    vheads, const = solve_outputs(heads, d, records, K, m, bias)
    canon = canonical_outputs(vheads, const, bias)
    return canon, certify_outputs(canon, d, records, K, m)


def learn_outputs_modular(heads, d: int, view, report: dict, m: int, bias: bool) -> tuple:
    """The multi-modular method's vector outputs (docs: explanation/multimodular.md): the
    heads' (W, u) are exact over Q; each analysis prime's answers give the readouts modulo
    it (:func:`solve_outputs`), those residues are joined by CRT and rational reconstruction,
    and the rationals must reproduce every answer of every output modulo every prime asked
    -- the confirmation prime's included, drawn after the analysis primes' answers and
    determining the readouts there (full rank), as in the scalar method.  Returns
    ``(canonical vector heads, values certified)``; raises
    :class:`~exactlearn.errors.CertificateError` when the readouts are past the primes'
    reconstruction bound or miss an answer."""
    roles = {r.get("p"): r for r in report.get("primes", [])}
    # the primes the scalar run used: analysis primes and refuted confirmations join the CRT,
    # the confirmation that held confirms; skipped primes (bad reductions) take no part
    views = [v for v in [view] + list(view.views)
             if v.records and _role(roles, v) in ("analysis", "confirmation")]
    confirming = [v for v in views if _role(roles, v) == "confirmation"
                  and "refuted" not in roles.get(str(v.K.p), {})]
    if not confirming:
        raise CertificateError("vector outputs over the modular field need a confirmation prime "
                               "(the scalar run gave none)")
    analysis = [v for v in views if v not in confirming]
    residues, moduli = [], []
    for v in analysis:
        vh, const = solve_outputs(heads, d, v.records, v.K, m, bias, residues=True)
        residues.append([x for h in vh for row in h.v for x in row] + list(const))
        moduli.append(v.K.p)
    try:
        flat = [crt_reconstruct([res[i] for res in residues], moduli) for i in range(len(residues[0]))]
    except ReconstructionError:
        raise CertificateError("the outputs' readouts are taller than the analysis primes "
                               "reconstruct (the scalar view r . y reconstructed from them)") from None
    out, k = [], 0
    for head in heads:
        V = tuple(tuple(flat[k + j * d + c] for c in range(d)) for j in range(m))
        k += m * d
        out.append(Head(head.W, V, head.u))
    const = tuple(flat[k:k + m]) if bias else tuple(mpq(0) for _ in range(m))
    canon = canonical_outputs(out, const, bias)
    n = 0
    for v in views:
        if v in confirming:          # the answers there determine the readouts (full rank)
            solve_outputs(heads, d, v.records, v.K, m, bias, residues=True)
        n += certify_outputs(canon, d, v.records, v.K, m)
    # one more reconstruction confirmed on the same prime: the union bound adds its term
    flat = [Head(h.W, tuple(x for row in h.v for x in row) + tuple(const), h.u) for h in canon]
    old = report.get("log2_wrong_reconstruction_bound")
    if old is not None:
        b = log2_wrong_bound(flat or [Head(((mpq(0),),), tuple(const))], len(confirming))
        report["log2_wrong_reconstruction_bound"] = round(math.log2(2.0 ** old + 2.0 ** b), 1)
    report["outputs"] = (f"{m} outputs: each analysis prime's answers solved for the readouts, "
                         f"joined by CRT, confirmed on every answer of every output modulo every "
                         f"prime asked")
    return canon, n


def _role(roles, view):
    return roles.get(str(view.K.p), {}).get("role")
