"""What ``learn()`` returns: [`LearnResult`][exactlearn.api.result.LearnResult] and its JSON (docs: reference/json.md).

The common fields of every run, and one typed detail per strategy
(``LearnResult.detail``): an [`EfficientDetail`][exactlearn.strategies.efficient.EfficientDetail],
a [`RealDetail`][exactlearn.strategies.real.RealDetail], a
[`ModularDetail`][exactlearn.strategies.modular.ModularDetail] (wrapping the exact strategy's
own), or None for the paper plan over the rational and symbolic fields.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field as dc_field

from exactlearn.errors import ExactLearnError
from exactlearn.fields.base import Field
from exactlearn.strategies.efficient import EfficientDetail
from exactlearn.strategies.modular import ModularDetail
from exactlearn.strategies.real import RealDetail


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
        The failure as its typed exception (an ``ExactLearnError`` subclass) (a
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
    detail : EfficientDetail, RealDetail, ModularDetail or None
        The strategy's own typed detail (docs: reference/api.md#details): an
        ``EfficientDetail`` (efficient plan), a ``RealDetail`` (real field), a
        ``ModularDetail`` (modular field; its ``inner`` is the exact strategy's own), or
        None (paper plan over the rational and symbolic fields).  The properties below read
        it.
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
    detail: object = None                  # the strategy's own: Efficient-, Real-, ModularDetail or None
    constant: object = 0                   # bias=True: the additive constant c
    bias: bool = False                     # bias=True: the plan for biases (u, c in the JSON)
    outputs: int | None = None             # outputs=m: vector outputs (v m x d, constant m)
    failure: ExactLearnError | None = None  # the failure as its typed exception; None when certified

    # -- the strategies' details, as attributes (stable names) -------------------------
    @property
    def efficient_detail(self) -> EfficientDetail | None:
        """Efficient plan: its typed detail (over the modular field, the wrapped one)."""
        own = self.detail.inner if isinstance(self.detail, ModularDetail) else self.detail
        return own if isinstance(own, EfficientDetail) else None

    @property
    def plan_fallbacks(self) -> list:
        """Efficient plan: the fallbacks it took, with their queries."""
        own = self.efficient_detail
        return [] if own is None else list(own.fallbacks)

    @property
    def plan_detail(self) -> dict | None:
        """Efficient plan: its counts (``plan.describe()``)."""
        own = self.efficient_detail
        return None if own is None else own.plan_detail

    @property
    def probe_queries(self) -> int:
        """Real field: the scaling probe's queries (inside ``queries``), every attempt."""
        return self.detail.probe_queries if isinstance(self.detail, RealDetail) else 0

    @property
    def error_bound(self):
        """Real field: the a-posteriori bound on the largest parameter error."""
        return self.detail.error_bound if isinstance(self.detail, RealDetail) else None

    @property
    def real_detail(self) -> dict | None:
        """Real field: the run's account (``RealDetail.report``: the query scale, the
        certificate's tolerance, ...), the JSON's ``real_detail``."""
        return self.detail.report if isinstance(self.detail, RealDetail) else None

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
        } | ({"constant": format_constant(K, self.constant, self.outputs)} if self.bias else {}) \
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


def format_constant(K, constant, outputs):
    """The JSON's ``constant``: one number, or with ``outputs`` a list of m (zeros on a failure)."""
    if outputs is None:
        return K.format(constant)
    if not isinstance(constant, (tuple, list)):
        constant = [constant] * outputs
    return [K.format(c) for c in constant]


