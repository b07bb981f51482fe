"""``learn()``: validate, choose a strategy, retry, and report (README, "How it works").

:func:`learn` recovers the canonical heads of any black box that is a
multi-head attention over the given field (arXiv:2608.03294, main theorem):
with H (or a bound H0) it asks exactly ``4 H d^2 - 2H + 1`` queries, the
longest of ``2H + 1`` tokens, and returns either *certified* heads -- they
reproduce every observed value exactly -- or an explicit failure with a
reason.  It never returns an uncertified answer as a result.

The work is done by a strategy (:mod:`exactlearn.strategies`): the paper's
plan or the efficient plan over an exact field, or the paper's plan over the
real field.  Over the modular field an exact strategy runs once per prime
(:func:`exactlearn.pipeline.multimodular.learn_modular`).

>>> from exactlearn import MultiHeadAttention, Oracle, learn
>>> from exactlearn.fields import Rational
>>> model = MultiHeadAttention([([[1, 0], [0, -1]], [1, 2]), ([[0, 1], [1, 0]], [-1, 1])])
>>> res = learn(Oracle(model, Rational()), d=2, heads=2, seed=1)
>>> res.status, res.heads == model.canonical_heads(), res.queries, res.max_length
('certified', True, 29, 5)
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field as dc_field

from exactlearn.errors import ClusterError, ExactLearnError, ExactnessError, HeightExceeded
from exactlearn.fields.base import Field
from exactlearn.oracle import Recorder, TokenAdapter, resolve_field
from exactlearn.pipeline.multimodular import learn_modular
from exactlearn.pipeline.plan import head_bound, paper_count

#: Default half-width R of the random integer query entries, per field name.
#: Rational: bit sizes grow like |D e^T W x| (see README, "Choosing the range").
#: Symbolic: degrees in T grow the same way.  Real: the integers only seed exactly
#: orthogonal X and E (exactlearn.strategies.real.learn.orthogonal_plan).
DEFAULT_RANGES = {"rational": 30, "modular": 2 ** 32, "symbolic": 8, "real": 1000}

PLANS = ("paper", "efficient", "stable")


@dataclass
class LearnResult:
    """What :func:`learn` returns; ``status`` is ``"certified"`` or ``"failed"``."""

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
    verify_queries: int = 0
    verified: bool | None = None
    snap: dict | None = None               # snap=True: bounded-height rationals, certified
    multimodular: dict | None = None       # modular field: primes, exact_over_Q, bound
    detail: object = None                  # the strategy's own: EfficientDetail, RealDetail or None

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
        """Queries beyond the final attempt's (``plan_runs`` times the plan's count, plus
        fallbacks): those spent on retries."""
        if self.attempts == 1:
            return 0
        fallbacks = sum(f.get("queries", 0) for f in self.plan_fallbacks)
        return self.queries - self.plan_runs * (self.plan_queries + fallbacks)

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
            "heads": [h.to_json(K.format) for h in self.heads],
            "error": self.error,
            "learner_seconds": round(self.learner_seconds, 6),
            "oracle_seconds": round(self.oracle_seconds, 6),
            "plan": self.plan,
            "plan_queries": self.plan_queries,
            "attempts": self.attempts,
            "query_range": self.query_range,
            "extra_queries": self.extra_queries,
            "field_info": self.field.describe(),
            "verify_queries": self.verify_queries,
            "verified": self.verified,
            "plan_fallbacks": self.plan_fallbacks,
            "plan_detail": self.plan_detail,
            "probe_queries": self.probe_queries,
            "error_bound": None if self.error_bound is None else str(self.error_bound),
            "real_detail": self.real_detail,
            "snap": self.snap,
            "exact_over_Q": self.exact_over_q,
            "multimodular": self.multimodular,
        }

    @property
    def exact_over_q(self) -> bool:
        """True when the heads are certified as exact rationals: the rational and symbolic
        fields, and the modular field through the multi-modular method; False for the real
        field and for a modular black box fixed to one prime (certified modulo p only)."""
        if not self.field.is_exact or not self.certified:
            return False
        return self.multimodular is None or self.multimodular["exact_over_Q"]




@dataclass
class Options:
    """What a strategy's ``run`` may read besides the plan, and its state across attempts."""

    noise: object = None
    noise_rel: object = None
    plan: str = "paper"
    query_scale: object = None
    snap: bool = False
    heads_given: bool = False          # heads=H (an exact count), not a bound max_heads
    state: object = None


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


def learn(oracle, d: int, heads: int | None = None, max_heads: int | None = None,
          field: Field | None = None, seed=None, query_range: int | None = None,
          retries: int = 0, e_range: int | None = None, trace: bool = False,
          verify: int = 0, plan: str | None = None, rank: int | None = None,
          noise=None, query_scale=None, snap: bool = False,
          max_primes: int | None = None, noise_rel=None, tokens: str = "exact",
          executor=None) -> LearnResult:
    """Learn the canonical heads of ``oracle`` (arXiv:2608.03294; README, "How it works", "What a failure means").

    ``heads`` (H) or ``max_heads`` (a bound H0) sets the plan.  Query entries
    are random integers in ``[-query_range, query_range]`` (the directions E
    in ``[-e_range, e_range]`` when given).  A detected degenerate draw fails
    with a reason, or with ``retries=N`` is redrawn up to N times (the extra
    queries are counted in ``queries`` and reported as ``extra_queries``).
    ``verify=N`` spends N fresh random queries after certification comparing
    the learned heads with the black box; they are reported separately
    (``verify_queries``) and never counted in ``queries``.
    ``plan="efficient"`` (optionally with ``rank=r``, a promise that every head
    has rank <= r) uses the efficient plan of :mod:`exactlearn.strategies.efficient.plan`
    (analysed by :mod:`exactlearn.strategies.efficient.learn`); ``plan_queries`` is then
    that plan's count, and ``plan_fallbacks`` lists any fallback with its queries.
    Over the real field (paper plan) :mod:`exactlearn.strategies.real.learn` runs it: queries
    scaled by a probe (``probe_queries``) or by ``query_scale``, ``noise`` the bound
    eta on the black box's output error (default: ``oracle.noise``, else 0), and
    ``error_bound`` the a-posteriori bound on the largest parameter error.
    ``snap=True`` adds bounded-height rationals certified against the observations.
    Over the modular field a model-backed black box (one with ``.over(field)``) is
    asked modulo as many primes as the heights need, up to ``max_primes``
    (:mod:`exactlearn.pipeline.multimodular`): the heads are exact over Q, and
    ``multimodular`` lists the primes with their queries (the paper's count holds
    per prime; ``queries`` is the total).  A black box fixed to one prime gets v
    certified modulo p only (``exact_over_Q`` False, v as residues).

    ``field`` may be a field object or a name (``"rational"``, ``"modular"``,
    ``"symbolic"``, ``"real"``).  ``plan`` defaults to ``"paper"``, and over the real field to
    ``"stable"`` when ``tokens`` is a float kind (a float box:
    :mod:`exactlearn.strategies.real.stable`, ratio families at geometric t = k/m, least
    squares; the paper plan's tokens are not floats).  ``noise_rel`` adds a relative
    output error: every output is trusted to ``noise + noise_rel * |y|`` (stable plan).
    ``tokens`` says what the box is sent: ``"exact"`` (tuples of gmpy2 ``mpq``, the
    default), ``"float"`` (lists of Python floats), ``"float64"`` or ``"float32"`` (a 2-D
    numpy array, a row per token); a box with ``batch(queries)`` is asked a whole family
    at once.  Answers may be field elements or, over the real field, floats (Python,
    numpy, or anything with ``.item()``).
    ``executor``, a Dask ``distributed.Client``, spreads the paper plan over the modular
    field on its cluster, group of configurations by group, and evaluates the model there
    when ``oracle`` is an :class:`~exactlearn.oracle.Oracle`
    (:mod:`exactlearn.pipeline.distributed`): the result and the counts are those of the
    serial run.  A worker that dies costs recomputation, counted in ``queries``; a cluster
    that cannot go on fails the run (``status`` failed, the reason "the Dask cluster
    failed: ...", no redraw) within the bounds of docs/explanation/performance.md
    ("A worker that dies").
    """
    t_start = time.perf_counter()
    H = head_bound(d, heads, max_heads)
    if isinstance(field, str):
        field = field_named(field)
    if tokens != "exact":
        oracle = TokenAdapter(oracle, tokens)
    if retries < 0:
        raise ValueError("retries must be >= 0")
    if plan is not None and plan not in PLANS:
        raise ValueError(f"plan must be one of {', '.join(PLANS)}, got {plan!r}")
    if rank is not None and plan != "efficient":
        raise ValueError("rank= is a promise for the efficient plan (plan='efficient')")
    K, convert = resolve_field(oracle, field)
    if plan is None:                   # a box that takes float tokens is a float box
        plan = "stable" if tokens != "exact" and not K.is_exact else "paper"
    if noise_rel is not None and K.is_exact:
        raise ValueError(f"noise_rel= applies to the real field, not the {K.name} field")
    if max_primes is not None and (isinstance(max_primes, bool) or not isinstance(max_primes, int)
                                   or max_primes < 2):
        raise ValueError(f"max_primes must be an integer >= 2, got {max_primes!r}")
    if max_primes is not None and not K.multimodular:
        raise ValueError(f"max_primes applies to the modular field only, not the {K.name} field")
    strategy = strategy_for(plan, K)
    if executor is not None and not (K.multimodular and getattr(oracle, "over", None)
                                     and strategy.ASKS_PLAN and not trace):
        raise ValueError("executor= spreads the paper plan over the modular field with a black "
                         "box that can be asked modulo other primes (a model's Oracle), "
                         "without trace")
    R = query_range if query_range is not None else DEFAULT_RANGES.get(K.name, 20)
    if R < 1:
        raise ValueError("the query range must be >= 1")
    rng = random.Random(seed)
    rec = Recorder(oracle, K, convert)
    options = Options(noise=getattr(oracle, "noise", None) if noise is None else noise,
                      noise_rel=noise_rel, plan=plan,
                      query_scale=query_scale, snap=snap, heads_given=heads is not None,
                      state=strategy.new_state())
    error = None
    recovered: tuple = ()
    attempts = 0
    drawn = None
    tr: list = []
    n_cert = 0
    multimodular = None
    while attempts <= retries:
        attempts += 1
        tr = []
        try:
            drawn, R = _draw_checked_plan(oracle, strategy, d, H, rng, R, e_range, rank,
                                          adapt=query_range is None and e_range is None)
            ask = rec.child(oracle, K, convert)           # this attempt's observations
            trace_to = tr if trace else None
            if K.multimodular and strategy.EXACT and executor is not None:
                from exactlearn.pipeline.distributed import ClusterPlan
                cluster = ClusterPlan(executor, drawn, oracle)
                recovered, n_cert, multimodular = learn_modular(
                    oracle, ask, K, d, rng, lambda sub, Kr, t: cluster.run_prime(sub, Kr),
                    max_primes, None, plan=drawn, confirm_at=cluster.confirm)
            elif K.multimodular and strategy.EXACT:
                recovered, n_cert, multimodular = learn_modular(
                    oracle, ask, K, d, rng,
                    lambda sub, Kr, t: strategy.run(drawn, sub, Kr, t, options),
                    max_primes, trace_to, plan=drawn if strategy.ASKS_PLAN else None)
            else:
                recovered, n_cert = strategy.run(drawn, ask, K, trace_to, options)
            error = None
            break
        except ExactLearnError as exc:            # every failure says what it is
            error = f"{exc.kind}: {exc}" + _bound_hint(exc, H)
            recovered = ()
            multimodular = getattr(exc, "report", None)     # the primes asked, on failures too
            if isinstance(exc, ClusterError):               # the cluster's, not the draw's
                break
    verified = None
    verify_box = _Tally(oracle)
    if error is None and verify:
        verified, error = strategy.verify(verify_box, recovered, d, H, K, convert, rng, R, verify,
                                          options.state)
        if error is not None:
            recovered = ()
    total = time.perf_counter() - t_start
    detail = strategy.detail(drawn, options.state, error is None) if drawn is not None else None
    return LearnResult(
        verify_queries=verify_box.answered, verified=verified,
        status="certified" if error is None else "failed",
        heads=recovered if error is None else (),
        error=error, d=d, heads_bound=H, field=K,
        queries=rec.queries, max_length=rec.max_length,
        plan="stable" if plan == "stable" else (drawn.name if drawn else "paper"),
        plan_queries=(drawn.count if plan == "efficient" and drawn else
                      getattr(strategy, "plan_count", lambda _n, dd, hh: paper_count(dd, hh))(plan, d, H)),
        attempts=attempts, query_range=R, learner_seconds=max(0.0, total - rec.seconds),
        oracle_seconds=rec.seconds, certified_observations=n_cert, trace=tr,
        snap=_snap(detail, recovered) if snap and error is None else None,
        multimodular=multimodular, detail=detail)


class _Tally:
    """The black box for ``verify=N``, counting the queries it answers (a verification that
    stops at its first disagreement asks fewer than N)."""

    def __init__(self, oracle):
        self._oracle = oracle
        self.answered = 0

    def __call__(self, tokens):
        y = self._oracle(tokens)
        self.answered += 1
        return y

    def __getattr__(self, name):
        return getattr(self._oracle, name)


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
    redrawn at half the range, down to R = 2; no query is spent on it.
    Returns ``(plan, R)``."""
    check = getattr(oracle, "check_plan", None)
    while True:
        plan = strategy.draw_plan(d, H, rng, R, e_range, rank)
        if check is None:
            return plan, R
        try:
            check(plan)
            return plan, R
        except ExactnessError:
            if not adapt or R <= 2:
                raise
            R //= 2


def _bound_hint(exc, H) -> str:
    """A black box with more canonical heads than the bound fails like a degenerate draw or
    a box outside the class: say so, since the bound is the user's to raise."""
    if isinstance(exc, (ExactnessError, HeightExceeded, ClusterError)):
        return ""
    return (f" [note: a black box with more than {H} canonical head{'s' if H > 1 else ''} "
            f"(the bound) fails this way too: raise --heads / --max-heads]")
