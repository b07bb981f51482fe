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


class TooLarge(ExactLearnError):
    """A run that would pass a memory limit of :mod:`exactlearn.limits` while it runs (the
    answers a vector box's run records, ``learn(outputs=m)``), or that ran out of memory:
    stopped before the next query, every query asked so far counted.  Not a degenerate
    draw: a learner does not redraw on it."""

    kind = "too large"
    bound_hint = False


def mark_box_failure(exc: BaseException, box: str) -> None:
    """Mark ``exc`` as raised by the user's black box ``box`` (not by exactlearn): ``learn()``
    lets it propagate unchanged, with a note counting the queries answered before it, and
    the command line reports it in one line (:func:`box_failure`)."""
    if isinstance(exc, Exception) and not isinstance(exc, ExactLearnError) \
            and getattr(exc, "exactlearn_box", None) is None:
        try:
            exc.exactlearn_box = box
        except AttributeError:          # an exception type without a __dict__
            pass


def clip(text, width: int) -> str:
    """``text`` on one line, at most ``width`` characters: cut at a word boundary with an
    ellipsis (:func:`textwrap.shorten`), mid-word only when its first word alone is longer.

    >>> clip("the probe failed at every scale", 20)
    'the probe failed …'
    >>> clip("x" * 30, 10), clip("short", 10)
    ('xxxxxxxxx…', 'short')
    """
    import textwrap
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    cut = textwrap.shorten(text, width, placeholder=" …")
    return cut if cut != "…" else text[:width - 1] + "…"


def box_failure(exc: BaseException) -> str | None:
    """The one-line reason of an exception the black box raised (:func:`mark_box_failure`),
    else None.

    >>> exc = RuntimeError("GPU fell over")
    >>> mark_box_failure(exc, "layer")
    >>> exc.exactlearn_queries = 9
    >>> box_failure(exc)
    'the black box layer raised RuntimeError at query 10 (9 queries answered before it, counted): GPU fell over'
    >>> exc.exactlearn_batch = 64
    >>> box_failure(exc)
    'the black box layer raised RuntimeError at its batch() of 64 queries from query 10 (none returned) (9 queries answered before it, counted): GPU fell over'
    >>> box_failure(ValueError("x")) is None
    True
    """
    box = getattr(exc, "exactlearn_box", None)
    if box is None:
        return None
    n = getattr(exc, "exactlearn_queries", None)
    b = getattr(exc, "exactlearn_batch", None)
    at = ""
    if n is not None:
        where = f"query {n + 1}" if b is None else \
            f"its batch() of {b} quer{'y' if b == 1 else 'ies'} from query {n + 1} (none returned)"
        at = f" at {where} ({n} quer{'y' if n == 1 else 'ies'} answered before it, counted)"
    text = clip(exc, 300)
    return f"the black box {box} raised {type(exc).__name__}{at}" + (f": {text}" if text else "")


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


class NonFiniteAnswer(DegenerateDraw):
    """The black box answered nan or an infinity (a float box that overflowed): not in the
    real field.  A draw at another scale may avoid it (a probe tries smaller ones), so it
    is a failure of the draw; its reason is one line naming the value, the query's number in
    the run (``at``, filled in by the Recorder that counted it) and, for a box of m outputs,
    which output.

    >>> exc = NonFiniteAnswer("box", "nan", output=2, m=3)
    >>> exc.at = 5
    >>> f"{exc.kind}: {exc}"
    'bad answer: the black box box answered nan at query 5 (output 2 of 3): not a finite real number, so not in the real field'
    """

    kind = "bad answer"
    bound_hint = False

    def __init__(self, box: str, value: str | None = None, output: int | None = None,
                 m: int | None = None, answered: int = 1, longest: int = 0, index: int = 0):
        super().__init__(*((box,) if value is None else (box, value, output, m)))
        self.box, self.value, self.output, self.m = box, value, output, m
        self.answered, self.longest, self.index = answered, longest, index
        self.at = None                  # the query's number in the run, once counted

    def __str__(self) -> str:
        if self.value is None:          # one message (``type(exc)(message)``)
            return str(self.box)
        at = "" if self.at is None else f" at query {self.at}"
        out = "" if self.output is None else f" (output {self.output} of {self.m})"
        return (f"the black box {self.box} answered {self.value}{at}{out}: not a finite real "
                f"number, so not in the real field")


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
    observations resolve more heads than it has (the stable plan's resolution test).
    ``draw``: a head bound's escalation whose tries failed for reasons of the draw too (a
    resolution, a crowded or degenerate refit), so another draw may certify (docs:
    reference/api.md#retries)."""

    def __init__(self, message, heads=None, resolved=False, draw=False):
        super().__init__(message)
        self.heads = heads
        self.resolved = resolved
        self.draw = draw


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
           "PrimesDisagree", "TransformerFailure", "ClusterError", "VerificationFailed", "DEGENERATE",
           "TooLarge", "NonFiniteAnswer", "mark_box_failure", "box_failure"]
