"""``learn()``: validate, choose a strategy, retry, and report (docs: explanation/algorithm.md#how-it-works).

:func:`learn` recovers the canonical heads of any black box that is a
multi-head attention over the given field (arXiv:2608.03294, main theorem):
with H (or a bound H0) it asks exactly ``4 H d^2 - 2H + 1`` queries, the
longest of ``2H + 1`` tokens, and returns either *certified* heads -- they
reproduce every observed value exactly -- or an explicit failure with a
reason.  It never returns an uncertified answer as a result.

The work is done by a strategy (:mod:`exactlearn.strategies`): the paper's
plan or the efficient plan over an exact field, or the paper's plan over the
real field.  Over the modular field an exact strategy runs once per prime
(:func:`exactlearn.pipeline.multimodular.learn_modular`).  An example runs in
:func:`learn`'s docstring.
"""

from __future__ import annotations

import functools
import random
import time
import warnings
from dataclasses import dataclass, field as dc_field

from exactlearn.errors import (BadBlackBox, ClusterError, ExactLearnError, ExactnessError,
                               HeightExceeded, VerificationFailed)
from exactlearn.fields.base import Field
from exactlearn.limits import (MAX_RETRIES, MAX_VERIFY_QUERIES, count_problem, default_retries,
                               readable_int)
from exactlearn.oracle import Oracle, Recorder, TokenAdapter, resolve_field
from exactlearn.pipeline.multimodular import learn_modular
from exactlearn.pipeline.plan import head_bound, paper_count
from exactlearn.progress import Progress, current, using

#: Default half-width R of the random integer query entries, per field name.
#: Rational: bit sizes grow like |D e^T W x| (see docs: howto/field-and-range.md#choosing-the-range).
#: Symbolic: degrees in T grow the same way.  Real: the integers only seed exactly
#: orthogonal X and E (exactlearn.strategies.real.learn.orthogonal_plan).
DEFAULT_RANGES = {"rational": 30, "modular": 2 ** 32, "symbolic": 8, "real": 1000}

PLANS = ("paper", "efficient", "stable")


@dataclass
class LearnResult:
    """What [`learn`][exactlearn.api.learn] returns (docs: reference/json.md).

    Attributes
    ----------
    status : str
        ``"certified"`` or ``"failed"``.
    heads : tuple
        The canonical heads (equal W merged, their v summed, zero sums dropped), sorted;
        empty when the run failed.
    error : str or None
        The failure's reason (``"kind: message"``); None when certified.
    failure : ExactLearnError or None
        The failure as its typed exception (a
        [`DegenerateDraw`][exactlearn.errors.DegenerateDraw], a ``BadBlackBox``, ...), so
        that a caller can branch on its type; None when certified.  Not in the JSON
        (``error`` starts with its ``kind``).
    d : int
        Token dimension.
    heads_bound : int
        H, or the bound H0 the plan was drawn for.
    field : Field
        The field the run was certified over.
    queries : int
        Every query the black box answered: all attempts, all primes, the probe, the
        verification and ``noise="auto"``'s measuring queries.
    max_length : int
        The longest query, in tokens.
    plan : str
        ``"paper"``, ``"efficient"`` or ``"stable"``.
    plan_queries : int
        The plan's own count (the paper's ``4 H d^2 - 2H + 1``, or the efficient or stable
        plan's).
    attempts : int
        Draws used: 1 plus the redraws of ``retries``.
    query_range : int or None
        The query range R used.
    learner_seconds : float
        Wall time of the learner, the black box's excluded.
    oracle_seconds : float
        Wall time spent in the black box.
    certified_observations : int
        How many observed values the certificate checked.
    trace : list
        With ``trace=True``: the per-family steps of the final attempt.
    verify_queries : int
        With ``verify=N``: the fresh verification queries asked (part of ``queries``).
    verified : bool or None
        With ``verify=N``: whether they agreed; None without.
    snap : dict or None
        With ``snap=True``: the bounded-height rationals and their certificate.
    multimodular : dict or None
        Modular field: the primes asked with their queries, the reconstruction's bound, or
        for a box fixed to one prime the residues (docs: explanation/multimodular.md).
    detail : object
        The strategy's own detail (an ``EfficientDetail``, a ``RealDetail``, or None), read
        through the properties below.
    attempt_log : list
        One entry per attempt: its ``queries`` and its ``outcome`` (``"certified"``,
        ``"failed"``, or ``"refused"`` for a draw refused before any query as too large for
        the field); ``extra_queries`` and ``refused_draws`` are read from it.
    constant : rational
        With ``bias=True``: the additive constant c of the canonical form (0 when absent,
        and on a failure; over the real field a real number within ``error_bound``); each
        head then has its query-bias vector ``u`` (docs: explanation/biases.md).
    outputs : int or None
        With ``outputs=m``: m, each head's ``v`` an m x d matrix (a tuple of m rows) and
        ``constant`` a length-m tuple (docs: explanation/biases.md#vector-outputs); None for
        a scalar box (the JSON then has no ``outputs`` key).
    bias : bool
        Whether the run learned biases (``bias=True``); only then does the JSON carry
        ``heads[i].u`` and ``constant``.
    noise_queries : int
        With ``noise="auto"``: the queries asked to measure eta (part of ``queries``); 0
        without.
    noise_estimated : dict or None
        With ``noise="auto"``: the measured eta and how it was measured
        (``NoiseEstimate.to_json()``; docs: howto/float-black-box.md); None without.
    """

    status: str
    heads: tuple
    error: str | None
    d: int
    heads_bound: int
    field: Field
    queries: int
    max_length: int
    plan: str = "paper"
    plan_queries: int = 0
    attempts: int = 1
    query_range: int | None = None
    learner_seconds: float = 0.0
    oracle_seconds: float = 0.0
    certified_observations: int = 0
    trace: list = dc_field(default_factory=list)
    verify_queries: int = 0                # part of ``queries``: verify=N's fresh queries
    verified: bool | None = None
    attempt_log: list = dc_field(default_factory=list)   # per attempt: queries, outcome
    snap: dict | None = None               # snap=True: bounded-height rationals, certified
    multimodular: dict | None = None       # modular field: primes, exact_over_Q, bound
    noise_queries: int = 0                 # part of ``queries``: noise="auto"'s measuring
    noise_estimated: dict | None = None    # noise="auto": the measured eta and how
    detail: object = None                  # the strategy's own: EfficientDetail, RealDetail or None
    constant: object = 0                   # bias=True: the additive constant c
    bias: bool = False                     # bias=True: the plan for biases (u, c in the JSON)
    outputs: int | None = None             # outputs=m: vector outputs (v m x d, constant m)
    failure: ExactLearnError | None = None  # the failure as its typed exception; None when certified

    # -- the strategies' details, as attributes (stable names) -------------------------
    @property
    def plan_fallbacks(self) -> list:
        """Efficient plan: the fallbacks it took, with their queries."""
        return list(getattr(self.detail, "fallbacks", []))

    @property
    def plan_detail(self) -> dict | None:
        """Efficient plan: its counts (``plan.describe()``)."""
        return getattr(self.detail, "plan_detail", None)

    @property
    def probe_queries(self) -> int:
        """Real field: the scaling probe's queries (inside ``queries``), every attempt."""
        return getattr(self.detail, "probe_queries", 0)

    @property
    def error_bound(self):
        """Real field: the a-posteriori bound on the largest parameter error."""
        return getattr(self.detail, "error_bound", None)

    @property
    def real_detail(self) -> dict | None:
        """Real field: the query scale, the certificate's tolerance, ..."""
        return getattr(self.detail, "detail", None)

    @property
    def certified(self) -> bool:
        """True when ``status`` is ``"certified"``."""
        return self.status == "certified"

    @property
    def plan_runs(self) -> int:
        """How many times the final attempt asked its plan: once, or once per prime of the
        multi-modular method that was asked (analysis and confirmation primes; a prime
        skipped before any query does not count)."""
        if not self.multimodular:
            return 1
        return sum(1 for r in self.multimodular["primes"] if r.get("queries"))

    @property
    def extra_queries(self) -> int:
        """Learning queries spent beyond the final attempt's: those of the earlier attempts
        (redraws after a failure), never negative.  A draw refused before any query (too
        large for the field) spent none; the final attempt's probe, fallbacks and every
        prime it asked are the final attempt's own; ``verify_queries`` come after the
        attempts and are not extra."""
        return sum(a["queries"] for a in self.attempt_log[:-1])      # learn() logs every attempt

    @property
    def learning_queries(self) -> int:
        """The learning attempts' queries: ``queries`` less ``verify_queries`` and less
        ``noise_queries`` (equal to ``queries`` without ``verify=N`` and ``noise="auto"``)."""
        return self.queries - self.verify_queries - self.noise_queries

    @property
    def refused_draws(self) -> int:
        """Attempts whose draw was refused before any query: the plan's exponents exceed
        what the field realises (a range too large; not a degenerate draw)."""
        return sum(1 for a in self.attempt_log if a["outcome"] == "refused")

    def to_json(self) -> dict:
        K = self.field.param
        return {
            "status": self.status,
            "field": self.field.name,
            "exact": self.field.is_exact,
            "d": self.d,
            "heads_bound": self.heads_bound,
            "canonical_heads": len(self.heads),
            "queries": self.queries,
            "max_length": self.max_length,
            "heads": [h.to_json(K.format, bias=self.bias) for h in self.heads],
            "error": self.error,
            "learner_seconds": round(self.learner_seconds, 6),
            "oracle_seconds": round(self.oracle_seconds, 6),
            "plan": self.plan,
            "plan_queries": self.plan_queries,
            "attempts": self.attempts,
            "query_range": self.query_range,
            "extra_queries": self.extra_queries,
            "learning_queries": self.learning_queries,
            "refused_draws": self.refused_draws,
            "field_info": self.field.describe(),
            "verify_queries": self.verify_queries,
            "verified": self.verified,
            "plan_fallbacks": self.plan_fallbacks,
            "plan_detail": self.plan_detail,
            "probe_queries": self.probe_queries,
            "error_bound": None if self.error_bound is None else str(self.error_bound),
            "real_detail": self.real_detail,
            "snap": self.snap,
            "exact_over_Q": self.exact_over_Q,
            "multimodular": self.multimodular,
            "noise_queries": self.noise_queries,
            "noise_estimated": self.noise_estimated,
        } | ({"constant": _format_constant(K, self.constant, self.outputs)} if self.bias else {}) \
          | ({"outputs": self.outputs} if self.outputs is not None else {})

    @property
    def exact_over_Q(self) -> bool:  # noqa: N802 -- the JSON key's spelling
        """True when the heads are certified as exact rationals: the rational and symbolic
        fields, and the modular field through the multi-modular method; False for the real
        field and for a modular black box fixed to one prime (certified modulo p only).
        The JSON key ``exact_over_Q`` has the same spelling."""
        if not self.field.is_exact or not self.certified:
            return False
        return self.multimodular is None or self.multimodular["exact_over_Q"]

    @property
    def exact_over_q(self) -> bool:
        """Deprecated spelling of [`exact_over_Q`][exactlearn.api.LearnResult.exact_over_Q]
        (a ``DeprecationWarning``)."""
        warnings.warn("LearnResult.exact_over_q is deprecated: use exact_over_Q (the JSON "
                      "key's spelling)", DeprecationWarning, stacklevel=2)
        return self.exact_over_Q




@dataclass
class Options:
    """What a strategy's ``run`` may read besides the plan, and its state across attempts."""

    noise: object = None
    noise_rel: object = None
    plan: str = "paper"
    query_scale: object = None
    snap: bool = False
    heads_given: bool = False          # heads=H (an exact count), not a bound max_heads
    attempts: int = 1                  # retries + 1: a bound over one attempt's checks counts them all
    state: object = None
    bias: bool = False                 # bias=True over the real field (docs: explanation/biases.md)


def field_named(name: str) -> Field:
    """The field of a name, with its defaults (``learn(field="real")``)."""
    from exactlearn.fields import Modular, Rational, Real, Symbolic
    table = {"rational": Rational, "modular": Modular, "symbolic": Symbolic, "real": Real}
    if name not in table:
        raise ValueError(f"field must be a field object or one of {', '.join(table)}, got {name!r}")
    return table[name]()


def strategy_for(plan: str, K: Field):
    """The strategy module for a plan name and a field (the registry)."""
    if plan == "stable" and K.is_exact:
        raise ValueError("the stable plan is for finite-precision black boxes over the real "
                         "field; the exact fields use the paper plan (or plan='efficient')")
    if plan == "efficient":
        if not K.is_exact:
            raise ValueError("the efficient plan runs over the exact fields; over the real field "
                             "the learner uses the paper plan (exactlearn.strategies.real)")
        from exactlearn.strategies import efficient
        return efficient
    if K.is_exact:
        from exactlearn.strategies import paper
        return paper
    from exactlearn.strategies import real
    return real


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
          bias: bool = False, outputs: int | None = None, *, progress=None) -> LearnResult:
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
        With ``plan="efficient"`` only: a promise that every head has rank at most r.
    noise : optional
        Real field: the declared bound eta on the absolute error of every output (default
        ``oracle.noise``, else 0); with ``outputs=m`` one number for all outputs or a list of
        m, one per output.  An output noisier than declared fails the certificate.
        ``noise="auto"`` (stable plan, without ``noise_rel``) measures eta from the box
        first: the spread of its answers when the non-final tokens of the plan's query
        shapes are permuted, times a safety multiple
        ([`estimate_noise`][exactlearn.strategies.real.eta.estimate_noise]; docs:
        howto/float-black-box.md).  Those queries are answered by the box, so they are part
        of ``queries`` (``noise_queries``); ``noise_estimated`` says what was measured.
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
        each head gains ``u`` and the result ``constant``.  Not supported with the paper plan
        over the real field, nor with ``plan="efficient"``, ``executor=`` or ``max_height=``
        (ValueError).
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
        its own.  Not with ``noise="auto"``, ``snap``, ``executor``, ``max_height``, a box
        fixed to one prime, nor ``verify`` over the real field (ValueError).  A model's
        :class:`~exactlearn.oracle.Oracle` of m outputs needs ``outputs=m`` (ValueError).
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
    """
    t_start = time.perf_counter()
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be a callable taking a ProgressEvent, got {type(progress).__name__}")
    H = head_bound(d, heads, max_heads)
    if isinstance(field, str):
        field = field_named(field)
    if tokens != "exact":
        oracle = TokenAdapter(oracle, tokens)
    for name, n, low, high, limit in (
            ("retries", retries, 0, MAX_RETRIES, "MAX_RETRIES"),
            ("verify", verify, 0, MAX_VERIFY_QUERIES, "MAX_VERIFY_QUERIES"),
            ("query_range", query_range, 1, None, ""), ("e_range", e_range, 1, None, ""),
            ("rank", rank, 1, None, "")):
        problem = None if n is None and name != "verify" else \
            count_problem(name, n, low, high, limit)
        if problem is not None:           # before anything is drawn or asked
            raise ValueError(problem)
    if plan is not None and plan not in PLANS:
        raise ValueError(f"plan must be one of {', '.join(PLANS)}, got {plan!r}")
    if rank is not None and plan != "efficient":
        raise ValueError("rank= is a promise for the efficient plan (plan='efficient')")
    K, convert = resolve_field(oracle, field)
    if retries is None:                # the one default policy (docs: reference/api.md#retries)
        retries = default_retries(K.name)
    if plan is None:                   # a box that takes float tokens is a float box
        plan = "stable" if tokens != "exact" and not K.is_exact else "paper"
    if noise_rel is not None and K.is_exact:
        raise ValueError(f"noise_rel= applies to the real field, not the {K.name} field")
    if isinstance(noise, (list, tuple)) and outputs is not None:   # one eta per output
        if K.is_exact:
            raise ValueError("noise as a list (one eta per output) needs outputs=m over the real "
                             "field")
        auto = any([_check_noise(x, noise_rel, K, plan) for x in noise] + [False])
        if auto:
            raise ValueError("noise='auto' is one setting for the whole box, not one per output")
    else:
        auto = _check_noise(noise, noise_rel, K, plan)
    if max_primes is not None and (isinstance(max_primes, bool) or not isinstance(max_primes, int)
                                   or max_primes < 2):
        raise ValueError(f"max_primes must be an integer >= 2, got {max_primes!r}")
    if max_primes is not None and not K.multimodular:
        raise ValueError(f"max_primes applies to the modular field only, not the {K.name} field")
    if max_height is not None:
        if isinstance(max_height, bool) or not isinstance(max_height, int) or max_height < 1:
            raise ValueError(f"max_height must be an integer >= 1, got {max_height!r}")
        if not K.multimodular:
            raise ValueError(f"max_height applies to the modular field only, not the {K.name} field")
        if plan != "paper":
            raise ValueError("max_height applies to the paper plan (plan='paper')")
    if bias not in (True, False):
        raise ValueError(f"bias must be True or False, got {bias!r}")
    if outputs is not None:
        _check_outputs(outputs, K, oracle, noise, noise_rel, snap, executor, max_height, verify)
        _check_outputs_size(d, H, outputs)
    else:                                  # a model's Oracle of m outputs: before any query
        model_box = oracle.box if isinstance(oracle, TokenAdapter) else oracle
        m = model_box.outputs if isinstance(model_box, Oracle) else None
        if m is not None:
            raise ValueError(f"the black box is a model of {m} outputs (m values per query): "
                             f"pass outputs={m} (docs: explanation/biases.md#vector-outputs)")
    if bias:
        _check_bias_options(K, plan, executor)
        if max_height is not None:
            raise ValueError("max_height= does not apply to bias=True yet (the biased plan's "
                             "exponent check is not written for a height bound)")
        if K.is_exact:
            from exactlearn.strategies import bias as strategy
        else:                              # the stable plan for biases (real field)
            strategy = strategy_for(plan, K)
    else:
        strategy = strategy_for(plan, K)
    if executor is not None and not (K.multimodular and getattr(oracle, "over", None)
                                     and strategy.ASKS_PLAN and not trace):
        raise ValueError("executor= spreads the paper plan over the modular field with a black "
                         "box that can be asked modulo other primes (a model's Oracle), "
                         "without trace")
    R = query_range if query_range is not None else DEFAULT_RANGES.get(K.name, 20)
    rng = random.Random(seed)
    view = None
    if outputs is not None:                # the plan runs on r . y; the vectors are recorded
        from exactlearn.oracle import OutputsView
        box_noise = getattr(oracle, "noise", None)
        view = oracle = OutputsView(oracle, outputs, K, convert, [1] * outputs)
        convert = False
        if noise is None and box_noise is not None:
            noise = box_noise
    rec = Recorder(oracle, K, convert)
    current().bind(rec)                    # progress=: follows every query counted here
    options = Options(noise=getattr(oracle, "noise", None) if noise is None else noise,
                      noise_rel=noise_rel, plan=plan,
                      query_scale=query_scale, snap=snap, heads_given=heads is not None,
                      attempts=retries + 1,
                      state=strategy.new_state(), bias=bias)
    error, failure = None, None            # the reason, and the failure as its typed exception
    recovered: tuple = ()
    attempts = 0
    drawn = None
    tr: list = []
    n_cert = 0
    multimodular = None
    attempt_log: list = []                 # per attempt: its queries and outcome
    noise_box, noise_estimated = None, None
    if auto:                               # measured before any attempt, counted in queries
        noise_box = rec.child(oracle, K, convert, keep=False)
        try:
            from exactlearn.strategies.real.eta import FLOOR, STEPPED, measure_noise
            est = measure_noise(noise_box, d, H, seed=rng.getrandbits(64),
                                floor=FLOOR.get(tokens, 0.0), steps=tokens in STEPPED, view=view)
            options.noise, options.noise_rel = est.noise, est.noise_rel
            if view is not None:           # every output within est.noise + est.noise_rel |y_j|
                noise, noise_rel = est.noise, est.noise_rel
            noise_estimated = est.to_json()
        except ExactLearnError as exc:           # the box's answers: no attempt follows
            error, failure = f"{exc.kind}: measuring eta (noise='auto'): {exc}", _kept(exc)
            retries = -1
    while attempts <= retries:
        attempts += 1
        current().at(attempt=attempts)
        tr = []
        ask, outcome = None, "failed"
        try:
            try:
                drawn, R = _draw_checked_plan(oracle, strategy, d, H, rng, R, e_range, rank,
                                              adapt=query_range is None and e_range is None)
            except ExactnessError:
                outcome = "refused"            # before any query: too large, not degenerate
                raise
            if view is not None:               # a fresh combination r for every attempt
                options.noise = _draw_view(view, K, rng, noise, noise_rel)
            ask = rec.child(oracle, K, convert)           # this attempt's observations
            trace_to = tr if trace else None
            if K.multimodular and strategy.EXACT and executor is not None:
                from exactlearn.pipeline.distributed import ClusterPlan
                cluster = ClusterPlan(executor, drawn, oracle)
                recovered, n_cert, multimodular = learn_modular(
                    oracle, ask, K, d, rng, lambda sub, Kr, t: cluster.run_prime(sub, Kr),
                    max_primes, None, plan=drawn, confirm_at=cluster.confirm,
                    max_height=max_height, answers_at=lambda: getattr(cluster, "first_group", None))
            elif K.multimodular and strategy.EXACT:
                recovered, n_cert, multimodular = learn_modular(
                    oracle, ask, K, d, rng,
                    lambda sub, Kr, t: strategy.run(drawn, sub, Kr, t, options),
                    max_primes, trace_to, plan=drawn if strategy.ASKS_PLAN else None,
                    max_height=max_height)
            else:
                recovered, n_cert = strategy.run(drawn, ask, K, trace_to, options)
            if view is not None:               # every output's readout, certified
                recovered, n_cert = _outputs_step(recovered, view, K, d, bias, multimodular,
                                                  options, noise)
            error, failure, outcome = None, None, "certified"
            break
        except (BadBlackBox, ClusterError) as exc:    # the box broke its interface, or the
            # cluster failed: not the draw's fault, so no redraw
            error, failure = f"{exc.kind}: {exc}", _kept(exc)
            recovered = ()
            multimodular = getattr(exc, "report", None)
            break
        except ExactLearnError as exc:            # every failure says what it is
            error, failure = f"{exc.kind}: {exc}" + _bound_hint(exc, H), _kept(exc)
            recovered = ()
            multimodular = getattr(exc, "report", None)     # the primes asked, on failures too
        finally:
            attempt_log.append({"queries": 0 if ask is None else ask.queries, "outcome": outcome})
    refused = sum(1 for a in attempt_log if a["outcome"] == "refused")
    if error is not None and refused and attempts > 1:
        error += (f" [{refused} of the {attempts} draws were refused before any query as too "
                  f"large for the {K.name} field; the others were degenerate or failed]"
                  if refused < attempts else
                  f" [all {attempts} draws were refused before any query as too large for the "
                  f"{K.name} field: none was degenerate]")
    verified = None
    verify_box = rec.child(oracle, K, convert=False, keep=False)    # counted in queries too
    if error is None and verify:
        current().at(attempt=attempts)         # after the primes: no prime
        current().phase("verify", verify)
        if view is not None:
            verified, error = _verify_outputs(verify_box, view, recovered, d, H, K, rng, R, verify)
        else:
            verified, error = strategy.verify(verify_box, recovered, d, H, K, convert, rng, R,
                                              verify, options.state)
        if error is not None:
            recovered = ()
            failure = VerificationFailed(error)
    if error is None:
        current().finish()                 # the last phase ends at its total
    total = time.perf_counter() - t_start
    detail = strategy.detail(drawn, options.state, error is None) if drawn is not None else None
    return LearnResult(
        verify_queries=verify_box.queries, verified=verified,
        attempt_log=attempt_log,
        status="certified" if error is None else "failed",
        heads=recovered if error is None else (),
        error=error, failure=failure, d=d, heads_bound=H, field=K,
        queries=rec.queries, max_length=rec.max_length,
        plan="stable" if plan == "stable" else (drawn.name if drawn else "paper"),
        plan_queries=(drawn.count if plan == "efficient" and drawn else
                      strategy.plan_count(plan, d, H, bias=True) if bias and not K.is_exact else
                      getattr(strategy, "plan_count", lambda _n, dd, hh: paper_count(dd, hh))(plan, d, H)),
        attempts=attempts, query_range=R, learner_seconds=max(0.0, total - rec.seconds),
        oracle_seconds=rec.seconds, certified_observations=n_cert, trace=tr,
        snap=_snap(detail, recovered) if snap and error is None else None,
        multimodular=multimodular, detail=detail,
        constant=getattr(recovered, "constant", 0) if error is None and bias else 0, bias=bias,
        outputs=outputs,
        noise_queries=0 if noise_box is None else noise_box.queries,
        noise_estimated=noise_estimated)


def _format_constant(K, constant, outputs):
    """The JSON's ``constant``: one number, or with ``outputs`` a list of m (zeros on a failure)."""
    if outputs is None:
        return K.format(constant)
    if not isinstance(constant, (tuple, list)):
        constant = [constant] * outputs
    return [K.format(c) for c in constant]


def _check_outputs(outputs, K, oracle, noise, noise_rel, snap, executor, max_height, verify) -> None:
    """``outputs=m``: a positive int, and only where the vector step is written (one line)."""
    if isinstance(outputs, bool) or not isinstance(outputs, int) or outputs < 1:
        raise ValueError(f"outputs must be a positive integer, got {outputs!r}")
    from exactlearn.limits import MAX_OUTPUTS
    if outputs > MAX_OUTPUTS:
        raise ValueError(f"outputs = {readable_int(outputs)} is past MAX_OUTPUTS = "
                         f"{readable_int(MAX_OUTPUTS)}")
    for given, what in ((executor is not None, "executor="), (max_height is not None, "max_height="),
                        (snap, "snap=True"),
                        (verify and not K.is_exact, "verify= over the real field")):
        if given:
            raise ValueError(f"outputs= is not supported yet with {what} (docs: "
                             f"explanation/biases.md#vector-outputs)")
    if K.multimodular and getattr(oracle, "over", None) is None:
        raise ValueError("outputs= over the modular field needs a box that can be asked modulo "
                         "other primes (a model's Oracle); a box fixed to one prime is not "
                         "supported yet")
    if not K.is_exact and isinstance(noise, (list, tuple)) and len(noise) != outputs:
        raise ValueError(f"noise must be one number or a list of outputs={outputs} numbers, "
                         f"got {len(noise)}")


def _check_outputs_size(d, H, outputs) -> None:
    """The recorded answers of a vector box (m values each, at most twice the paper plan's
    count for the stable plan) within ``MAX_PLAN_BYTES`` at 64 bytes a value, before any
    query (docs: reference/cli.md#limits)."""
    from exactlearn.limits import MAX_PLAN_BYTES, PLAN_BYTES_PER_QUERY, plan_cost
    need = 2 * plan_cost(d, H).queries * outputs * PLAN_BYTES_PER_QUERY
    if need > MAX_PLAN_BYTES:
        raise ValueError(f"d = {d}, H = {H}, outputs = {outputs}: the recorded answers would take "
                         f"about {readable_int(need)} bytes, more than the limit "
                         f"{readable_int(MAX_PLAN_BYTES)} (MAX_PLAN_BYTES; docs/reference/cli.md, "
                         f"\"Limits\")")


def _draw_view(view, K, rng, noise, noise_rel=None):
    """Draw the combination r of an attempt (exact fields: nonzero integers; real field: a
    random unit vector, or with ``noise_rel`` one output drawn at random, so that the scalar
    view's error is that output's ``eta_k + noise_rel |y_k|``) and clear the records; returns
    the scalar view's noise ``sum_j |r_j| eta_j`` over the real field (``noise`` otherwise)."""
    from exactlearn.pipeline.outputs import draw_combination
    if K.is_exact:
        r = draw_combination(view.m, rng)
    elif noise_rel is not None:
        k = rng.randrange(view.m)
        r = [1 if j == k else 0 for j in range(view.m)]
    else:
        from exactlearn.strategies.real.outputs import draw_unit
        r = draw_unit(view.m, rng)
    view.redraw(r)
    if K.is_exact:
        return noise
    from exactlearn.strategies.real.outputs import combined_noise
    return combined_noise(K, r, noise, view.m)


def _outputs_step(recovered, view, K, d, bias, multimodular, options, noise) -> tuple:
    """Every output's readout from the answers recorded on the scalar view, certified."""
    if not K.is_exact:
        from exactlearn.strategies.real.outputs import learn_outputs_real
        return learn_outputs_real(recovered, d, view.records, K, view.m, noise,
                                  options.state.outcome, view.r, bias=bias,
                                  noise_rel=options.noise_rel)
    from exactlearn.pipeline.outputs import learn_outputs, learn_outputs_modular
    if multimodular is not None:
        return learn_outputs_modular(recovered, d, view, multimodular, view.m, bias)
    return learn_outputs(recovered, d, view.records, K, view.m, bias)


def _verify_outputs(verify_box, view, heads, d, H, K, rng, R, n) -> tuple:
    """``verify=N`` for vector outputs (exact fields): N fresh random queries, every output
    compared with ``==``."""
    from exactlearn.model import VectorEvaluator
    from exactlearn.errors import DegenerateDraw, FieldError
    m = view.m
    constant = getattr(heads, "constant", 0)
    if not isinstance(constant, tuple):
        constant = tuple(0 for _ in range(m))
    rows = VectorEvaluator(tuple(heads), d, K, constant).rows if heads else \
        [(lambda tokens, c=c: K(c)) for c in constant]
    for _ in range(n):
        length = rng.randint(1, 2 * H + 1)
        tokens = [tuple(rng.randint(-R, R) for _ in range(d)) for _ in range(length)]
        view.records.clear()
        try:
            verify_box(tokens)
            ys = view.records[-1][1]
            agrees = all(K.eq(ev(tokens), y) for ev, y in zip(rows, ys))
        except (FieldError, ValueError, TypeError, DegenerateDraw, BadBlackBox) as exc:
            # an answer not in the field, or not m values: a failure, as for a scalar box
            return False, f"verification failed: a fresh random query could not be compared ({exc})"
        if not agrees:
            return False, ("verification failed: a fresh random query disagrees with the certified "
                           "heads on some output")
    return True, None


def _kept(exc: ExactLearnError) -> ExactLearnError:
    """The failure as ``LearnResult.failure`` keeps it: without its traceback, whose frames
    would keep the failed attempt's data alive as long as the result."""
    return exc.with_traceback(None)


def _check_bias_options(K, plan, executor) -> None:
    """``bias=True`` runs the plan for biases over the exact fields and the stable plan for
    biases over the real field (docs: explanation/biases.md)."""
    if not K.is_exact:
        if plan != "stable":
            raise ValueError(f"bias=True over the {K.name} field needs plan='stable' (the default "
                             f"with float tokens), got plan={plan!r}")
        if executor is not None:
            raise ValueError("bias=True is not supported yet with executor=")
        return
    if plan not in ("paper", None):
        raise ValueError(f"bias=True is not supported yet with plan={plan!r} (the paper plan, "
                         f"extended, only)")
    if executor is not None:
        raise ValueError("bias=True is not supported yet with executor=")


def _check_noise(noise, noise_rel, K, plan) -> bool:
    """True for ``noise="auto"`` (checked: real field, stable plan, no ``noise_rel``); any
    other string must be a number (one-line ``ValueError`` before any query)."""
    if not isinstance(noise, str):
        return False
    if noise == "auto":
        if K.is_exact:
            raise ValueError(f"noise='auto' measures a float box over the real field, not the "
                             f"{K.name} field")
        if plan != "stable":
            raise ValueError("noise='auto' measures eta for the stable plan (plan='stable', the "
                             "default with float tokens)")
        if noise_rel is not None:
            raise ValueError("noise='auto' measures noise_rel too: give one or the other")
        return True
    from exactlearn.fields import Real
    from exactlearn.noise import noise_bound
    try:
        noise_bound(K if not K.is_exact else Real(dps=30), noise)
    except ValueError:
        raise ValueError(f"noise must be a number >= 0 or 'auto', got {noise!r}") from None
    return False


def _snap(detail, heads) -> dict:
    """snap=True: the real field's certified bounded-height rationals; over an exact field
    the heads already are exact rationals."""
    if detail is not None and getattr(detail, "snap", None) is not None:
        return detail.snap
    return {"status": "certified", "exact": True, "snapped": len(heads),
            "note": "exact field: the heads are exact rationals, certified by exact equality"}


def _draw_checked_plan(oracle, strategy, d, H, rng, R, e_range, rank, adapt) -> tuple:
    """Draw a plan and let the black box check it before any query (fail fast).

    With the default range (``adapt``), a plan whose exponents the oracle's
    field cannot realise (numbers past the rational field's size limit) is
    redrawn at half the range, down to R = 2; no query is spent on it.  A draw refused
    for good raises :class:`~exactlearn.errors.ExactnessError` naming the range and the
    field's limit (a refused draw, not a degenerate one).  Returns ``(plan, R)``."""
    check = getattr(oracle, "check_plan", None)
    while True:
        plan = strategy.draw_plan(d, H, rng, R, e_range, rank)
        if check is None:
            return plan, R
        try:
            check(plan)
            return plan, R
        except ExactnessError as exc:
            if not adapt or R <= 2:
                ranges = f"range R = {readable_int(R)}" + (
                    f", e-range {readable_int(e_range)}" if e_range is not None else "")
                raise ExactnessError(f"the draw at query {ranges} was refused before any query, "
                                     f"too large for the field (not a degenerate draw): {exc}") \
                    from None
            R //= 2


def _bound_hint(exc, H) -> str:
    """A black box with more canonical heads than the bound fails like a degenerate draw or
    a box outside the class: say so, since the bound is the user's to raise."""
    if (isinstance(exc, (ExactnessError, HeightExceeded, ClusterError))
            or not getattr(exc, "bound_hint", True)):
        return ""
    return (f" [note: a black box with more than {H} canonical head{'s' if H > 1 else ''} "
            f"(the bound) fails this way too: raise heads= / max_heads=]")
