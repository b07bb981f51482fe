"""The multi-modular method's loop over primes (:mod:`~exactlearn.pipeline.multimodular`, steps
1--3; docs: explanation/multimodular.md): :func:`learn_over_primes` analyses modulo one prime,
reconstructs by CRT, confirms on a random further prime and, when refuted, joins that prime's
residues; with a declared height bound it joins primes until their product exceeds 2 B^2.
"""

from __future__ import annotations

import math

from exactlearn.errors import (CertificateError, ExactLearnError, ExactnessError, HeightExceeded,
                               PrimesDisagree, SingularMatrix)
from exactlearn.fields.modular import BadReduction, Modular, ResidueModular
from exactlearn.model import canonicalize, constant_of
from exactlearn.pipeline.confirmation import check_design_rank
from exactlearn.pipeline.crt import (DEFAULT_MAX_PRIMES, MAX_LOG2_BOUNDED, analysis_primes,
                                     draw_confirmation_field, log2_wrong_bound,
                                     reconstruct_bounded, reconstruct_heads)
from exactlearn.limits import readable_int
from exactlearn.progress import current as progress_now


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
    determine v (default :func:`~exactlearn.pipeline.confirmation.check_design_rank`).
    """
    run = _Primes(K, max_primes, bounded)
    run.analyse(run_prime)
    while True:
        got = run.attempt(confirm, rng, rank_check or check_design_rank, residues_at)
        if got is not None:
            return got


class _Primes:
    """The state of :func:`learn_over_primes`: the per-prime report (``runs``), W exact, the
    residues of v and their moduli, the observations certified, the refuted confirmations."""

    def __init__(self, K, max_primes, bounded):
        self.K, self.max_primes, self.bounded = K, max_primes, bounded
        self.runs: list = []
        self.W_set = None
        self.residues, self.moduli = [], []
        self.n_cert = 0
        self.refuted = 0
        self.bias = False
        self.primes = analysis_primes(K.p)

    def report(self, exact):
        bounded = self.bounded
        out = {"exact_over_Q": exact, "primes": self.runs, "stable_after": len(self.moduli),
               "refuted_confirmations": self.refuted,
               "route": "height bound" if bounded else "confirmation"}
        if bounded:
            out["max_height"] = str(bounded["B"])
        return out

    def failing(self, exc):
        exc.report = self.report(False)
        return exc

    def too_tall(self, why=""):
        moduli = self.moduli
        bits = int(math.prod(moduli)).bit_length() // 2 - 17 if moduli else 0
        return self.failing(HeightExceeded(
            f"rational height exceeds what {len(moduli)} primes reconstruct (|num|, den up "
            f"to about 2^{bits}{why}); allow more primes (max_primes / --max-primes)"))

    def analyse(self, run_prime):
        """1. the analysis prime: discrete logs give W exactly, v comes back as residues."""
        K, bounded, runs = self.K, self.bounded, self.runs
        while self.W_set is None:
            if len(runs) >= self.max_primes:
                raise self.too_tall()
            p = next(self.primes)
            progress_now().at(prime=len(runs) + 1, detail="analysis")      # progress=
            if bounded and 3 * K.D * bounded["B"] * bounded["worst"] >= p - 1:
                raise self.failing(ExactnessError(
                    f"with the declared height bound B = {readable_int(bounded['B'])} the "
                    f"plan's exponents D e^T W x may reach "
                    f"{readable_int(K.D * bounded['B'] * bounded['worst'])}, which the analysis "
                    f"prime of {p.bit_length()} bits cannot keep apart (3 |D e^T W x| < p - 1 "
                    f"is needed); use a smaller height bound (--max-height) or range (--range "
                    f"/ --e-range)"))
            Kr = ResidueModular(p, K.omega if p == K.p else None, K.D)
            try:
                heads, n, asked = run_prime(Kr)
            except BadReduction as exc:
                runs.append({"p": str(p), "role": "skipped", "queries": getattr(exc, "queries", 0),
                             "reason": str(exc)})
                continue
            except ExactLearnError as exc:
                runs.append({"p": str(p), "role": "analysis",
                             "queries": getattr(exc, "queries", None), "failed": str(exc)})
                raise self.failing(exc)
            self.n_cert += n
            runs.append({"p": str(p), "role": "analysis", "queries": asked})
            self.bias = getattr(heads, "bias", False)     # biases: u exact, c a residue
            self.W_set = (tuple((h.W, h.u) for h in heads) if self.bias
                          else tuple(h.W for h in heads))
            self.residues.append([h.v for h in heads]
                                 + ([(constant_of(heads),)] if self.bias else []))
            self.moduli.append(p)

    def candidate(self):
        """``(answer or None, candidate heads or None)``: the bounded route's answer when the
        moduli exceed 2 B^2 and the plan's degeneracy bound is small, else the reconstruction
        to confirm (None: more primes first)."""
        bounded, moduli = self.bounded, self.moduli
        if bounded and math.prod(moduli) > 2 * bounded["B"] ** 2:
            try:
                heads = canonicalize(reconstruct_bounded(self.W_set, self.residues, moduli,
                                                         bounded["B"]))
            except HeightExceeded as exc:
                raise self.failing(exc)
            if bounded["log2_degeneracy"] <= MAX_LOG2_BOUNDED:
                out = self.report(True)
                out.update(log2_wrong_reconstruction_bound=bounded["log2_degeneracy"],
                           method=f"CRT over {len(moduli)} prime(s) whose product exceeds 2 "
                                  f"B^2, B = {bounded['B']} the declared height bound: the "
                                  f"rationals of height <= B are unique; no confirmation prime")
                return (heads, self.n_cert, out), None
            return None, heads
        if bounded:
            return None, None                # more primes until their product exceeds 2 B^2
        return None, reconstruct_heads(self.W_set, self.residues, moduli)

    def attempt(self, confirm, rng, rank_check, residues_at):
        """2. reconstruct, confirm on the next random prime; a refuted one joins the CRT.
        Returns the answer, or None for another round."""
        answer, candidate = self.candidate()
        if answer is not None:
            return answer
        if candidate is None and len(self.moduli) >= self.max_primes:
            raise self.too_tall()
        if len(self.runs) >= 2 * self.max_primes + 3:
            raise self.too_tall(f"; {self.refuted} reconstruction(s) refuted by the "
                                f"confirmation prime")
        heads = None if candidate is None else canonicalize(candidate)
        role = "analysis" if heads is None else "confirmation"
        observations = Kc = None
        progress_now().at(prime=len(self.runs) + 1, detail=role,              # progress=
                          asking="ask" if heads is None else "confirm")
        try:
            observations, n, Kc, asked = _confirm_once(heads, confirm, rng, self.K.D)
            self.runs.append({"p": str(Kc.p), "role": role, "omega": str(Kc.omega),
                              "queries": asked})
            if heads is None:
                raise _Unconfirmed
            rank_check(heads, observations, Kc)
        except (CertificateError, PrimesDisagree, _Unconfirmed) as exc:
            self._join(exc, heads, role, observations, Kc, residues_at)
            return None
        return self._confirmed(heads, n)

    def _confirmed(self, heads, n):
        self.n_cert += n
        bounded = self.bounded
        out = self.report(True)
        out.update(log2_wrong_reconstruction_bound=log2_wrong_bound(heads, self.refuted + 1),
                   method="CRT over the primes asked, rational reconstruction, confirmed modulo "
                          "an independent random prime (a refuted confirmation's residues join "
                          "the CRT)")
        if bounded:
            out["method"] = (f"CRT over {len(self.moduli)} prime(s) whose product exceeds 2 B^2 "
                             f"(B = {bounded['B']}), confirmed modulo an independent random "
                             f"prime: the plan's degeneracy bound 2^{bounded['log2_degeneracy']} "
                             f"is above 2^{MAX_LOG2_BOUNDED}")
        return heads, self.n_cert, out

    def _join(self, exc, heads, role, observations, Kc, residues_at):
        """A refuted confirmation, or a prime asked while nothing reconstructed: its residues
        join the CRT (or the run fails, saying why)."""
        runs, bounded = self.runs, self.bounded
        if Kc is None:                   # the further prime's own certificate failed
            Kc = getattr(exc, "field", None)
            observations = getattr(exc, "observations", None)
            runs.append({"p": None if Kc is None else str(Kc.p), "role": role,
                         "omega": None if Kc is None else str(Kc.omega),
                         "queries": getattr(exc, "queries", None)})
        if heads is not None:
            runs[-1]["refuted"] = str(exc)
            self.refuted += 1
            if bounded:                  # unique below B: the box breaks the bound
                raise self.failing(HeightExceeded(
                    f"the reconstruction within the declared height bound B = "
                    f"{bounded['B']} is refuted modulo a further prime ({exc}): the black "
                    f"box breaks the bound, or lies outside the model class"))
            if len(self.moduli) >= self.max_primes:
                raise self.too_tall(f"; {self.refuted} reconstruction(s) refuted by the "
                                    f"confirmation prime, as for a black box outside the model "
                                    f"class")
        if observations is None or Kc is None or residues_at is None:
            raise self.failing(PrimesDisagree("the answers modulo the further prime are not at "
                                              "hand"))
        try:
            vs, n_more = residues_at(self.W_set, observations, Kc)
        except (CertificateError, PrimesDisagree, SingularMatrix) as exc2:
            raise self.failing(PrimesDisagree(
                f"modulo the further prime {Kc.p} the answers are not those of the analysed W "
                f"with any v ({exc2}): a bad reduction of the analysis prime, or a black box "
                f"outside the model class"))
        runs[-1]["joined"] = True
        self.n_cert += n_more
        self.residues.append(vs)
        self.moduli.append(Kc.p)


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
