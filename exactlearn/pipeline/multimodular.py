"""Exact rationals from modular images: the multi-modular method (docs: explanation/multimodular.md).

Over the modular field one prime p certifies a run *modulo p*: the discrete
logs give every W exactly (an exponent lifted to the symmetric range is the
true one), but v comes back as residues, and rational reconstruction modulo
one prime returns *a* rational of height up to about sqrt(p/2) -- for a taller
value a wrong small one, which a certificate modulo the same p cannot tell
apart (e.g. ``1/(2**78 - 1)`` modulo ``7*2**120 + 1``).  Float32 weights read
exactly are dyadic rationals of heights 2^45 to 2^85, well past one prime.

:func:`~exactlearn.pipeline.over_primes.learn_over_primes` therefore

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
   (:func:`~exactlearn.pipeline.confirmation.solve_v_plan`), (W, v mod p') is certified on
   every answer, those residues join the CRT, and step 2 repeats with the next random prime.

Ordinary heights cost two passes of the plan (the analysis prime and the
confirmation), not three.  **Wrong-reconstruction bound.**  W is exact from the logs,
so a wrong answer is a wrong v: a coordinate r != v survives a confirmation only if
p' divides the numerator N of r - v, a nonzero integer of at most h(r) + h(v) + 1
bits (h = bits of the height), and r is fixed before p' is drawn.  At most that many
bits / 126 primes of [2^126, 2^127) divide N, and there are more than 2^119 of them
(Rosser--Schoenfeld), so the probability is at most (h(r) + h(v) + 1) / (126 * 2^119)
per confirmation, and a union bound multiplies it by the confirmations asked.  Any
model held in memory has h(v) < 2^38 (32 GiB), which gives about 2^-88
(:func:`~exactlearn.pipeline.crt.log2_wrong_bound`), far below 2^-64.

**A declared height bound** B (``max_height``): primes are joined until their product
M exceeds 2 B^2 -- the analysis prime alone for B < 2^60 -- and the rationals of height
<= B congruent to the residues are unique, so the reconstruction within B is the
answer, with no confirmation prime when the plan's degeneracy bound
(:func:`~exactlearn.pipeline.crt.log2_plan_degeneracy`) is at most 2^-20 (the proof:
docs/explanation/multimodular.md, "A declared height bound").  A box past B fails
explicitly when its residues have no preimage within B.

A black box fixed to one prime (a callable returning F_p values) cannot be
asked modulo another: its result is certified *modulo p* only
(``exact_over_Q: false``), v is reported as residues, and reconstructed
rationals appear only as a labelled guess (:func:`~exactlearn.pipeline.crt.residue_report`).

**Modules.** This module is the modular field's entry point (:func:`learn_modular`: the
multi-modular method for a box that can be asked modulo other primes, else one prime); the
steps live in :mod:`~exactlearn.pipeline.over_primes` (the loop over primes),
:mod:`~exactlearn.pipeline.crt` (the primes, CRT and reconstruction, the stated bounds) and
:mod:`~exactlearn.pipeline.confirmation` (v modulo a further prime, the rank checks).  Their
public names stay importable from here.

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

from gmpy2 import mpq

from exactlearn.errors import CertificateError, ExactLearnError, HeightExceeded, PrimesDisagree
from exactlearn.fields.modular import Modular, ResidueModular
from exactlearn.model import Head, canonicalize
from exactlearn.pipeline.analysis import ask_plan
from exactlearn.pipeline.certify import certify, certify_plan
from exactlearn.pipeline.confirmation import (check_design_rank, check_design_rank_plan,
                                              plan_exponents, solve_v_observations, solve_v_plan)
from exactlearn.pipeline.crt import (MAX_LOG2_BOUNDED, log2_plan_degeneracy, reconstruct_bounded,
                                     residue_report, worst_exponent_factor)
from exactlearn.pipeline.over_primes import learn_over_primes

# the names this module had before its split stay importable from here
from exactlearn.pipeline.crt import (ANALYSIS_SHIFT, CONFIRM_BITS,  # noqa: F401
                                     DEFAULT_MAX_PRIMES, LOG2_CONFIRM_PRIMES,
                                     MODEL_BITS_LOG2, analysis_primes,
                                     draw_confirmation_field, height,
                                     log2_wrong_bound, reconstruct_heads)


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
    bounded = None
    if max_height is not None:
        if plan is None:
            raise ValueError("max_height applies to the paper plan")
        bounded = {"B": int(max_height), "worst": worst_exponent_factor(plan),
                   "log2_degeneracy": log2_plan_degeneracy(plan, plan.H)}
    run = _PrimeRuns(oracle, rec, K, d, analyse_at, trace, plan, confirm_at, answers_at)
    if over is None:
        if bounded is not None:
            return _bounded_one_prime(K, bounded, lambda Kr: run.at(Kr, oracle, trace))
        heads, n, asked_p = run.at(ResidueModular(K.p, K.omega, K.D), oracle, trace)
        return heads, n, residue_report(heads, K, asked_p)
    kw = {} if max_primes is None else {"max_primes": max_primes}
    return learn_over_primes(K, run.run_prime, run.confirm, rng, rank_check=run.rank_check,
                             residues_at=run.residues_at, bounded=bounded, **kw)


class _PrimeRuns:
    """What :func:`learn_modular` hands :func:`~exactlearn.pipeline.over_primes.learn_over_primes`:
    a prime's analysis (:meth:`run_prime`), a further prime's confirmation (:meth:`confirm`),
    v from its answers (:meth:`residues_at`) and the check that they determine v
    (:meth:`rank_check`), sharing the queries asked (recorded runs) and the heads found."""

    def __init__(self, oracle, rec, K, d, analyse_at, trace, plan, confirm_at, answers_at):
        self.oracle, self.over = oracle, getattr(oracle, "over", None)
        self.rec, self.K, self.d, self.analyse_at, self.trace = rec, K, d, analyse_at, trace
        self.plan, self.confirm_at, self.answers_at = plan, confirm_at, answers_at
        self.keep = plan is None
        self.asked: list = []
        self.found: list = []

    def at(self, Kr, box, tr):
        sub = self.rec.child(box, Kr, keep=self.keep)
        try:
            heads, n = self.analyse_at(sub, Kr, tr)
        except ExactLearnError as exc:
            exc.queries = sub.queries            # the per-prime report keeps them
            raise
        if self.keep and not self.asked:
            self.asked.extend(t for t, _ in sub.observations)
        return heads, n, sub.queries

    def run_prime(self, Kr):
        first = Kr.p == self.K.p
        if self.found and self.plan is not None:   # the last prime's exponents: its logs, looked up
            Kr.know_exponents(plan_exponents(self.plan, self.found[-1], Kr.D))
        got = self.at(Kr, self.oracle if first else self.over(Kr), self.trace if first else None)
        self.found.append(got[0])
        return got

    def confirm(self, heads, Kc):
        sub = self.rec.child(self.over(Kc), Kc, keep=self.keep)
        got = None
        try:
            if self.keep:
                for tokens in self.asked:
                    sub(tokens)
                got = sub.observations
                n = 0 if heads is None else certify(heads, self.d, got, Kc)
                return got, n, sub.queries
            if self.confirm_at is not None:
                return self._confirm_cluster(sub, heads, Kc)
            y_shared, values = ask_plan(self.plan, sub)
            got = ("plan", (y_shared, values))
            n = 0 if heads is None else certify_plan(heads, self.plan, y_shared, values, Kc)
            return got, n, sub.queries
        except ExactLearnError as exc:
            exc.queries, exc.field = sub.queries, Kc
            if self.confirm_at is not None and self.answers_at is not None:
                got = ("cluster", self.answers_at())
            exc.observations = got
            raise

    def _confirm_cluster(self, sub, heads, Kc):
        if heads is None:            # nothing to certify: v = 0 fails at once
            heads = tuple(Head(h.W, (mpq(0),) * self.d)
                          for h in (self.found[0] if self.found else ()))
            try:
                self.confirm_at(sub, heads, Kc)
            except CertificateError:
                pass
            return ("cluster", self.answers_at()), 0, sub.queries
        n = self.confirm_at(sub, heads, Kc)
        return ("cluster", self.answers_at), n, sub.queries

    def residues_at(self, W_set, observations, Kc):
        if self.keep:
            return solve_v_observations(W_set, self.d, observations, Kc)
        kind, got = observations
        if kind == "cluster":
            got = got() if callable(got) else got
            if got is None:
                raise PrimesDisagree("the answers of the group of x_1 did not come back from the cluster")
            y0, vals = got
            return solve_v_plan(W_set, self.plan, Kc(y0),
                                {n: [Kc(y) for y in ys] for n, ys in vals.items()},
                                Kc, certify_all=False)
        return solve_v_plan(W_set, self.plan, got[0], got[1], Kc)

    def rank_check(self, heads, observations, Kc):
        if self.keep:
            return check_design_rank(heads, observations, Kc)
        return check_design_rank_plan(heads, self.plan, Kc)


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
