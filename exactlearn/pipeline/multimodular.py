"""Exact rationals from modular images: the multi-modular method (docs: explanation/multimodular.md).

Over the modular field one prime p certifies a run *modulo p*: the discrete
logs give every W exactly (an exponent lifted to the symmetric range is the
true one), but v comes back as residues, and rational reconstruction modulo
one prime returns *a* rational of height up to about sqrt(p/2) -- for a taller
value a wrong small one, which a certificate modulo the same p cannot tell
apart (e.g. ``1/(2**78 - 1)`` modulo ``7*2**120 + 1``).  Float32 weights read
exactly are dyadic rationals of heights 2^45 to 2^85, well past one prime.

:func:`learn_over_primes` therefore

1. asks the plan modulo the analysis primes ``c*2**120 + 1`` in turn (the first
   is the field's own prime), analyses each run modulo its prime without
   reconstruction (:class:`~exactlearn.fields.modular.ResidueModular`) and
   certifies it there; every prime must give the same canonical W;
2. combines the residues of v by CRT and reconstructs (with the margin of
   :func:`~exactlearn.fields.modular.reconstruction_bound`) until the value is
   *stable*: the same rationals from the first k - 1 and the first k primes;
3. confirms the rationals modulo one further, independent prime p' that it
   draws itself, uniformly among the primes in [2^126, 2^127), with a random
   omega': the plan is asked again modulo p' and the rational heads must
   reproduce every answer exactly, with the answers determining v modulo p'
   (the design matrix of v has full rank).

The paper's count holds *per prime*; the result lists each prime with its
queries.  **Wrong-reconstruction bound.**  W is exact from the logs, so a
wrong answer is a wrong v: a coordinate r != v survives the confirmation only
if p' divides the numerator N of r - v, a nonzero integer of at most
h(r) + h(v) + 1 bits (h = bits of the height).  At most that many bits / 126
primes of [2^126, 2^127) divide N, and there are more than 2^119 of them
(Rosser--Schoenfeld), so the probability is at most
(h(r) + h(v) + 1) / (126 * 2^119).  Any model held in memory has h(v) < 2^38
(32 GiB), which gives about 2^-88 (:func:`log2_wrong_bound`), far below 2^-64.

A black box fixed to one prime (a callable returning F_p values) cannot be
asked modulo another: its result is certified *modulo p* only
(``exact_over_Q: false``), v is reported as residues, and reconstructed
rationals appear only as a labelled guess (:func:`residue_report`).

>>> from exactlearn import MultiHeadAttention, Oracle, learn
>>> from exactlearn.fields import Modular
>>> tall = MultiHeadAttention([([[1, 0], [0, 1]], ["1/" + str(2**78 - 1), 1])])
>>> res = learn(Oracle(tall, Modular()), d=2, heads=1, seed=0)
>>> res.status, res.heads == tall.canonical_heads()
('certified', True)
>>> [(r["role"], r["queries"]) for r in res.multimodular["primes"]]
[('analysis', 15), ('analysis', 15), ('analysis', 15), ('confirmation', 15)]
"""

from __future__ import annotations

import math

import flint
import gmpy2
from gmpy2 import mpq

from exactlearn.pipeline.analysis import ask_plan
from exactlearn.pipeline.certify import certify, certify_plan
from exactlearn.fields.base import FieldError
from exactlearn.fields.modular import (DEFAULT_P, BadReduction, ConfirmationModular, Modular, ReconstructionError,
                             ResidueModular, crt_reconstruct, rational_reconstruct)
from exactlearn.model import Head, HeadEvaluator, canonicalize
from exactlearn.progress import current as progress_now
from exactlearn.errors import (CertificateError, ExactLearnError, HeightExceeded,
                               PrimesDisagree)

#: Analysis primes are ``c * 2**ANALYSIS_SHIFT + 1`` for odd c (p - 1 smooth: discrete logs).
ANALYSIS_SHIFT = 120

#: Default number of analysis primes before the height is declared out of reach.
DEFAULT_MAX_PRIMES = 12

#: The confirmation prime is uniform among the primes in [2^(CONFIRM_BITS-1), 2^CONFIRM_BITS).
CONFIRM_BITS = 127

#: log2 of the number of primes in [2^126, 2^127), from below (Rosser--Schoenfeld:
#: x/ln x < pi(x) < 1.25506 x/ln x).
LOG2_CONFIRM_PRIMES = 119

#: Bits of the true heights assumed in the stated bound: any model held in memory (32 GiB).
MODEL_BITS_LOG2 = 38


def analysis_primes(first: int = DEFAULT_P):
    """``first``, then the primes ``c * 2**120 + 1``, c = 3, 5, 7, ... that are prime (skipping ``first``).

    >>> from itertools import islice
    >>> [(p - 1) >> 120 for p in islice(analysis_primes(), 4)]
    [7, 231, 277, 315]
    """
    yield first
    c = 1
    while True:
        c += 2
        p = c * 2 ** ANALYSIS_SHIFT + 1
        if p != first and gmpy2.is_prime(p, 50):
            yield p


def draw_confirmation_field(rng, scale: int, bits: int = CONFIRM_BITS) -> ConfirmationModular:
    """A prime uniform among the primes in [2^(bits-1), 2^bits) (rejection sampling of odd
    numbers) and omega uniform in [2, p-2], from ``rng``."""
    while True:
        n = rng.getrandbits(bits - 1) | (1 << (bits - 1)) | 1
        if gmpy2.is_prime(n, 50):
            return ConfirmationModular(n, rng.randrange(2, n - 1), scale)


def log2_wrong_bound(heads) -> float:
    """log2 of the bound on the probability that a wrong reconstruction survives the
    confirmation: (max h(r) + 2^38 + 1) / (126 * 2^119), h in bits (module docstring)."""
    h = max((max(int(abs(x.numerator)), int(x.denominator)).bit_length()
             for hd in heads for x in hd.v), default=1)
    return round(math.log2(h + 2 ** MODEL_BITS_LOG2 + 1) - math.log2(CONFIRM_BITS - 1)
                 - LOG2_CONFIRM_PRIMES, 1)


def _reconstruct(W_set, residues, moduli):
    """Rational heads from per-prime residue vectors, or None when some value is past the
    reconstruction bound of the product of the moduli."""
    try:
        return tuple(Head(W, tuple(crt_reconstruct([r[h][i] for r in residues], moduli)
                                   for i in range(len(residues[0][h]))))
                     for h, W in enumerate(W_set))
    except ReconstructionError:
        return None


def learn_over_primes(K: Modular, run_prime, confirm, rng, max_primes: int = DEFAULT_MAX_PRIMES,
                      rank_check=None):
    """The multi-modular method (module docstring).

    ``run_prime(Kr)`` asks the plan modulo ``Kr.p`` (Kr a :class:`ResidueModular`),
    analyses and certifies it there, and returns ``(heads, n_certified, queries)`` with
    v as residues.  ``confirm(heads, Kc)`` asks the same queries modulo the confirmation
    field, certifies ``heads`` there and returns ``(observations, n_certified, queries)``.
    Returns ``(heads, n_certified, report)``.

    A prime whose reduction is bad (a denominator of the model divisible by it, a
    softmax denominator vanishing modulo it) is skipped and reported.  A stable
    reconstruction that the confirmation prime refutes is not a failure of the box: it
    was stable by coincidence (values congruent modulo the primes so far), so more
    analysis primes are asked until a new stable value survives its own confirmation.
    Every exception raised carries the per-prime report as ``exc.report``.
    ``rank_check(heads, observations, Kc)`` checks that the confirmation's answers
    determine v (default :func:`_check_design_rank`).
    """
    rank_check = rank_check or _check_design_rank
    runs: list = []
    W_set = None
    residues, moduli = [], []
    previous = None
    n_cert = 0
    refuted = 0
    primes = analysis_primes(K.p)

    def report(exact):
        return {"exact_over_Q": exact, "primes": runs, "stable_after": len(moduli),
                "refuted_confirmations": refuted}

    def failing(exc):
        exc.report = report(False)
        return exc

    while True:
        stable = None
        while stable is None:
            if len(moduli) >= max_primes or len(runs) >= 2 * max_primes + 3:
                # stable means the first k-1 primes already reconstruct it: their bound counts
                bits = int(math.prod(moduli[:-1])).bit_length() // 2 - 17 if len(moduli) > 1 else 0
                raise failing(HeightExceeded(
                    f"rational height exceeds what {len(moduli)} primes reconstruct (|num|, den up "
                    f"to about 2^{bits}, stable over two primes"
                    + (f"; {refuted} stable value(s) refuted by the confirmation prime, as for a "
                       f"black box outside the model class" if refuted else "")
                    + "); allow more primes (max_primes / --max-primes)"))
            p = next(primes)
            progress_now().at(prime=len(runs) + 1, detail="analysis")      # progress=
            Kr = ResidueModular(p, K.omega if p == K.p else None, K.D)
            try:
                heads, n, asked = run_prime(Kr)
            except BadReduction as exc:
                runs.append({"p": str(p), "role": "skipped", "queries": getattr(exc, "queries", 0),
                             "reason": str(exc)})
                continue
            except ExactLearnError as exc:
                runs.append({"p": str(p), "role": "analysis", "queries": getattr(exc, "queries", None),
                             "failed": str(exc)})
                raise failing(exc)
            n_cert += n
            runs.append({"p": str(p), "role": "analysis", "queries": asked})
            if W_set is None:
                W_set = tuple(h.W for h in heads)
            elif tuple(h.W for h in heads) != W_set:
                raise failing(PrimesDisagree(
                    f"the analyses modulo {len(moduli) + 1} primes disagree on the canonical W "
                    f"({len(W_set)} vs {len(heads)} heads): a bad reduction, or a black box "
                    f"outside the model class"))
            residues.append([h.v for h in heads])
            moduli.append(p)
            current = _reconstruct(W_set, residues, moduli)
            if current is not None and current == previous:
                stable = current
            previous = current
        heads = canonicalize(stable)
        progress_now().at(prime=len(runs) + 1, detail="confirmation", asking="confirm")
        try:
            observations, n, Kc, asked = _confirm_once(heads, confirm, rng, K.D)
            runs.append({"p": str(Kc.p), "role": "confirmation", "omega": str(Kc.omega),
                         "queries": asked})
            rank_check(heads, observations, Kc)
        except (CertificateError, PrimesDisagree) as exc:
            if runs[-1]["role"] != "confirmation":
                Kc = getattr(exc, "field", None)
                runs.append({"p": None if Kc is None else str(Kc.p), "role": "confirmation",
                             "queries": getattr(exc, "queries", None)})
            runs[-1]["refuted"] = str(exc)
            refuted += 1
            previous = None          # stable by coincidence: a new value must stabilise
            continue
        n_cert += n
        out = report(True)
        out.update(log2_wrong_reconstruction_bound=log2_wrong_bound(heads),
                   method="CRT over the analysis primes, rational reconstruction once stable, "
                          "confirmed modulo an independent random prime")
        return heads, n_cert, out


def _confirm_once(heads, confirm, rng, D) -> tuple:
    """Ask modulo a fresh confirmation prime, redrawing it (at most twice) when a softmax
    denominator vanishes modulo it (probability about 2^-100 per query)."""
    for _ in range(3):
        Kc = draw_confirmation_field(rng, D)
        try:
            observations, n, asked = confirm(heads, Kc)
            return observations, n, Kc, asked
        except BadReduction:
            continue
    raise PrimesDisagree("three confirmation primes met a zero denominator: a bad reduction")


def learn_modular(oracle, rec, K: Modular, d: int, rng, analyse_at, max_primes=None,
                  trace=None, plan=None, confirm_at=None) -> tuple:
    """The modular field's run of an exact strategy: the multi-modular method when the
    black box can be asked modulo other primes (``oracle.over``), else one prime with v
    certified modulo p only.

    ``analyse_at(ask, Kr, trace)`` asks a strategy's plan through ``ask`` (a child
    :class:`~exactlearn.oracle.Recorder` of ``rec``), analyses it in ``Kr`` and certifies
    it there, returning ``(heads, n_certified)``.  Returns
    ``(heads, n_certified, multimodular report)``.

    ``plan``: the strategy asks exactly ``plan.queries``, in order (the paper plan).  Then
    the observations are streamed, not kept (the recorders count without recording;
    the strategy certifies the plan's values itself), and the confirmation asks the plan
    again and certifies it family by family (:func:`~exactlearn.pipeline.certify.certify_plan`);
    the asked queries, the counts and every verdict are those of the recorded run.
    ``confirm_at(ask, heads, Kc)`` (with ``plan``) replaces that confirmation: it asks the
    plan through ``ask`` and returns the number of observations certified (a cluster's,
    :mod:`exactlearn.pipeline.distributed`)."""
    over = getattr(oracle, "over", None)
    asked: list = []
    keep = plan is None

    def at(Kr, box, tr):
        sub = rec.child(box, Kr, keep=keep)
        try:
            heads, n = analyse_at(sub, Kr, tr)
        except ExactLearnError as exc:
            exc.queries = sub.queries            # the per-prime report keeps them
            raise
        if keep and not asked:
            asked.extend(t for t, _ in sub.observations)
        return heads, n, sub.queries

    if over is None:
        heads, n, asked_p = at(ResidueModular(K.p, K.omega, K.D), oracle, trace)
        return heads, n, residue_report(heads, K, asked_p)

    found: list = []

    def run_prime(Kr):
        first = Kr.p == K.p
        if found and plan is not None:     # the last prime's exponents: its logs, looked up
            Kr.know_exponents(plan_exponents(plan, found[-1], Kr.D))
        got = at(Kr, oracle if first else over(Kr), trace if first else None)
        found.append(got[0])
        return got

    def confirm(heads, Kc):
        sub = rec.child(over(Kc), Kc, keep=keep)
        try:
            if keep:
                for tokens in asked:
                    sub(tokens)
                return sub.observations, certify(heads, d, sub.observations, Kc), sub.queries
            if confirm_at is not None:
                return plan, confirm_at(sub, heads, Kc), sub.queries
            y_shared, values = ask_plan(plan, sub)
            return plan, certify_plan(heads, plan, y_shared, values, Kc), sub.queries
        except ExactLearnError as exc:
            exc.queries, exc.field = sub.queries, Kc
            raise

    kw = {} if max_primes is None else {"max_primes": max_primes}
    return learn_over_primes(K, run_prime, confirm, rng,
                             rank_check=None if keep else _check_design_rank_plan, **kw)


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


def _check_design_rank_plan(heads, plan, K) -> None:
    """:func:`_check_design_rank` for the observations of a paper plan (the queries of
    ``plan``, in order), with a sufficient condition checked first.

    Head h's softmax average on q_k = (a^k, x) is ``x + t_h(k) e`` with
    ``t_h(k) = k w_h / (k w_h + 1)``, ``w_h = exp(e^T W_h x)``, so the row of q_k is
    ``x (x) 1 + sum_h t_h(k) e (x) delta_h``.  If for every family (x_1, e_j) the
    (2H+1) x (m+1) matrix ``[1, t_1(k), ..., t_m(k)]`` (k = 0 is the shared query) has
    full column rank, the rows of that family span ``x_1 (x) 1`` and every
    ``e_j (x) delta_h``, and over all j (E invertible) the whole space: the rank is full.
    Otherwise the rows are built as :func:`_check_design_rank` builds them, whose
    verdict depends only on the rank of all of them -- the same verdict either way."""
    if not heads:
        return
    m = len(heads)
    ev = HeadEvaluator(heads, plan.d, K)
    ctx = K.scalar_ctx
    try:
        for j in range(plan.d):
            c = plan.configs[plan.index("basis", 0, j)]
            fam = ev.family(c.a, c.x)
            if fam is None:
                raise ArithmeticError("no integer path")
            rows = [K.one] + [K.zero] * m
            for k in range(1, 2 * plan.H + 1):
                rows.append(K.one)
                rows.extend(k * w / (k * w + 1) for w, _, _ in fam)
            if flint.fmpz_mod_mat(2 * plan.H + 1, m + 1, rows, ctx).rank() != m + 1:
                raise ArithmeticError("not decided by the first group")
        return
    except (ArithmeticError, ExactLearnError):
        pass
    _check_design_rank(heads, ((plan.tokens(q), None) for q in plan.queries), K)


def _check_design_rank(heads, observations, K) -> None:
    """The answers modulo p' must determine every v: the rows (y_1(X), ..., y_m(X)) over the
    observed X span F_p'^(m d).  Rows are taken final token by final token (the largest
    group first) until the rank is full.  Raises :class:`PrimesDisagree` otherwise."""
    if not heads:
        return
    d = len(heads[0].v)
    cols = len(heads) * d
    groups: dict = {}
    for tokens, _ in observations:
        groups.setdefault(tuple(tokens[-1]), []).append(tokens)
    rows: list = []
    rank = 0
    averages = HeadEvaluator(heads, d, K).averages
    for group in sorted(groups.values(), key=len, reverse=True):
        for tokens in group:
            rows.extend(int(x) for y in averages(tokens) for x in y)
        n = len(rows) // cols
        rank = flint.fmpz_mod_mat(n, cols, rows, K._ctx).rank()
        if rank == cols:
            return
    raise PrimesDisagree(
        f"the confirmation modulo p' is undecided: the answers determine v only up to rank "
        f"{rank} of {cols}")


def residue_report(heads, K: Modular, queries=None) -> dict:
    """What a run modulo one fixed prime certifies: the heads reproduce every answer
    modulo p -- and no more.

    v is certified as residues modulo p (``v_residues``).  W is the exact rational
    whose exponents D e^T W x the discrete logs give, lifted to (-(p-1)/2, (p-1)/2]:
    it is the true W only if the box's exponents did not wrap, i.e.
    |D e^T W x| < (p-1)/2 on the plan's queries, which a box that answers modulo
    one prime cannot show (with its model at hand, ``Oracle.check_plan`` does).
    ``rational_guess`` reconstructs each v from p alone (None past the bound) and is
    **not** certified.
    """
    def guess(r):
        try:
            return str(rational_reconstruct(int(r), K.p))
        except ReconstructionError:
            return None

    return {"exact_over_Q": False, "modulus": str(K.p),
            "primes": [{"p": str(K.p), "role": "analysis", "queries": queries}],
            "v_residues": [[str(int(x)) for x in h.v] for h in heads],
            "rational_guess": [[guess(x) for x in h.v] for h in heads],
            "note": "certified modulo p only: the black box answers modulo one prime. The heads "
                    "reproduce every answer modulo p; v is given as residues modulo p, and W is "
                    "exact only if the box's exponents D e^T W x stayed within (p-1)/2 (not "
                    "checkable from answers modulo one prime). The rationals are an uncertified "
                    "guess."}
