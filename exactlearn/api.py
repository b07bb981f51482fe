"""The learner: plan -> queries -> interpolate -> poles -> match -> solve -> certify.

:func:`learn` recovers the canonical heads of any black box that is a
multi-head attention over the given field (SPEC §2-§5, arXiv:2608.03294,
main theorem): with H (or a bound H0) it asks exactly ``4 H d^2 - 2H + 1``
queries, the longest of ``2H + 1`` tokens, and returns either *certified*
heads -- they reproduce every observed value exactly -- or an explicit failure
with a reason.  It never returns an uncertified answer as a result.

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

from exactlearn.algebra import linalg
from exactlearn.pipeline.certify import CertificateError, certify
from exactlearn.fields.base import ExactnessError, Field, FieldError
from exactlearn.fields.modular import BadReduction, Modular, ModularImage, ReconstructionError, ResidueModular
from exactlearn.pipeline.interpolate import cauchy_interpolate, poles, poles_among
from exactlearn.algebra.linalg import SingularMatrix
from exactlearn.pipeline.match import MatchError, PoleCountMismatch, label_basis
from exactlearn.model import canonicalize
from exactlearn.pipeline.multimodular import HeightExceeded, PrimesDisagree, learn_over_primes, residue_report
from exactlearn.pipeline.plan import draw_paper_plan, paper_count
from exactlearn.pipeline.solve import solve_heads

#: Default half-width R of the random integer query entries, per field name.
#: Rational: bit sizes grow like |D e^T W x| (see README, "Choosing the range").
#: Symbolic: degrees in T grow the same way.  Real: the integers only seed exactly
#: orthogonal X and E (exactlearn.strategies.real.learn.orthogonal_plan).
DEFAULT_RANGES = {"rational": 30, "modular": 2 ** 32, "symbolic": 8, "real": 1000}


class Degenerate(Exception):
    """A detected degenerate draw (or a black box outside the model class)."""


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
    plan_fallbacks: list = dc_field(default_factory=list)
    plan_detail: dict | None = None
    probe_queries: int = 0                 # real field: scaling probe (inside ``queries``)
    error_bound: object = None             # real field: a-posteriori parameter error bound
    real_detail: dict | None = None        # real field: scale, certificate tolerance, ...
    snap: dict | None = None               # snap=True: bounded-height rationals, certified
    multimodular: dict | None = None       # modular field: primes, exact_over_Q, bound (multimodular.py)

    @property
    def certified(self) -> bool:
        return self.status == "certified"

    @property
    def plan_runs(self) -> int:
        """How many times the final attempt asked its plan: once, or once per prime of the
        multi-modular method (analysis primes and the confirmation prime)."""
        return len(self.multimodular["primes"]) if self.multimodular else 1

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
        if not self.field.is_exact:
            return False
        return self.multimodular is None or self.multimodular["exact_over_Q"]


class _Recorder:
    """Wraps the black box: counts, times and records every observation.

    A :meth:`child` records its own observations (e.g. modulo another prime)
    and adds its counts to its parent's, so the root counts every call."""

    def __init__(self, oracle, K: Field, convert: bool, parent=None):
        self.oracle = oracle
        self.K = K
        self.convert = convert
        self.parent = parent
        self.observations = []
        self.queries = 0
        self.max_length = 0
        self.seconds = 0.0

    def child(self, oracle, K: Field) -> "_Recorder":
        return _Recorder(oracle, K, True, parent=self)

    def _count(self, length, seconds):
        """One answered query of ``length`` tokens (``None``: time spent, no answer)."""
        self.seconds += seconds
        if length is not None:
            self.queries += 1
            self.max_length = max(self.max_length, length)
        if self.parent is not None:
            self.parent._count(length, seconds)

    def __call__(self, tokens):
        t0 = time.perf_counter()
        try:
            y = self.oracle(tokens)
        except BaseException:
            self._count(None, time.perf_counter() - t0)
            raise
        self._count(len(tokens), time.perf_counter() - t0)
        if self.convert:
            try:
                y = self.K(y)
            except (ValueError, TypeError, FieldError) as exc:
                raise Degenerate(f"the black box returned a value that is not in the "
                                 f"{self.K.name} field: {exc}") from None
        self.observations.append((tokens, y))
        return y


def resolve_field(oracle, field: Field | None) -> tuple:
    """The learner's field (scale filled in) and whether outputs need converting."""
    ofield = getattr(oracle, "field", None)
    if field is None:
        if ofield is None:
            raise ValueError("learn() needs field= for a black box without a .field")
        field = ofield
    if field.scale is None:
        field = field.with_scale(ofield.scale if isinstance(ofield, Field) and ofield.scale else 1)
    return field, not (isinstance(ofield, Field) and ofield == field)


def head_bound(d, heads, max_heads) -> int:
    """Validate d and the head count H or bound H0; return the bound the plan uses."""
    if heads is not None and max_heads is not None:
        raise ValueError("give heads= or max_heads=, not both")
    H = heads if heads is not None else max_heads
    if H is None or isinstance(H, bool) or not isinstance(H, int) or H < 1:
        raise ValueError(f"the head count/bound must be a positive integer, got {H!r}")
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}")
    return H


def learn(oracle, d: int, heads: int | None = None, max_heads: int | None = None,
          field: Field | None = None, seed=None, query_range: int | None = None,
          retries: int = 0, e_range: int | None = None, trace: bool = False,
          verify: int = 0, plan: str = "paper", rank: int | None = None,
          noise=None, query_scale=None, snap: bool = False,
          max_primes: int | None = None) -> LearnResult:
    """Learn the canonical heads of ``oracle`` (SPEC §3, §5).

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
    """
    t_start = time.perf_counter()
    H = head_bound(d, heads, max_heads)
    if retries < 0:
        raise ValueError("retries must be >= 0")
    if plan not in ("paper", "efficient"):
        raise ValueError(f"plan must be 'paper' or 'efficient', got {plan!r}")
    if rank is not None and plan != "efficient":
        raise ValueError("rank= is a promise for the efficient plan (plan='efficient')")
    plan_kind = plan
    K, convert = resolve_field(oracle, field)
    if max_primes is not None and (isinstance(max_primes, bool) or not isinstance(max_primes, int)
                                   or max_primes < 2):
        raise ValueError(f"max_primes must be an integer >= 2, got {max_primes!r}")
    if plan_kind == "efficient" and not K.is_exact:
        raise ValueError("the efficient plan runs over the exact fields; over the real field "
                         "the learner uses the paper plan (exactlearn.strategies.real.learn)")
    R = query_range if query_range is not None else DEFAULT_RANGES.get(K.name, 20)
    if R < 1:
        raise ValueError("the query range must be >= 1")
    rng = random.Random(seed)
    rec = _Recorder(oracle, K, convert)
    error = None
    recovered: tuple = ()
    attempts = 0
    plan = None
    tr: list = []
    n_cert = 0
    real = None
    multimodular = None
    probes: list = []              # real field: probe queries asked per attempt (failed ones too)
    while attempts <= retries:
        attempts += 1
        tr = []
        start = len(rec.observations)
        try:
            plan, R = _draw_checked_plan(oracle, plan_kind, d, H, rng, R, e_range, rank,
                                         adapt=query_range is None and e_range is None)
            if _over_primes(K):
                recovered, n_cert, multimodular = _learn_modular(
                    oracle, plan_kind, plan, rec, K, rng, max_primes, tr if trace else None)
            elif plan_kind == "efficient":
                from exactlearn.strategies.efficient.learn import run_efficient
                recovered, n_cert = run_efficient(plan, rec, K, lambda: rec.observations[start:],
                                                  tr if trace else None)
            elif not K.is_exact:
                from exactlearn.strategies.real.learn import run_real
                recovered, n_cert, real = run_real(
                    plan, rec, K, noise=getattr(oracle, "noise", None) if noise is None else noise,
                    query_scale=query_scale, snap=snap, probe_log=probes)
            else:
                y_shared, values = _ask_plan(plan, rec)
                recovered, n_cert = _analyse_and_certify(plan, y_shared, values, K,
                                                         rec.observations[start:], tr if trace else None)
            error = None
            break
        except (Degenerate, FieldError, CertificateError, SingularMatrix) as exc:
            error = f"{_kind(exc)}: {exc}" + _bound_hint(exc, H)
            recovered = ()
            multimodular = None
    verified = None
    if error is None and verify:
        if real is not None:
            from exactlearn.strategies.real.learn import verify_real
            verified, error = verify_real(oracle, real, recovered, d, H, K, convert, rng, R, verify)
        else:
            verified, error = _verify(oracle, recovered, d, H, K, convert, rng, R, verify)
        if error is not None:
            recovered = ()
    total = time.perf_counter() - t_start
    return LearnResult(
        verify_queries=verify if verified is not None else 0, verified=verified,
        status="certified" if error is None else "failed",
        heads=recovered if error is None else (),
        error=error, d=d, heads_bound=H, field=K,
        queries=rec.queries, max_length=rec.max_length,
        plan=plan.name if plan else "paper",
        plan_queries=plan.count if plan_kind == "efficient" else paper_count(d, H),
        plan_fallbacks=list(getattr(plan, "fallbacks", [])),
        plan_detail=plan.describe() if plan_kind == "efficient" else None,
        attempts=attempts, query_range=R, learner_seconds=max(0.0, total - rec.seconds),
        oracle_seconds=rec.seconds, certified_observations=n_cert, trace=tr,
        probe_queries=sum(probes),
        error_bound=real.error_bound if real is not None and error is None else None,
        real_detail=real.detail if real is not None else None,
        snap=(real.snap if real is not None else _exact_snap(recovered)) if snap and error is None
        else None,
        multimodular=multimodular)


def _over_primes(K) -> bool:
    """The modular field proper (not the rational field's reduction ModularImage)."""
    return isinstance(K, Modular) and not isinstance(K, ModularImage)


def _learn_modular(oracle, kind, plan, rec, K, rng, max_primes, trace) -> tuple:
    """The modular field: the multi-modular method when the black box can be asked modulo
    other primes (``oracle.over``), else one prime with v certified modulo p only.

    Returns ``(heads, n_certified, multimodular report)``."""
    over = getattr(oracle, "over", None)
    asked: list = []

    def analyse_at(Kr, box, tr):
        sub = rec.child(box, Kr)
        if kind == "efficient":
            from exactlearn.strategies.efficient.learn import run_efficient
            heads, n = run_efficient(plan, sub, Kr, lambda: sub.observations, tr)
        else:
            y_shared, values = _ask_plan(plan, sub)
            heads = _analyse(plan, y_shared, values, Kr, tr)
            n = certify(heads, plan.d, sub.observations, Kr)
        if not asked:
            asked.extend(t for t, _ in sub.observations)
        return heads, n, sub.queries

    if over is None:
        Kr = ResidueModular(K.p, K.omega, K.D)
        heads, n, _ = analyse_at(Kr, oracle, trace)
        return heads, n, residue_report(heads, K)

    def run_prime(Kr):
        first = Kr.p == K.p
        return analyse_at(Kr, oracle if first else over(Kr), trace if first else None)

    def confirm(heads, Kc):
        sub = rec.child(over(Kc), Kc)
        for tokens in asked:
            sub(tokens)
        return sub.observations, certify(heads, plan.d, sub.observations, Kc), sub.queries

    kw = {} if max_primes is None else {"max_primes": max_primes}
    return learn_over_primes(K, run_prime, confirm, rng, **kw)


def _exact_snap(heads) -> dict:
    """snap=True over an exact field: the heads already are exact rationals."""
    return {"status": "certified", "exact": True, "snapped": len(heads),
            "note": "exact field: the heads are exact rationals, certified by exact equality"}


def _draw_checked_plan(oracle, kind, d, H, rng, R, e_range, rank, adapt) -> tuple:
    """Draw a plan and let the black box check it before any query (fail fast).

    With the default range (``adapt``), a plan whose exponents the oracle's
    field cannot realise (numbers past the rational field's size limit) is
    redrawn at half the range, down to R = 2; no query is spent on it.
    Returns ``(plan, R)``."""
    check = getattr(oracle, "check_plan", None)
    while True:
        if kind == "paper":
            plan = draw_paper_plan(d, H, rng, R, e_range)
        else:
            from exactlearn.strategies.efficient.plan import draw_efficient_plan
            plan = draw_efficient_plan(d, H, rng, R, e_range, rank)
        if check is None:
            return plan, R
        try:
            check(plan)
            return plan, R
        except ExactnessError:
            if not adapt or R <= 2:
                raise
            R //= 2


def _analyse_and_certify(plan, y_shared, values, K, observations, trace) -> tuple:
    """Analyse in ``K`` -- or, for a field with ``analysis_fields()`` (the rational
    field: its reductions modulo large primes, the multi-modular method) in each
    of those in turn -- and certify the result over ``K`` itself.

    Only a bad reduction (a denominator divisible by p, a rational past the
    reconstruction bound, a certificate that fails after reconstruction) moves
    on to the next prime; no further queries are asked.
    """
    def analyse_and_certify(A):
        if A is K:
            recovered = _analyse(plan, y_shared, values, A, trace)
        else:
            vals = {c: [A(y) for y in vs] for c, vs in values.items()}
            recovered = _analyse(plan, A(y_shared), vals, A, trace)
        return recovered, certify(recovered, plan.d, observations, K)

    return over_analysis_fields(K, analyse_and_certify, trace)


def over_analysis_fields(K, run, trace=None):
    """``run(A)`` for A in ``K.analysis_fields()`` (or just K), moving on to the
    next only after a bad reduction: a denominator divisible by p, a rational
    past the reconstruction bound, or a certificate over K that fails after
    reconstruction (``run`` analyses in A and certifies over K)."""
    fields = K.analysis_fields() if hasattr(K, "analysis_fields") else [K]
    for n, A in enumerate(fields):
        try:
            return run(A)
        except (BadReduction, ReconstructionError, CertificateError):
            if n == len(fields) - 1:
                raise
            if trace is not None:
                trace.clear()
    raise AssertionError("unreachable")


def _verify(oracle, heads, d, H, K, convert, rng, R, n) -> tuple:
    """n fresh random queries (length 1..2H+1) comparing heads and black box."""
    from exactlearn.model import HeadEvaluator
    ev = HeadEvaluator(heads, d, K)
    for _ in range(n):
        length = rng.randint(1, 2 * H + 1)
        tokens = [tuple(rng.randint(-R, R) for _ in range(d)) for _ in range(length)]
        try:
            y = oracle(tokens)
            if convert:
                y = K(y)
            agrees = K.eq(ev(tokens), y)
        except (FieldError, ValueError, TypeError) as exc:
            return False, f"verification failed: a fresh random query could not be compared ({exc})"
        if not agrees:
            return False, "verification failed: a fresh random query disagrees with the certified heads"
    return True, None


def _bound_hint(exc, H) -> str:
    """A black box with more canonical heads than the bound fails like a degenerate draw or
    a box outside the class: say so, since the bound is the user's to raise."""
    if isinstance(exc, (ExactnessError, HeightExceeded)):
        return ""
    return (f" [note: a black box with more than {H} canonical head{'s' if H > 1 else ''} "
            f"(the bound) fails this way too: raise --heads / --max-heads]")


def _kind(exc) -> str:
    if isinstance(exc, HeightExceeded):
        return "reconstruction failed"
    if isinstance(exc, PrimesDisagree):
        return "the primes disagree"
    if isinstance(exc, CertificateError):
        return "certificate failed"
    if isinstance(exc, MatchError) and not isinstance(exc, PoleCountMismatch):
        return "matching failed"
    if isinstance(exc, ExactnessError):
        return "the field cannot realise this run"
    return "degenerate draw or black box outside the model class"


def _ask_plan(plan, ask) -> tuple:
    """Ask every query of the plan (the plan is data: its length is the count).

    Returns the shared k = 0 value and ``{config index: [f(q_1), ..., f(q_2H)]}``."""
    values: dict = {}
    y_shared = None
    for q in plan.queries:
        y = ask(plan.tokens(q))
        if q.k == 0:
            y_shared = y
        else:
            values.setdefault(q.config, []).append(y)
    return y_shared, values


def _run(plan, ask, K: Field, trace) -> tuple:
    """Ask the plan, then analyse it in K (no certificate): the recovered heads."""
    y_shared, values = _ask_plan(plan, ask)
    return _analyse(plan, y_shared, values, K, trace)


def _analyse(plan, y_shared, values, K: Field, trace) -> tuple:
    """Interpolate, read poles, get V, match and solve: the recovered canonical heads."""
    d, H = plan.d, plan.H
    ks = [K(k) for k in range(2 * H + 1)]
    configs = plan.configs
    rfs: dict = {}
    poles_of: dict = {}

    def fit(n, y0):
        rfs[n] = cauchy_interpolate(ks, [y0] + values[n], H, K)

    # 2. the group of x_1 shares the k = 0 query; it gives V (SPEC §3)
    for n, c in enumerate(configs):
        if c.shares_k0:
            fit(n, y_shared)
    for j in range(d):
        n = plan.index("basis", 0, j)
        poles_of[n] = poles(rfs[n], K)
    Et = [[K(plan.E[j][r]) for r in range(d)] for j in range(d)]      # rows e_j^T
    sums = [-_sum((c for _, c in poles_of[plan.index("basis", 0, j)]), K) for j in range(d)]
    V = linalg.matvec(linalg.inverse(Et, K), sums, K)               # E^T V = (V.e_j)_j

    def dot(u, x):
        return _sum((a * K(b) for a, b in zip(u, x)), K)

    # 3. every other configuration takes its k = 0 value V.x by computation
    for n, c in enumerate(configs):
        if n not in rfs:
            fit(n, dot(V, c.x))
    for n, c in enumerate(configs):
        if not K.eq(rfs[n].limit(K), dot(V, c.a)):
            raise Degenerate(f"configuration {c.kind}{(c.i + 1, c.j + 1)}: the limit of f(q_k) "
                             f"is not V.a (more heads than the bound H = {H}, an additive constant, "
                             f"or a bias)")
    # poles: root finding for the basis configurations; a matching configuration's
    # poles can only be products of two basis configurations' rho (SPEC §3), so
    # they are looked for among those first (poles_among falls back to roots)
    for n, c in enumerate(configs):
        if c.kind == "basis" and n not in poles_of:
            poles_of[n] = poles(rfs[n], K)
    for n, c in enumerate(configs):
        if c.kind != "basis":
            i0 = 0 if c.kind == "across" else c.i
            a = poles_of[plan.index("basis", i0, 0 if c.kind == "within" else c.j)]
            b = poles_of[plan.index("basis", c.i, c.j)]
            poles_of[n] = poles_among(rfs[n], [ra * rb for ra, _ in a for rb, _ in b], K)
    fits = {n: (rfs[n], poles_of[n]) for n in rfs}
    # 4. label every basis configuration by head (products in the field)
    labelled = label_basis(plan, poles_of, K)
    # 5. solve for W_h (param domain) and v_h (field, then to_param)
    out = solve_heads(plan, labelled, K)
    if trace is not None:
        trace.extend(_trace(plan, fits, labelled, V, y_shared, values, K))
    return canonicalize(out)


def _sum(it, K):
    acc = K.zero
    for x in it:
        acc = acc + x
    return acc


def _trace(plan, fits, labelled, V, y_shared, values, K) -> list:
    rows = []
    for n, c in enumerate(plan.configs):
        rf, pl = fits[n]
        rows.append({"config": c, "y0": y_shared if c.shares_k0 else None,
                     "values": values[n], "P": rf.P, "Q": rf.Q, "poles": pl,
                     "labelled": labelled.get((c.i, c.j)) if c.kind == "basis" else None})
    rows.append({"V": V})
    return rows
