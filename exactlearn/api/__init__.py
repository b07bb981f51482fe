"""``learn()``: validate, choose a strategy, retry, and report (docs: explanation/algorithm.md#how-it-works).

:func:`learn` recovers the canonical heads of any black box that is a
multi-head attention over the given field (arXiv:2608.03294, main theorem):
with H (or a bound H0) it asks exactly ``4 H d^2 - 2H + 1`` queries, the
longest of ``2H + 1`` tokens, and returns either *certified* heads -- they
reproduce every observed value exactly -- or an explicit failure with a
reason.  It never returns an uncertified answer as a result.

The layers of this package: :mod:`~exactlearn.api.options` (the typed option objects),
:mod:`~exactlearn.api.arguments` (every check, the plan and the strategy chosen),
:mod:`~exactlearn.api.run` (the attempts, the verification, the result),
:mod:`~exactlearn.api.result` (``LearnResult`` and its JSON) and
:mod:`~exactlearn.api.vector` (vector outputs).  The work is done by a strategy
(:mod:`exactlearn.strategies`, the [`Strategy`][exactlearn.strategies.base.Strategy]
protocol): the paper's plan, the plan for biases or the efficient plan over an exact
field, the modular field's run of one of them over several primes (serially or on a Dask
cluster), or the real field's.  An example runs in :func:`learn`'s docstring.
"""

from __future__ import annotations

import functools
import time

from exactlearn.api.arguments import check_arguments, field_named, plain_int
from exactlearn.api.options import (EfficientOptions, ModularOptions, RealOptions,
                                    merge_options)
from exactlearn.api.result import LearnResult
from exactlearn.api.run import DEFAULT_RANGES, Run, RunContext
from exactlearn.fields.base import Field
from exactlearn.progress import Progress, using
from exactlearn.strategies import PLANS, choose

# Names that ``from exactlearn.api import ...`` reached before api became a package (the old
# module's imports); they stay importable from here, outside __all__.
from exactlearn.errors import (BadBlackBox, ClusterError, ExactLearnError,  # noqa: F401,E402
                               ExactnessError, HeightExceeded, VerificationFailed)
from exactlearn.limits import (MAX_RETRIES, MAX_VERIFY_QUERIES,  # noqa: F401,E402
                               count_problem, default_retries, readable_int)
from exactlearn.oracle import Oracle, Recorder, TokenAdapter, resolve_field  # noqa: F401,E402
from exactlearn.pipeline.multimodular import learn_modular  # noqa: F401,E402
from exactlearn.pipeline.plan import head_bound, paper_count  # noqa: F401,E402
from exactlearn.progress import current  # noqa: F401,E402

__all__ = ["learn", "LearnResult", "RealOptions", "ModularOptions", "EfficientOptions",
           "DEFAULT_RANGES", "PLANS", "field_named", "strategy_for", "Options"]

#: The run's context a strategy reads (its old name).
Options = RunContext


def strategy_for(plan: str, K: Field):
    """The strategy for a plan name and a field: [`choose`][exactlearn.strategies.choose]."""
    return choose(plan, K)


def _progress_scope(learn_fn):
    """Run ``learn`` with its ``progress=`` callback as the current tracker
    (:func:`exactlearn.progress.current`), and none inside otherwise."""
    @functools.wraps(learn_fn)
    def wrapper(*args, **kw):
        callback = kw.get("progress")
        with using(Progress(callback) if callable(callback) else None):
            return learn_fn(*args, **kw)
    return wrapper


@_progress_scope
def learn(oracle, d: int, heads: int | None = None, max_heads: int | None = None,
          field: Field | None = None, seed=None, query_range: int | None = None,
          retries: int | None = None, e_range: int | None = None, trace: bool = False,
          verify: int = 0, plan: str | None = None, rank: int | None = None,
          noise=None, query_scale=None, snap: bool = False,
          max_primes: int | None = None, noise_rel=None, tokens: str = "exact",
          executor=None, max_height: int | None = None,
          bias: bool = False, outputs: int | None = None, *, options=None,
          progress=None) -> LearnResult:
    """Learn the canonical heads of ``oracle`` (arXiv:2608.03294; docs: explanation/algorithm.md).

    Asks the black box a planned set of value queries and returns either *certified* heads
    (they reproduce every observed value: exactly over an exact field, within the declared
    tolerance over the real field) or an explicit failure with its reason, never an
    uncertified answer.  With the paper's plan the count is ``4 H d^2 - 2H + 1`` queries, the
    longest of ``2H + 1`` tokens (per prime over the modular field).

    Parameters
    ----------
    oracle : callable
        The black box: ``oracle(tokens) -> value``.  A model's
        [`Oracle`][exactlearn.oracle.Oracle] carries its field; any other callable needs
        ``field``.  A box with ``batch(queries)`` is asked a whole family at once.  Answers
        may be field elements or, over the real field, floats (Python, numpy, or anything
        with ``.item()``).
    d : int
        Token dimension (positive).
    heads : int, optional
        The number H of heads.  Give ``heads`` or ``max_heads``, not both.
    max_heads : int, optional
        A bound H0 on the number of heads; the plan is drawn for H0.
    field : Field or str, optional
        The field of the answers: a field object or a name (``"rational"``, ``"modular"``,
        ``"symbolic"``, ``"real"``); default: ``oracle.field``
        (docs: howto/field-and-range.md).
    seed : int, optional
        Seed of the random query draw; the same seed repeats the run.
    query_range : int, optional
        Half-width R of the random integer query entries, in ``[-R, R]``; default per field
        (``DEFAULT_RANGES``), halved when a plan is too tall for the rational field.
    retries : int, optional
        How many times a detected degenerate draw is redrawn before the run fails.  Default
        (None): the one policy of ``exactlearn.limits.DEFAULT_RETRIES``, the same as the
        command line's -- 3 over the symbolic field, 0 over the others
        (docs: reference/api.md#retries).  The
        earlier attempts' queries are counted in ``queries`` (``extra_queries``).  A draw
        whose exponents the field cannot realise is refused before any query: not a
        degenerate draw, the reason names the range and the field's limit, and
        ``refused_draws`` counts them.
    e_range : int, optional
        Half-width of the directions E, when it differs from ``query_range``.
    trace : bool, default False
        Keep the per-family steps in ``LearnResult.trace`` (``exactlearn demo`` prints them).
    verify : int, default 0
        After certification, compare the learned heads with the black box on N fresh
        random queries.  The box answers them, so they are part of ``queries``;
        ``verify_queries`` says how many of them were verification (fewer than N when a
        disagreement stops it), ``learning_queries`` is the rest (with ``verify=0``, the
        default, the two counts are equal) and ``verified`` says whether they agreed.  A
        disagreement turns the result into a failure.
    plan : str, optional
        ``"paper"`` (default), ``"efficient"`` (docs: explanation/efficient-plan.md) or
        ``"stable"``, the real field's plan for float boxes (ratio families at geometric
        ``t = k/m``, least squares), the default over the real field when ``tokens`` is a
        float kind (docs: explanation/real-field.md).
    rank : int, optional
        With ``plan="efficient"`` only: a promise that every head has rank at most r
        (1 <= r <= d).
    noise : optional
        Real field: the declared bound eta on the absolute error of every output (default
        ``oracle.noise``, else 0); with ``outputs=m`` one number for all outputs or a list of
        m, one per output.  An output noisier than declared fails the certificate.  The
        exact fields' answers are exact: there a nonzero ``noise`` is refused.
        ``noise="auto"`` (stable plan, without ``noise_rel``) measures eta from the box
        first: the spread of its answers when the non-final tokens of the plan's query
        shapes are permuted, times a safety multiple
        ([`estimate_noise`][exactlearn.strategies.real.eta.estimate_noise]; docs:
        howto/float-black-box.md), and once each attempt's scale is chosen again on the
        plan's own tokens at every scale it asks, each query's eta by its scale
        ([`measure_plan_noise`][exactlearn.strategies.real.eta.measure_plan_noise]).  Those
        queries are answered by the box, so they are part of ``queries``
        (``noise_queries``); ``noise_estimated`` says what was measured.
    query_scale : optional
        Real field, paper plan: the scale of the queries (default: found by a probe, whose
        queries are counted in ``queries`` and reported as ``probe_queries``).
    snap : bool, default False
        Real field: add bounded-height rationals certified against the observations
        (``LearnResult.snap``).
    max_primes : int, optional
        Modular field: at most this many primes (>= 2) for the multi-modular method
        (docs: explanation/multimodular.md).  Two passes of the plan suffice for ordinary heights: one
        analysis prime, then a confirmation prime that joins the CRT when it refutes.
    noise_rel : optional
        Real field: a relative output error on top of ``noise``; every output is trusted to
        ``noise + noise_rel * |y|`` (stable plan).
    tokens : str, default "exact"
        What the box is sent: ``"exact"`` (tuples of gmpy2 ``mpq``), ``"float"`` (lists of
        Python floats), ``"float64"`` or ``"float32"`` (a 2-D numpy array, a row per token).
    executor : distributed.Client, optional
        A Dask client: spreads the paper plan over the modular field on its cluster, group of
        configurations by group, and evaluates the model there when ``oracle`` is an
        [`Oracle`][exactlearn.oracle.Oracle]; the result and the counts are those of the
        serial run (docs: howto/dask-campaign.md).  A worker that dies costs recomputation,
        counted in ``queries``; a cluster that cannot go on fails the run (``status``
        failed, the reason "the Dask cluster failed: ...", no redraw) within the bounds of
        docs: explanation/performance.md#a-worker-that-dies.
    max_height : int, optional
        Modular field, paper plan: a declared bound B on the numerators and denominators of
        the canonical heads.  Primes are combined until their product exceeds ``2 B^2`` (one
        pass for B < 2^60); the rationals of height <= B are then the answer, with no
        confirmation prime when the plan's degeneracy bound allows (``multimodular.route``
        ``"height bound"``; docs: explanation/multimodular.md).  A black box past B fails
        explicitly when its residues have no preimage within B.
    bias : bool, default False
        Learn a layer with biases (docs: explanation/biases.md): scores
        ``x_i^T W_h x_n + u_h^T x_i`` and an additive constant c, exactly over the exact
        fields, with ``4 H d^2 + 4 H d - 2H + 1`` queries, the longest of ``2H + 1`` tokens;
        over the real field with ``plan="stable"`` (within tolerance, its count
        ``stable_count(d, H, bias=True)``; docs: explanation/biases.md#over-the-real-field);
        each head gains ``u`` and the result ``constant``.  Over the modular field v and c
        of any height (further primes join the CRT), also with ``executor=``.  Not supported
        with the paper plan over the real field, nor with ``plan="efficient"`` or
        ``max_height=`` (ValueError).
    outputs : int, optional
        A box of m outputs (docs: explanation/biases.md#vector-outputs): it answers m
        numbers per query (a sequence or 1-d array; ``batch`` one such row per query).  Each
        head's ``v`` is then an m x d matrix (row j: output j's readout) and, with ``bias``,
        ``constant`` a length-m vector.  The same plan and count as a scalar box: the plan
        runs on a random combination ``r . y`` and every output's readout is solved from the
        answers recorded on the way; each output of each answer is certified (exactly over the
        exact fields, within its tolerance over the real field).  A box that does not answer
        m values is bad input (``BadBlackBox``, naming the box).  With ``noise_rel`` the plan
        runs on one output drawn at random (r a unit vector e_k), whose error bound then is
        its own; ``noise="auto"`` measures one envelope for all outputs, and ``verify``
        compares every output of each fresh query (within its tolerance over the real
        field).  Not with ``snap``, ``executor``, ``max_height`` or a box fixed to one
        prime (ValueError).  A model's
        :class:`~exactlearn.oracle.Oracle` of m outputs needs ``outputs=m`` (ValueError).
    options : RealOptions, ModularOptions, EfficientOptions or a tuple of them, optional
        The field- and plan-specific options grouped in typed objects
        ([`RealOptions`][exactlearn.api.options.RealOptions]: ``noise``, ``noise_rel``,
        ``query_scale``, ``snap``; [`ModularOptions`][exactlearn.api.options.ModularOptions]:
        ``max_primes``, ``max_height``, ``executor``;
        [`EfficientOptions`][exactlearn.api.options.EfficientOptions]: ``rank``;
        docs: reference/api.md#options).  They mean the same as the flat keywords of the same
        names, which keep working; an option given both ways, two objects of one type, or an
        object for another field is a one-line ``ValueError``.
    progress : callable, optional
        Called with a :class:`~exactlearn.progress.ProgressEvent` as the run goes: the
        phase, the prime or attempt, and how much of the phase is done out of its total;
        throttled, and it never changes a result or a count (docs: howto/progress.md).
        :func:`exactlearn.progress.bar_callback` adapts a tqdm bar.

    Returns
    -------
    LearnResult
        ``status`` ``"certified"`` with the canonical heads, or ``"failed"`` with the reason
        in ``error``; every query the black box answered is counted in ``queries``: every
        attempt, probe, fallback and prime, and the verification.  A ``batch`` that does not
        answer one value per query is bad input: the run fails at once, naming the box
        (``BadBlackBox``).

    Raises
    ------
    ValueError
        Bad arguments (sizes, a head count and a bound together, an unknown plan, an option
        of another field or plan), before any query is asked.  A d or a head bound whose plan
        would exceed ``exactlearn.limits`` (its queries, tokens or memory;
        docs: reference/cli.md#limits) raises a one-line ``ValueError`` before anything is
        drawn, and so do ``verify`` or ``retries`` past ``MAX_VERIFY_QUERIES`` or
        ``MAX_RETRIES`` and a count that is not an integer in range (``verify``, ``retries``
        >= 0; ``query_range``, ``e_range``, ``rank`` >= 1).

    Examples
    --------
    >>> from exactlearn import MultiHeadAttention, Oracle, learn
    >>> from exactlearn.fields import Rational
    >>> model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
    >>> res = learn(Oracle(model, Rational()), d=2, heads=2, seed=1)
    >>> res.status, res.heads == model.canonical_heads(), res.queries, res.max_length
    ('certified', True, 29, 5)
    >>> from exactlearn.api.options import ModularOptions
    >>> from exactlearn.fields import Modular
    >>> res = learn(Oracle(model, Modular()), d=2, heads=2, seed=1,
    ...             options=ModularOptions(max_height=10))
    >>> res.heads == model.canonical_heads(), res.exact_over_Q, res.detail.route
    (True, True, 'height bound')
    """
    t_start = time.perf_counter()
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be a callable taking a ProgressEvent, got {type(progress).__name__}")
    a = merge_options(options, {
        "query_range": query_range, "retries": retries, "e_range": e_range, "trace": trace,
        "verify": verify, "plan": plan, "rank": rank, "noise": noise,
        "query_scale": query_scale, "snap": snap, "max_primes": max_primes,
        "noise_rel": noise_rel, "tokens": tokens, "executor": executor,
        "max_height": max_height, "bias": bias, "outputs": outputs})
    d, heads, max_heads, seed = (plain_int(x) for x in (d, heads, max_heads, seed))  # numpy ints
    if seed is not None and not isinstance(seed, (int, float, str, bytes, bytearray)):
        raise ValueError(f"seed must be an integer (or a float, str or bytes, as random.Random "
                         f"takes), got a {type(seed).__name__}")
    for key in ("rank", "retries", "verify", "max_primes", "outputs"):
        a[key] = plain_int(a[key])
    checked = check_arguments(oracle, d, heads, max_heads, field, a, options)
    return Run(checked, a, d, heads is not None, seed, t_start).result()
