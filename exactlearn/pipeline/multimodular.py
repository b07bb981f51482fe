"""Exact rationals from modular images: the multi-modular method (docs: explanation/multimodular.md).

Over the modular field one prime p certifies a run *modulo p*: the discrete
logs give every W exactly (an exponent lifted to the symmetric range is the
true one), but v comes back as residues, and rational reconstruction modulo
one prime returns *a* rational of height up to about sqrt(p/2) -- for a taller
value a wrong small one, which a certificate modulo the same p cannot tell
apart (e.g. ``1/(2**78 - 1)`` modulo ``7*2**120 + 1``).  Float32 weights read
exactly are dyadic rationals of heights 2^45 to 2^85, well past one prime.

:func:`learn_over_primes` therefore

1. asks the plan modulo one analysis prime ``c*2**120 + 1`` (the field's own prime;
   the next one when a bad reduction skips it), analyses the run there without
   reconstruction (:class:`~exactlearn.fields.modular.ResidueModular`) and certifies
   it there: W exactly, v as residues;
2. reconstructs v from the residues so far by CRT (with the margin of
   :func:`~exactlearn.fields.modular.reconstruction_bound`) and confirms the rationals
   modulo a further, independent prime p' that it draws itself, uniformly among the
   primes in [2^126, 2^127), with a random omega': the plan is asked again modulo p'
   and the rational heads must reproduce every answer exactly, with the answers
   determining v modulo p' (the design matrix of v has full rank);
3. when the confirmation is refuted (or nothing reconstructs yet), p' is an analysis
   prime too: with W exact, its answers give v modulo p' by a linear solve
   (:func:`solve_v_plan`), (W, v mod p') is certified on every answer, those residues
   join the CRT, and step 2 repeats with the next random prime.

Ordinary heights cost two passes of the plan (the analysis prime and the
confirmation), not three.  **Wrong-reconstruction bound.**  W is exact from the logs,
so a wrong answer is a wrong v: a coordinate r != v survives a confirmation only if
p' divides the numerator N of r - v, a nonzero integer of at most h(r) + h(v) + 1
bits (h = bits of the height), and r is fixed before p' is drawn.  At most that many
bits / 126 primes of [2^126, 2^127) divide N, and there are more than 2^119 of them
(Rosser--Schoenfeld), so the probability is at most (h(r) + h(v) + 1) / (126 * 2^119)
per confirmation, and a union bound multiplies it by the confirmations asked.  Any
model held in memory has h(v) < 2^38 (32 GiB), which gives about 2^-88
(:func:`log2_wrong_bound`), far below 2^-64.

**A declared height bound** B (``max_height``): primes are joined until their product
M exceeds 2 B^2 -- the analysis prime alone for B < 2^60 -- and the rationals of height
<= B congruent to the residues are unique, so the reconstruction within B is the
answer, with no confirmation prime when the plan's degeneracy bound
(:func:`log2_plan_degeneracy`) is at most 2^-20 (the proof:
docs/explanation/multimodular.md, "A declared height bound").  A box past B fails
explicitly when its residues have no preimage within B.

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
>>> [(r["role"], r["queries"], "refuted" in r) for r in res.multimodular["primes"]]
[('analysis', 15, False), ('confirmation', 15, True), ('confirmation', 15, False)]
>>> short = MultiHeadAttention([([[1, 0], [0, 1]], ["1/3", 1])])
>>> [r["role"] for r in learn(Oracle(short, Modular()), d=2, heads=1, seed=0).multimodular["primes"]]
['analysis', 'confirmation']
>>> res = learn(Oracle(short, Modular()), d=2, heads=1, seed=0, max_height=3)
>>> res.heads == short.canonical_heads(), res.multimodular["route"], len(res.multimodular["primes"])
(True, 'height bound', 1)
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
                             ResidueModular, crt_reconstruct, rational_reconstruct,
                             reconstruction_bound)
from exactlearn.model import Head, HeadEvaluator, HeadSet, canonicalize, constant_of
from exactlearn.progress import current as progress_now
from exactlearn.errors import (CertificateError, ExactLearnError, ExactnessError, HeightExceeded,
                               PrimesDisagree, SingularMatrix)

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


def log2_wrong_bound(heads, confirmations: int = 1) -> float:
    """log2 of the bound on the probability that a wrong reconstruction survives a
    confirmation: (max h(r) + 2^38 + 1) / (126 * 2^119), h in bits (module docstring),
    times the number of confirmations asked (a union bound over them)."""
    values = [x for hd in heads for x in hd.v] + [constant_of(heads)]
    h = max((height(x).bit_length() for x in values), default=1)
    return round(math.log2(h + 2 ** MODEL_BITS_LOG2 + 1) - math.log2(CONFIRM_BITS - 1)
                 - LOG2_CONFIRM_PRIMES + math.log2(max(1, confirmations)), 1)


def _reconstruct(W_set, residues, moduli):
    """Rational heads from per-prime residue vectors, or None when some value is past the
    reconstruction bound of the product of the moduli.  ``W_set``: each head's W, or with
    biases its (W, u) (exact from the logs).  A run with biases has one residue vector more than heads, the
    constant ``(c,)`` (docs: explanation/biases.md), and gives a
    :class:`~exactlearn.model.HeadSet`."""
    bias = len(residues[0]) == len(W_set) + 1
    try:
        vs = [tuple(crt_reconstruct([r[h][i] for r in residues], moduli)
                    for i in range(len(residues[0][h]))) for h in range(len(residues[0]))]
    except ReconstructionError:
        return None
    if not bias:                     # W_set: each head's W
        return tuple(Head(W, v) for W, v in zip(W_set, vs))
    heads = tuple(Head(W, v, u) for (W, u), v in zip(W_set, vs))
    return HeadSet(heads, vs[-1][0], True)


def height(x) -> int:
    """max(|numerator|, denominator) of a rational."""
    x = mpq(x)
    return max(abs(int(x.numerator)), int(x.denominator))


def reconstruct_bounded(W_set, residues, moduli, B: int) -> tuple:
    """The heads whose v are *the* rationals of height <= B congruent to the residues
    (unique since the product M of the moduli exceeds 2 B^2), their W checked against B.
    Raises :class:`HeightExceeded` when a value has no such preimage or a W entry is
    taller than B: the box breaks the declared bound."""
    M = math.prod(moduli)
    if M <= 2 * B * B:
        raise ValueError("reconstruct_bounded needs a product of moduli above 2 B^2")
    tall = [x for W in W_set for row in W for x in row if height(x) > B]
    if tall:
        raise HeightExceeded(f"W has an entry of height {height(tall[0])} > {B}: the black box "
                             f"breaks the declared height bound (--max-height / max_height)")
    try:
        return tuple(Head(W, tuple(crt_reconstruct([r[h][i] for r in residues], moduli, B)
                                   for i in range(len(residues[0][h]))))
                     for h, W in enumerate(W_set))
    except ReconstructionError:
        raise HeightExceeded(
            f"a value of v has no rational preimage of height <= {B} modulo the "
            f"{len(moduli)} prime(s) asked: the black box breaks the declared height bound "
            f"(--max-height / max_height)") from None


def worst_exponent_factor(plan) -> int:
    """max over the plan's configurations of ||e||_1 ||x||_1: |e^T W x| <= B times it when
    every entry of W has height <= B."""
    return max(sum(abs(a) for a in c.e) * sum(abs(a) for a in c.x) for c in plan.configs)


def log2_plan_degeneracy(plan, H: int) -> float:
    """log2 of the bound on the probability, over the draw of the plan, that a reduction
    modulo the analysis prime is degenerate in a way the analysis cannot see
    (docs/explanation/multimodular.md, "A declared height bound"):
    ((2d - 1) H + H (H - 1)) / (2R + 1), divided by the probability 1 - 2d/(2R + 1) that
    the draw is invertible; R the smallest largest entry of X and E (at most the range the
    entries were drawn from, so the bound is conservative)."""
    d = plan.d
    R = min(max(abs(a) for col in plan.X for a in col), max(abs(a) for col in plan.E for a in col))
    n = (2 * d - 1) * H + H * (H - 1)
    inv = 1 - 2 * d / (2 * R + 1)
    if inv <= 0:
        return 0.0
    return round(min(0.0, math.log2(n / (2 * R + 1) / inv)), 1)


#: The height-bound route certifies from its primes alone when the plan's degeneracy bound is
#: at most 2^MAX_LOG2_BOUNDED; otherwise it adds a confirmation prime.
MAX_LOG2_BOUNDED = -20


def learn_over_primes(K: Modular, run_prime, confirm, rng, max_primes: int = DEFAULT_MAX_PRIMES,
                      rank_check=None, residues_at=None, bounded=None):
    """The multi-modular method (module docstring).

    ``run_prime(Kr)`` asks the plan modulo ``Kr.p`` (Kr a :class:`ResidueModular`),
    analyses and certifies it there, and returns ``(heads, n_certified, queries)`` with
    v as residues.  ``confirm(heads, Kc)`` asks the same queries modulo the confirmation
    field and returns ``(observations, n_certified, queries)``, having certified
    ``heads`` there (``heads`` None: ask only, ``n_certified`` 0); a failing certificate
    raises with ``exc.observations`` set.  ``residues_at(W_set, observations, Kc)``
    solves v modulo ``Kc.p`` from those answers, the W exact, and returns
    ``(residue vectors in the order of W_set, n_certified)``.
    Returns ``(heads, n_certified, report)``.

    Reconstruct from the primes so far, confirm on the next random prime; a refuted
    confirmation (or a prime asked while nothing reconstructs yet) adds its residues
    to the CRT.  Ordinary heights cost two passes of the plan.  ``bounded``
    (``{"B", "worst", "log2_degeneracy"}``, a declared height bound): the primes are
    joined until their product exceeds 2 B^2 and the reconstruction within B is the
    answer (one pass for B < 2^60), confirmed on a further prime only when the plan's
    degeneracy bound is above 2^MAX_LOG2_BOUNDED.

    A prime whose reduction is bad (a denominator of the model divisible by it, a
    softmax denominator vanishing modulo it) is skipped and reported.
    Every exception raised carries the per-prime report as ``exc.report``.
    ``rank_check(heads, observations, Kc)`` checks that the confirmation's answers
    determine v (default :func:`_check_design_rank`).
    """
    rank_check = rank_check or _check_design_rank
    runs: list = []
    W_set = None
    residues, moduli = [], []
    n_cert = 0
    refuted = 0
    confirmations = 0
    primes = analysis_primes(K.p)

    def report(exact):
        out = {"exact_over_Q": exact, "primes": runs, "stable_after": len(moduli),
               "refuted_confirmations": refuted,
               "route": "height bound" if bounded else "confirmation"}
        if bounded:
            out["max_height"] = str(bounded["B"])
        return out

    def failing(exc):
        exc.report = report(False)
        return exc

    def too_tall(why=""):
        bits = int(math.prod(moduli)).bit_length() // 2 - 17 if moduli else 0
        return failing(HeightExceeded(
            f"rational height exceeds what {len(moduli)} primes reconstruct (|num|, den up "
            f"to about 2^{bits}{why}); allow more primes (max_primes / --max-primes)"))

    # 1. the analysis prime: discrete logs give W exactly, v comes back as residues
    while W_set is None:
        if len(runs) >= max_primes:
            raise too_tall()
        p = next(primes)
        progress_now().at(prime=len(runs) + 1, detail="analysis")      # progress=
        if bounded and 3 * K.D * bounded["B"] * bounded["worst"] >= p - 1:
            raise failing(ExactnessError(
                f"with the declared height bound B = {bounded['B']} the plan's exponents "
                f"D e^T W x may reach {K.D * bounded['B'] * bounded['worst']}, which the analysis "
                f"prime {p.bit_length()} bits cannot keep apart (3 |D e^T W x| < p - 1 is "
                f"needed); use a smaller --range / --e-range"))
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
        bias = getattr(heads, "bias", False)       # the plan for biases: u exact, c a residue
        W_set = tuple((h.W, h.u) for h in heads) if bias else tuple(h.W for h in heads)
        residues.append([h.v for h in heads] + ([(constant_of(heads),)] if bias else []))
        moduli.append(p)

    # 2. reconstruct, confirm on the next random prime; a refuted one joins the CRT
    while True:
        if bounded and math.prod(moduli) > 2 * bounded["B"] ** 2:
            try:
                heads = canonicalize(reconstruct_bounded(W_set, residues, moduli, bounded["B"]))
            except HeightExceeded as exc:
                raise failing(exc)
            if bounded["log2_degeneracy"] <= MAX_LOG2_BOUNDED:
                out = report(True)
                out.update(log2_wrong_reconstruction_bound=bounded["log2_degeneracy"],
                           method=f"CRT over {len(moduli)} prime(s) whose product exceeds 2 B^2, "
                                  f"B = {bounded['B']} the declared height bound: the rationals "
                                  f"of height <= B are unique; no confirmation prime")
                return heads, n_cert, out
            candidate = heads
        elif bounded:
            candidate = None                 # more primes until their product exceeds 2 B^2
        else:
            candidate = _reconstruct(W_set, residues, moduli)
        if candidate is None and len(moduli) >= max_primes:
            raise too_tall()
        if len(runs) >= 2 * max_primes + 3:
            raise too_tall(f"; {refuted} reconstruction(s) refuted by the confirmation prime")
        heads = None if candidate is None else canonicalize(candidate)
        role = "analysis" if heads is None else "confirmation"
        observations = Kc = None
        progress_now().at(prime=len(runs) + 1, detail=role,                # progress=
                          asking="ask" if heads is None else "confirm")
        try:
            observations, n, Kc, asked = _confirm_once(heads, confirm, rng, K.D)
            runs.append({"p": str(Kc.p), "role": role, "omega": str(Kc.omega), "queries": asked})
            if heads is None:
                raise _Unconfirmed
            rank_check(heads, observations, Kc)
        except (CertificateError, PrimesDisagree, _Unconfirmed) as exc:
            if Kc is None:                   # the further prime's own certificate failed
                Kc = getattr(exc, "field", None)
                observations = getattr(exc, "observations", None)
                runs.append({"p": None if Kc is None else str(Kc.p), "role": role,
                             "omega": None if Kc is None else str(Kc.omega),
                             "queries": getattr(exc, "queries", None)})
            if heads is not None:
                runs[-1]["refuted"] = str(exc)
                refuted += 1
                if bounded:                  # unique below B: the box breaks the bound
                    raise failing(HeightExceeded(
                        f"the reconstruction within the declared height bound B = "
                        f"{bounded['B']} is refuted modulo a further prime ({exc}): the black "
                        f"box breaks the bound, or lies outside the model class"))
                if len(moduli) >= max_primes:
                    raise too_tall(f"; {refuted} reconstruction(s) refuted by the confirmation "
                                   f"prime, as for a black box outside the model class")
            if bias:                         # v and c from a further prime's answers: not yet
                B = reconstruction_bound(math.prod(moduli))
                raise failing(HeightExceeded(
                    f"a biased model whose v or c is taller than one analysis prime reconstructs "
                    f"(|num| and den at most {B}, about 2^{B.bit_length() - 1}) is not supported "
                    f"yet: the confirmation prime refuted or could not confirm the "
                    f"reconstruction{f' ({exc})' if str(exc) else ''}"))
            if observations is None or Kc is None or residues_at is None:
                raise failing(PrimesDisagree("the answers modulo the further prime are not at hand"))
            try:
                vs, n_more = residues_at(W_set, observations, Kc)
            except (CertificateError, PrimesDisagree, SingularMatrix) as exc2:
                raise failing(PrimesDisagree(
                    f"modulo the further prime {Kc.p} the answers are not those of the analysed W "
                    f"with any v ({exc2}): a bad reduction of the analysis prime, or a black box "
                    f"outside the model class"))
            runs[-1]["joined"] = True
            n_cert += n_more
            residues.append(vs)
            moduli.append(Kc.p)
            continue
        n_cert += n
        confirmations = refuted + 1
        out = report(True)
        out.update(log2_wrong_reconstruction_bound=log2_wrong_bound(heads, confirmations),
                   method="CRT over the primes asked, rational reconstruction, confirmed modulo an "
                          "independent random prime (a refuted confirmation's residues join the CRT)")
        if bounded:
            out["method"] = (f"CRT over {len(moduli)} prime(s) whose product exceeds 2 B^2 (B = "
                             f"{bounded['B']}), confirmed modulo an independent random prime: the "
                             f"plan's degeneracy bound 2^{bounded['log2_degeneracy']} is above "
                             f"2^{MAX_LOG2_BOUNDED}")
        return heads, n_cert, out


class _Unconfirmed(Exception):
    """A further prime asked while nothing reconstructs: its residues join the CRT."""


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
                  trace=None, plan=None, confirm_at=None, max_height=None,
                  answers_at=None) -> tuple:
    """The modular field's run of an exact strategy: the multi-modular method when the
    black box can be asked modulo other primes (``oracle.over``), else one prime with v
    certified modulo p only (exact over Q with ``max_height``, when the prime allows it).

    ``analyse_at(ask, Kr, trace)`` asks a strategy's plan through ``ask`` (a child
    :class:`~exactlearn.oracle.Recorder` of ``rec``), analyses it in ``Kr`` and certifies
    it there, returning ``(heads, n_certified)``.  Returns
    ``(heads, n_certified, multimodular report)``.

    ``plan``: the strategy asks exactly ``plan.queries``, in order (the paper plan).  Then
    the observations are streamed, not kept (the recorders count without recording;
    the strategy certifies the plan's values itself), and a further prime asks the plan
    again and certifies it family by family (:func:`~exactlearn.pipeline.certify.certify_plan`);
    the asked queries, the counts and every verdict are those of the recorded run.
    ``confirm_at(ask, heads, Kc)`` (with ``plan``) replaces that confirmation: it asks the
    plan through ``ask`` and returns the number of observations certified (a cluster's,
    :mod:`exactlearn.pipeline.distributed`); ``answers_at()`` then gives the last such
    prime's answers of the group of x_1, ``(y_shared, {configuration: [ints]})``.
    ``max_height`` (with ``plan``): the declared bound B on the numerators and
    denominators of the canonical heads (docs/explanation/multimodular.md)."""
    over = getattr(oracle, "over", None)
    asked: list = []
    keep = plan is None
    bounded = None
    if max_height is not None:
        if plan is None:
            raise ValueError("max_height applies to the paper plan")
        bounded = {"B": int(max_height), "worst": worst_exponent_factor(plan),
                   "log2_degeneracy": log2_plan_degeneracy(plan, plan.H)}

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
        if bounded is not None:
            return _bounded_one_prime(K, bounded, lambda Kr: at(Kr, oracle, trace))
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
        got = None
        try:
            if keep:
                for tokens in asked:
                    sub(tokens)
                got = sub.observations
                n = 0 if heads is None else certify(heads, d, got, Kc)
                return got, n, sub.queries
            if confirm_at is not None:
                if heads is None:            # nothing to certify: v = 0 fails at once
                    heads = tuple(Head(h.W, (mpq(0),) * d) for h in (found[0] if found else ()))
                    try:
                        confirm_at(sub, heads, Kc)
                    except CertificateError:
                        pass
                    return ("cluster", answers_at()), 0, sub.queries
                n = confirm_at(sub, heads, Kc)
                return ("cluster", answers_at), n, sub.queries
            y_shared, values = ask_plan(plan, sub)
            got = ("plan", (y_shared, values))
            n = 0 if heads is None else certify_plan(heads, plan, y_shared, values, Kc)
            return got, n, sub.queries
        except ExactLearnError as exc:
            exc.queries, exc.field = sub.queries, Kc
            if confirm_at is not None and answers_at is not None:
                got = ("cluster", answers_at())
            exc.observations = got
            raise

    def residues_at(W_set, observations, Kc):
        if keep:
            return solve_v_observations(W_set, d, observations, Kc)
        kind, got = observations
        if kind == "cluster":
            got = got() if callable(got) else got
            if got is None:
                raise PrimesDisagree("the answers of the group of x_1 did not come back from the cluster")
            y0, vals = got
            return solve_v_plan(W_set, plan, Kc(y0), {n: [Kc(y) for y in ys] for n, ys in vals.items()},
                                Kc, certify_all=False)
        return solve_v_plan(W_set, plan, got[0], got[1], Kc)

    def rank_check(heads, observations, Kc):
        if keep:
            return _check_design_rank(heads, observations, Kc)
        return _check_design_rank_plan(heads, plan, Kc)

    kw = {} if max_primes is None else {"max_primes": max_primes}
    return learn_over_primes(K, run_prime, confirm, rng, rank_check=rank_check,
                             residues_at=residues_at, bounded=bounded, **kw)


def _bounded_one_prime(K, bounded, run) -> tuple:
    """A black box fixed to one prime p, with a declared height bound B: exact over Q when
    p > 2 B^2, the exponents fit (3 D B max ||e||_1 ||x||_1 < p - 1) and the plan's
    degeneracy bound is at most 2^MAX_LOG2_BOUNDED; else certified modulo p only."""
    B = bounded["B"]
    Kr = ResidueModular(K.p, K.omega, K.D)
    heads, n, asked = run(Kr)
    fits = 3 * K.D * B * bounded["worst"] < K.p - 1
    if K.p <= 2 * B * B or not fits or bounded["log2_degeneracy"] > MAX_LOG2_BOUNDED:
        out = residue_report(heads, K, asked)
        out["note"] += (" The declared height bound does not make it exact over Q here: "
                        + ("p <= 2 B^2" if K.p <= 2 * B * B else
                           "the exponents may reach (p - 1)/3" if not fits else
                           f"the plan's degeneracy bound 2^{bounded['log2_degeneracy']} is above "
                           f"2^{MAX_LOG2_BOUNDED}") + ".")
        out["max_height"] = str(B)
        return heads, n, out
    runs = [{"p": str(K.p), "role": "analysis", "queries": asked}]
    try:
        exact = canonicalize(reconstruct_bounded(tuple(h.W for h in heads), [[h.v for h in heads]],
                                                 [K.p], B))
    except HeightExceeded as exc:
        exc.report = {"exact_over_Q": False, "primes": runs, "stable_after": 1,
                      "refuted_confirmations": 0, "route": "height bound", "max_height": str(B)}
        raise
    return exact, n, {"exact_over_Q": True, "primes": runs, "stable_after": 1,
                      "refuted_confirmations": 0, "route": "height bound", "max_height": str(B),
                      "log2_wrong_reconstruction_bound": bounded["log2_degeneracy"],
                      "method": f"one prime p > 2 B^2, B = {B} the declared height bound: the "
                                f"rationals of height <= B are unique"}


def solve_v_plan(W_set, plan, y_shared, values, Kc, certify_all=True) -> tuple:
    """v modulo ``Kc.p`` for heads with the exact ``W_set``, from a paper plan's answers
    there: for each direction e_j the family (x_1, e_j) gives
    ``f(q_k) = V.x_1 + sum_h t_h(k) v_h.e_j``, ``t_h(k) = k w_h / (k w_h + 1)``, a
    (2H+1) x (m+1) linear system (the one :func:`_check_design_rank_plan` checks), and
    ``E^T v_h = (v_h.e_j)_j``.  Then (``certify_all``) every answer is recomputed from
    (W, v).  Returns ``(residue vectors in the order of W_set, n_certified)``; raises
    :class:`PrimesDisagree` when the system is undetermined or inconsistent, and
    :class:`CertificateError` when (W, v) do not reproduce an answer."""
    d, m = plan.d, len(W_set)
    if m == 0:
        return [], (certify_plan((), plan, y_shared, values, Kc) if certify_all else 0)
    ev = HeadEvaluator([Head(W, (mpq(0),) * d) for W in W_set], d, Kc)
    ctx = Kc.scalar_ctx
    C = []                                   # C[j] = [v_h . e_j for h]
    for j in range(d):
        n = plan.index("basis", 0, j)
        c = plan.configs[n]
        fam = ev.family(c.a, c.x)
        if fam is None:
            raise PrimesDisagree("the family (x_1, e_j) has no integer path modulo the further prime")
        rows = [Kc.one] + [Kc.zero] * m + [Kc(y_shared)]
        for k, y in enumerate(values[n], start=1):
            rows.append(Kc.one)
            rows.extend(k * w / (k * w + 1) for w, _, _ in fam)
            rows.append(Kc(y))
        R, rank = flint.fmpz_mod_mat(len(values[n]) + 1, m + 2, rows, ctx).rref()
        if rank != m + 1 or any(R[i, i] != 1 for i in range(m + 1)):
            raise PrimesDisagree(
                f"the family (x_1, e_{j + 1}) modulo the further prime is "
                + ("inconsistent with the analysed W" if rank == m + 2 else "undetermined")
                + f" (rank {rank} of {m + 1})")
        C.append([R[1 + h, m + 1] for h in range(m)])
    Et = flint.fmpz_mod_mat(d, d, [plan.E[j][r] for j in range(d) for r in range(d)], ctx)
    if Et.rank() < d:
        raise SingularMatrix("E is singular modulo the further prime")
    V = Et.solve(flint.fmpz_mod_mat(d, m, [C[j][h] for j in range(d) for h in range(m)], ctx))
    vs = [tuple(mpq(int(V[r, h])) for r in range(d)) for h in range(m)]
    n_cert = 0
    if certify_all:
        n_cert = certify_plan([Head(W, v) for W, v in zip(W_set, vs)], plan, y_shared, values, Kc)
    return vs, n_cert


def solve_v_observations(W_set, d, observations, Kc) -> tuple:
    """:func:`solve_v_plan` for any recorded observations: ``f(X) = sum_h v_h . y_h(X)``
    with the softmax averages y_h from the exact W; rows are taken as
    :func:`_check_design_rank` takes them until the rank is full, the system solved, and
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


def _check_design_rank_plan(heads, plan, K) -> None:
    """:func:`_check_design_rank` for the observations of a paper plan (the queries of
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
    """A sufficient condition for :func:`_check_design_rank`'s full rank, checked on small
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
            **({"constant_residue": str(int(constant_of(heads)))} if getattr(heads, "bias", False) else {}),
            "rational_guess": [[guess(x) for x in h.v] for h in heads],
            "note": "certified modulo p only: the black box answers modulo one prime. The heads "
                    "reproduce every answer modulo p; v is given as residues modulo p, and W is "
                    "exact only if the box's exponents D e^T W x stayed within (p-1)/2 (not "
                    "checkable from answers modulo one prime). The rationals are an uncertified "
                    "guess."}
