"""One exception tree for exactlearn (docs: explanation/algorithm.md#what-a-failure-means).

Every exception the package raises on purpose derives from
:class:`ExactLearnError`.  Three families sit under it:

* :class:`ModelError` -- bad input: a malformed model, file or option.  The
  command line reports it in one line with exit status 2.  Its sibling
  :class:`BadBlackBox` is a black box that broke its interface (a ``batch`` of
  the wrong length): the run stops, failed, naming the box.
* :class:`FieldError` -- the number system cannot do what was asked: an
  exponential it cannot realise exactly (:class:`ExactnessError`), a logarithm of
  a non-exponential (:class:`NotExponential`), a polynomial that does not split
  (:class:`NotSplit`), a reduction modulo p that loses information
  (:class:`BadReduction`), a residue without a small rational preimage
  (:class:`ReconstructionError`), or a real-field decision within tolerance
  (:class:`Undecided`).
* :class:`LearningFailure` -- a run that detected a degenerate draw or a black
  box outside the model class: differing pole counts
  (:class:`PoleCountMismatch`), samples that are not a rational function of the
  expected type (:class:`InterpolationError`), a missing or ambiguous pairing
  (:class:`MatchError`), a singular system (:class:`SingularMatrix`), a
  certificate that fails (:class:`CertificateError`), or primes that disagree
  (:class:`PrimesDisagree`).

A fourth, :class:`ClusterError`, is a Dask cluster that failed a spread run.

A learner turns any of them into ``status: failed`` with the reason
``f"{exc.kind}: {exc}"``: the *kind* is a class attribute, so the reason comes
from the exception itself and never from a type switch.

>>> e = MatchError("head 1: no consistent partner")
>>> f"{e.kind}: {e}", isinstance(e, LearningFailure), isinstance(e, ExactLearnError)
('matching failed: head 1: no consistent partner', True, True)
>>> PoleCountMismatch("1 vs 2").kind
'degenerate draw or black box outside the model class'
"""

from __future__ import annotations

#: The reason prefix of a detected degenerate draw or out-of-class black box.
DEGENERATE = "degenerate draw or black box outside the model class"


class ExactLearnError(Exception):
    """Root of every exception exactlearn raises on purpose."""

    kind = "error"


class ModelError(ExactLearnError, ValueError):
    """A malformed model (wrong shapes, non-numbers, bad file)."""

    kind = "bad input"


class BadBlackBox(ExactLearnError):
    """The black box broke its interface: a ``batch(queries)`` that does not answer one value
    per query.  Bad input, not a degenerate draw: a learner stops at once (no redraw) and
    fails naming the box.  ``answered`` is how many values it returned (counted as answered
    queries), ``longest`` the longest query of the batch."""

    kind = "bad input"

    def __init__(self, message, answered: int = 0, longest: int = 0):
        super().__init__(message)
        self.answered = answered
        self.longest = longest


# -- the fields ---------------------------------------------------------------------------
class FieldError(ExactLearnError, ArithmeticError):
    """The field cannot do what was asked (base of the field-level errors)."""

    kind = DEGENERATE


class ExactnessError(FieldError):
    """exp(s) cannot be realised exactly in this field (e.g. D*s not an integer)."""

    kind = "the field cannot realise this run"


class NotExponential(FieldError):
    """log(a) was asked of an element that is not an exact exponential."""


class NotSplit(FieldError):
    """A polynomial does not split into distinct linear factors over the field."""


class NotOrdered(FieldError):
    """The operation needs an ordered field (ReLU signs), e.g. not F_p."""


class BadReduction(FieldError):
    """A rational has no image in F_p because p divides its denominator."""


class ReconstructionError(FieldError):
    """No rational of small enough height is congruent to the residue."""


class HeightExceeded(ReconstructionError):
    """The reconstructed values are not yet stable after the allowed number of primes."""

    kind = "reconstruction failed"


class Undecided(FieldError):
    """A real-field comparison falls between 'equal' and 'different' (within tolerance)."""


# -- learning failures --------------------------------------------------------------------
class LearningFailure(ExactLearnError, ArithmeticError):
    """A learning run detected a degenerate draw or a black box outside the model class."""

    kind = DEGENERATE


class DegenerateDraw(LearningFailure):
    """A detected degenerate draw (or a black box outside the model class)."""


class InterpolationError(LearningFailure):
    """The samples are not those of a rational function of the expected type."""


class MatchError(LearningFailure):
    """The pairing of heads across configurations is missing or not unique."""

    kind = "matching failed"


class PoleCountMismatch(MatchError):
    """Configurations show different numbers of poles: a vanishing c_h = -v_h.e or two
    coinciding rho hide a pole (a degenerate draw), or the black box is not attention
    with the given head bound."""

    kind = DEGENERATE


class SingularMatrix(LearningFailure):
    """A matrix that must be invertible is singular."""


class CertificateError(LearningFailure):
    """The recovered heads do not reproduce an observed oracle value."""

    kind = "certificate failed"


class NoisierThanDeclared(CertificateError):
    """Residuals far beyond the declared eta: the box is noisier than declared (real field)."""


class ResidualsBeyondNoise(NoisierThanDeclared):
    """Real field: the certified model, ``heads`` canonical heads, misses an observation by more
    than the declared eta allows -- a box noisier than declared, or more heads than were
    fitted (two heads merged).  ``resolved``: the model is within the declared eta, but the
    observations resolve more heads than it has (the stable plan's resolution test)."""

    def __init__(self, message, heads=None, resolved=False):
        super().__init__(message)
        self.heads = heads
        self.resolved = resolved


class PrimesDisagree(LearningFailure):
    """Two primes gave different canonical W (a bad reduction, or a box outside the class)."""

    kind = "the primes disagree"


class TransformerFailure(LearningFailure):
    """A detected violation of the one-layer Transformer learner's conditions (docs: howto/transformer.md#what-is-recovered-and-how)."""


# -- the executor -------------------------------------------------------------------------
class VerificationFailed(ExactLearnError):
    """``verify=N``: a fresh random query disagrees with the certified heads, or could not be
    compared (``LearnResult.failure``; its message is the result's ``error``)."""

    kind = "verification failed"


class ClusterError(ExactLearnError):
    """The Dask cluster of a spread run failed: no live worker for too long, a task that
    dying workers took down too often, the scheduler gone (docs: explanation/performance.md#a-worker-that-dies).
    Not a degenerate draw: the learner does not redraw on it."""

    kind = "the Dask cluster failed"


__all__ = ["ExactLearnError", "ModelError", "BadBlackBox", "FieldError", "ExactnessError", "NotExponential",
           "NotSplit", "NotOrdered", "BadReduction", "ReconstructionError", "HeightExceeded",
           "Undecided", "LearningFailure", "DegenerateDraw", "InterpolationError", "MatchError",
           "PoleCountMismatch", "SingularMatrix", "CertificateError", "NoisierThanDeclared",
           "ResidualsBeyondNoise",
           "PrimesDisagree", "TransformerFailure", "ClusterError", "VerificationFailed", "DEGENERATE"]
