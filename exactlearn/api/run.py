"""One run of ``learn()``: the attempts, the verification and the result (docs: explanation/algorithm.md#how-it-works).

:class:`Run` drives a [`Strategy`][exactlearn.strategies.base.Strategy] through its members
only: it measures eta first with ``noise="auto"``, then draws a plan and runs it, redrawing
after a detected degenerate draw up to ``retries`` times, verifies with ``verify=N``, and
assembles the [`LearnResult`][exactlearn.api.result.LearnResult].  Every query the box
answers goes through one :class:`~exactlearn.oracle.Recorder` and is counted.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from exactlearn.api.hints import bound_hint, coarse_answer_hint, undeclared_noise_hint
from exactlearn.api.result import LearnResult
from exactlearn.api.vector import alone_note, draw_view, outputs_step, verify_outputs
from exactlearn.errors import (BadBlackBox, ClusterError, ExactLearnError, ExactnessError,
                               NoisierThanDeclared, TooLarge, VerificationFailed, box_failure)
from exactlearn.limits import outputs_values_limit, readable_int
from exactlearn.oracle import Recorder
from exactlearn.progress import current
from exactlearn.strategies.modular import ModularStrategy
from exactlearn.strategies.real import RealDetail

#: Default half-width R of the random integer query entries, per field name.
#: Rational: bit sizes grow like |D e^T W x| (see docs: howto/field-and-range.md#choosing-the-range).
#: Symbolic: degrees in T grow the same way.  Real: the integers only seed the near-orthogonal
#: dyadic X and E (exactlearn.strategies.real.stable_plan.dyadic_basis).
DEFAULT_RANGES = {"rational": 30, "modular": 2 ** 32, "symbolic": 8, "real": 1000}


@dataclass
class RunContext:
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
    remeasure: object = None           # noise="auto": eta on the plan's own scales (Run._remeasure)


class Run:
    """One ``learn()`` run over checked arguments ``c`` (an
    :class:`~exactlearn.api.arguments.Checked`) and keywords ``a``."""

    def __init__(self, c, a: dict, d: int, heads_given: bool, seed, t_start: float):
        self.a, self.d, self.H, self.K, self.t_start = a, d, c.H, c.K, t_start
        self.heads_given = heads_given
        self.retries, self.plan, self.auto = c.retries, c.plan, c.auto
        self.R = a["query_range"] if a["query_range"] is not None else \
            DEFAULT_RANGES.get(c.K.name, 20)
        self.rng = random.Random(seed)
        self.view, self.noise, oracle, convert = None, a["noise"], c.oracle, c.convert
        if a["outputs"] is not None:       # the plan runs on r . y; the vectors are recorded
            from exactlearn.oracle import OutputsView
            box_noise = getattr(oracle, "noise", None)
            self.view = oracle = OutputsView(oracle, a["outputs"], c.K, convert,
                                             [1] * a["outputs"], outputs_values_limit(c.K.name))
            convert = False
            if self.noise is None and box_noise is not None:
                self.noise = box_noise
        self.oracle, self.convert = oracle, convert
        self.rec = Recorder(oracle, c.K, convert)
        current().bind(self.rec)           # progress=: follows every query counted here
        self.strategy = c.strategy
        if c.K.multimodular and c.strategy.EXACT:       # once per prime, or on a cluster
            self.strategy = ModularStrategy(c.strategy, oracle, d, self.rng, a["max_primes"],
                                            a["max_height"], a["executor"])
        self.options = RunContext(
            noise=getattr(oracle, "noise", None) if self.noise is None else self.noise,
            noise_rel=a["noise_rel"], plan=c.plan, query_scale=a["query_scale"], snap=a["snap"],
            heads_given=heads_given, attempts=c.retries + 1, state=self.strategy.new_state(),
            bias=a["bias"])
        self.error, self.failure = None, None      # the reason, and the typed exception
        self.recovered, self.drawn, self.tr, self.n_cert = (), None, [], 0
        self.multimodular, self.attempt_log, self.attempts = None, [], 0
        self.noise_box, self.noise_estimated, self.preliminary = None, None, None

    def result(self) -> LearnResult:
        """Measure eta (``noise="auto"``), run the attempts, verify, and report.  An exception
        the black box raised propagates unchanged, with the queries answered before it (all
        counted) in a note and in ``exactlearn_queries``: there is no result to return."""
        try:
            if self.auto:
                self._measure_noise()
            while self.attempts <= self.retries:
                if self._attempt():
                    break
            self._note_refused()
            verified, verify_box = self._verify()
        except Exception as exc:
            if getattr(exc, "exactlearn_box", None) is not None:
                exc.exactlearn_queries = self.rec.queries
                exc.add_note(f"exactlearn: {box_failure(exc)}; learn() returned no result")
            raise
        if self.error is None:
            current().finish()             # the last phase ends at its total
        return self._report(verified, verify_box)

    def _measure_noise(self) -> None:
        """``noise="auto"``: eta measured before any attempt, its queries counted."""
        self.noise_box = self.rec.child(self.oracle, self.K, self.convert, keep=False)
        try:
            from exactlearn.strategies.real.eta import FLOOR, STEPPED, measure_noise
            tokens = self.a["tokens"]
            est = measure_noise(self.noise_box, self.d, self.H, seed=self.rng.getrandbits(64),
                                floor=FLOOR.get(tokens, 0.0), steps=tokens in STEPPED,
                                view=self.view)
            self.options.noise, self.options.noise_rel = est.noise, est.noise_rel
            if self.view is not None:      # every output within est.noise + est.noise_rel |y_j|
                self.noise = est.noise
            self.noise_estimated = est.to_json()
            self.preliminary = self.noise_estimated
            if self.plan == "stable":
                self.options.remeasure = self._remeasure
        except ExactLearnError as exc:           # the box's answers: no attempt follows
            self.error = f"{exc.kind}: measuring eta (noise='auto'): {exc}"
            self.failure = kept(exc)
            self.retries = -1

    def _remeasure(self, pairs, sigma) -> list:
        """``noise="auto"``, once an attempt's scale ``sigma`` is chosen: eta measured on the
        plan's own tokens at every scale it asks
        ([`measure_plan_noise`][exactlearn.strategies.real.eta.measure_plan_noise]), its
        queries counted in ``noise_queries`` and not certified (with ``outputs=m`` the
        measurement's answers are dropped from the view's records).  Returns ``[(scale,
        largest token norm, eta, eta_rel)]``.  ``noise_estimated`` then reports the eta at
        sigma (``noise``, ``noise_rel``), every scale's (``by_scale``), the measurement before
        the probe (``preliminary``) and every measuring query so far (``queries``)."""
        from exactlearn.strategies.real.eta import FLOOR, STEPPED, measure_plan_noise
        tokens = self.a["tokens"]
        r0 = len(self.view.records) if self.view is not None else 0
        got = measure_plan_noise(self.noise_box, self.H, pairs, seed=self.rng.getrandbits(64),
                                 floor=FLOOR.get(tokens, 0.0), steps=tokens in STEPPED,
                                 view=self.view)
        if self.view is not None:          # not the attempt's records: the outputs' fit
            del self.view.records[r0:]     # certifies the plan's own answers
            self.noise = max(e.noise for e in got.estimates)
            self.options.noise_rel = max(e.noise_rel for e in got.estimates)
        at = got.at(sigma)
        self.noise_estimated = dict(
            self.preliminary, noise=repr(at.noise), noise_rel=repr(at.noise_rel),
            envelope_abs=repr(at.envelope_abs), envelope_rel=repr(at.envelope_rel),
            max_spread=repr(max(e.max_spread for e in got.estimates)),
            groups=sum(e.groups for e in got.estimates), scales=[str(x) for x in got.scales],
            query_scale=str(sigma), by_scale=got.to_json(), preliminary=self.preliminary,
            queries=self.noise_box.queries,
            method=(f"at the plan's own scales: {at.method}; eta for a query by its largest "
                    f"token norm (by_scale; noise and noise_rel are those at the plan's scale "
                    f"sigma = {sigma}); before the probe, for the probe: the preliminary "
                    f"measurement"))
        return [(s, n, e.noise, e.noise_rel)
                for s, n, e in zip(got.scales, got.norms, got.estimates)]

    def _attempt(self) -> bool:
        """One attempt: draw, ask, certify.  True when no further attempt follows."""
        a, K = self.a, self.K
        self.attempts += 1
        current().at(attempt=self.attempts)
        self.tr = []
        ask, outcome = None, "failed"
        try:
            try:
                self.drawn, self.R = draw_checked_plan(
                    self.oracle, self.strategy, self.d, self.H, self.rng, self.R, a["e_range"],
                    a["rank"], adapt=a["query_range"] is None and a["e_range"] is None)
            except ExactnessError:
                outcome = "refused"            # before any query: too large, not degenerate
                raise
            if self.view is not None:          # a fresh combination r for every attempt
                self.options.noise = draw_view(self.view, K, self.rng, self.noise,
                                               self.options.noise_rel)
            ask = self.rec.child(self.oracle, K, self.convert)     # this attempt's observations
            self.recovered, self.n_cert = self.strategy.run(
                self.drawn, ask, K, self.tr if a["trace"] else None, self.options)
            if isinstance(self.strategy, ModularStrategy):
                self.multimodular = self.options.state.report
            if self.view is not None:          # every output's readout, certified
                self.recovered, self.n_cert = outputs_step(
                    self.recovered, self.view, K, self.d, a["bias"], self.multimodular,
                    self.options, self.noise)
            self.error, self.failure, outcome = None, None, "certified"
            return True
        except (BadBlackBox, ClusterError, TooLarge) as exc:  # the box broke its interface, the
            # cluster failed, or the run outgrew its memory: not the draw's fault, so no redraw
            self._failed(exc, "")
            return True
        except MemoryError as exc:         # outputs=m: answers past what this machine holds
            if self.view is None or getattr(exc, "exactlearn_box", None) is not None:
                raise
            self._failed(TooLarge(f"out of memory with outputs={self.view.m} after "
                                  f"{self.rec.queries} queries: lower outputs=, d or the head "
                                  f"bound"), "")
            return True
        except ExactLearnError as exc:            # every failure says what it is
            final = self._noisier_than_declared(exc)
            self._failed(exc, alone_note(self.view, str(exc)) + bound_hint(
                exc, self.H, exact_count=self.heads_given and K.name == "real")
                + undeclared_noise_hint(K, self.a, self.oracle)
                + coarse_answer_hint(self.oracle, K, self.a) + final)
            return bool(final)
        finally:
            self.attempt_log.append({"queries": 0 if ask is None else ask.queries,
                                     "outcome": outcome})

    def _noisier_than_declared(self, exc) -> str:
        """A verdict that the box is noisier than its declared eta is final: another draw
        cannot make the declared eta hold, it only gives the noise tests another chance to
        miss (a box 100 times noisier than declared was certified beyond its bound on a
        later attempt; docs: reference/api.md#retries).  With ``noise="auto"`` eta is
        measured again, with ``outputs=m`` the readout is part of the draw (a head can read
        zero in it), and where a head bound's escalation failed for reasons of the draw too
        (``draw``: a resolution, a crowded or degenerate refit at more heads) the attempts go
        on.  Returns the note for the failure ("" when retries go on)."""
        if (self.auto or self.view is not None or not isinstance(exc, NoisierThanDeclared)
                or getattr(exc, "resolved", False) or getattr(exc, "draw", False)
                or self.attempts > self.retries):
            return ""
        return (f" [not retried ({self.retries - self.attempts + 1} retries left): another draw "
                f"cannot make the declared eta hold]")

    def _failed(self, exc, hint: str) -> None:
        self.error, self.failure = f"{exc.kind}: {exc}" + hint, kept(exc)
        self.recovered = ()
        self.multimodular = getattr(exc, "report", None)     # the primes asked, on failures too

    def _note_refused(self) -> None:
        refused = sum(1 for a in self.attempt_log if a["outcome"] == "refused")
        n, name = self.attempts, self.K.name
        if self.error is not None and refused and n > 1:
            self.error += (f" [{refused} of the {n} draws were refused before any query as too "
                           f"large for the {name} field; the others were degenerate or failed]"
                           if refused < n else
                           f" [all {n} draws were refused before any query as too large for the "
                           f"{name} field: none was degenerate]")

    def _verify(self) -> tuple:
        """``verify=N``: fresh queries, counted in ``queries`` too."""
        verified = None
        verify_box = self.rec.child(self.oracle, self.K, convert=False, keep=False)
        n = self.a["verify"]
        if self.error is None and n:
            current().at(attempt=self.attempts)         # after the primes: no prime
            current().phase("verify", n)
            if self.view is not None:
                real = None if self.K.is_exact else (self.options.state.outcome, self.noise,
                                                     self.options.noise_rel)
                verified, self.error = verify_outputs(verify_box, self.view, self.recovered,
                                                      self.d, self.H, self.K, self.rng, self.R, n,
                                                      real)
            else:
                verified, self.error = self.strategy.verify(
                    verify_box, self.recovered, self.d, self.H, self.K, self.convert, self.rng,
                    self.R, n, self.options.state)
            if self.error is not None:
                self.recovered = ()
                self.failure = VerificationFailed(self.error)
        return verified, verify_box

    def _report(self, verified, verify_box) -> LearnResult:
        a, K, d, H, ok = self.a, self.K, self.d, self.H, self.error is None
        total = time.perf_counter() - self.t_start
        detail = self.strategy.detail(self.drawn, self.options.state, ok) \
            if self.drawn is not None else None
        return LearnResult(
            verify_queries=verify_box.queries, verified=verified, attempt_log=self.attempt_log,
            status="certified" if ok else "failed", heads=self.recovered if ok else (),
            error=self.error, failure=self.failure, d=d, heads_bound=H, field=K,
            queries=self.rec.queries, max_length=self.rec.max_length,
            plan="stable" if self.plan == "stable" else
            (self.drawn.name if self.drawn else "paper"),
            plan_queries=getattr(detail, "plan_queries", None)    # the run's own nodes
            or self.strategy.plan_count(self.plan, d, H, bias=a["bias"], drawn=self.drawn),
            attempts=self.attempts, query_range=self.R,
            learner_seconds=max(0.0, total - self.rec.seconds), oracle_seconds=self.rec.seconds,
            certified_observations=self.n_cert, trace=self.tr,
            snap=snap_report(detail, self.recovered) if a["snap"] and ok else None,
            multimodular=self.multimodular, detail=detail,
            constant=getattr(self.recovered, "constant", 0) if ok and a["bias"] else 0,
            bias=a["bias"], outputs=a["outputs"],
            noise_queries=0 if self.noise_box is None else self.noise_box.queries,
            noise_estimated=self.noise_estimated)


def kept(exc: ExactLearnError) -> ExactLearnError:
    """The failure as ``LearnResult.failure`` keeps it: without its traceback, whose frames
    would keep the failed attempt's data alive as long as the result."""
    return exc.with_traceback(None)


def snap_report(detail, heads) -> dict:
    """snap=True: the real field's certified bounded-height rationals; over an exact field
    the heads already are exact rationals."""
    if isinstance(detail, RealDetail) and detail.snap is not None:
        return detail.snap
    return {"status": "certified", "exact": True, "snapped": len(heads),
            "note": "exact field: the heads are exact rationals, certified by exact equality"}


def draw_checked_plan(oracle, strategy, d, H, rng, R, e_range, rank, adapt) -> tuple:
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
            R = max(2, R // 2 ** _halvings(exc, e_range, R))   # down to R = 2, not below
            plan = None                 # freed before the next draw, not held beside it


def _halvings(exc, e_range, R) -> int:
    """How far to halve the range after a refused draw: once, or further while the refused
    plan's largest exponent scaled to the smaller range (as R^2 when the directions share the
    range, else as R) is still above 16 times the field's limit -- draws that would be
    refused all but surely (an efficient plan at d = 384 went from 2^32 down to 2^17, one
    draw and check each, minutes at that size).  At least 1, and never below R = 2."""
    worst, limit = getattr(exc, "worst", None), getattr(exc, "limit", None)
    power = 2 if e_range is None else 1
    n = 1
    if worst is not None and limit:
        while R >> (n + 1) >= 2 and worst > 16 * limit * 2 ** (power * n):
            n += 1
    return min(n, max(1, R.bit_length() - 2))
