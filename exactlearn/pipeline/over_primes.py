"""The multi-modular method's loop over primes (:mod:`~exactlearn.pipeline.multimodular`, steps
1--3; docs: explanation/multimodular.md): :func:`learn_over_primes` analyses modulo one prime,
reconstructs by CRT, confirms on a random further prime and, when refuted, joins that prime's
residues; with a declared height bound it joins primes until their product exceeds 2 B^2.
"""

from __future__ import annotations

import math

from exactlearn.errors import (CertificateError, ExactLearnError, ExactnessError, HeightExceeded,
                               PrimesDisagree, SingularMatrix)
from exactlearn.fields.modular import BadReduction, Modular, ResidueModular, reconstruction_bound
from exactlearn.model import canonicalize, constant_of
from exactlearn.pipeline.confirmation import check_design_rank
from exactlearn.pipeline.crt import (DEFAULT_MAX_PRIMES, MAX_LOG2_BOUNDED, analysis_primes,
                                     draw_confirmation_field, log2_wrong_bound,
                                     reconstruct_bounded, reconstruct_heads)
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
    rank_check = rank_check or check_design_rank
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
            candidate = reconstruct_heads(W_set, residues, moduli)
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
