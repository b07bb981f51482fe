"""Learn a one-layer Transformer up to functional equivalence (SPEC §7, issue 5).

The black box is ``T(X) = sum_j u_j ReLU(sum_h gamma_{jh} . y_h(X))`` (see
:mod:`exactlearn.transformer_model`), with ``y_h`` head h's softmax average and
``gamma_{jh} = O_h^T b_j``.  Write ``beta_j = sum_h gamma_{jh}``: on a single
token x every softmax is 1, so ``T(x) = sum_j u_j ReLU(beta_j . x)``.

Route (SPEC §7's, made exact; the paper's own route is not available)
----------------------------------------------------------------------
1. **Path.**  Random integer A, P; the path A -> P -> -A (two segments) sweeps a
   half-plane of directions once, so it crosses every hyperplane ``beta_j^perp``
   exactly once.  Single-token outputs are piecewise linear along each segment
   and are asked at integer points only (``T(x) = T(L x)/L``, no biases).
2. **Kinks** (:func:`_kinks`): the linear pieces at both ends of an interval are
   intersected; a kink is accepted when the output at the intersection lies on
   both pieces and the pieces just left and right of it (three collinear
   samples each) are exactly those two; otherwise the interval is split.
   Kinks are exact rationals.
3. **Cones** (:func:`_learn_cone`): between two kinks the set S of active
   neurons is fixed on a whole open cone (no biases).  At the cone's centre c
   the paper plan of SPEC §3 is run with final tokens ``M c + delta_i`` and
   directions ``e_j`` (entries in [-2, 2]): while the final token dominates,
   T restricted to the plan *is* a multi-head attention with heads
   ``(W_h, w_h^S)``, ``w_h^S = sum_{j in S} u_j gamma_{jh}``, so the learner
   core (:func:`exactlearn.pipeline.analysis.ask_and_analyse`: interpolate, poles, match, solve)
   returns the W_h and w^S exactly.  The k = 0 shortcut does not apply to T,
   so the single-token query is asked at *every* distinct final token (2d - 1
   per cone) and at c itself, and all must agree with the recovered cone
   heads: the whole cone is certified (every observation recomputed exactly).
   A failure redraws, with M doubled from the third draw on (condition C3).
   Per cone ``2d + 2H(2d^2 - 1)`` queries, longest ``2H + 1``.
4. **Neurons.**  Across kink k the active set changes by one neuron, so
   ``Delta_k = w^{after} - w^{before} = +-u_j (gamma_{j1}, ..., gamma_{jH})``.
   Which sign is fixed by the one global constraint the bias-free model gives:
   the neurons active at the first cone are exactly those that switch *off*
   along the path, so ``sum_{k in Off} Delta_k = -w^{first}`` (two solutions
   differ by linear terms that cancel: the same function).  When no subset
   fits, what is left is a linear term ``L . (y_1, ..., y_H)`` -- two
   neurons on one hyperplane with opposite gammas leave one -- written as
   ``ReLU(L.y) - ReLU(-L.y)`` (:func:`_orientations`).  The sign of u_j is
   that of ``u_j beta_j . x`` on the active side.  Checked on the way: every
   sampled single-token output lies on its cone's linear map, every kink on
   its neuron's hyperplane, and the assembled model reproduces every
   observation (a failed check redraws the path).
5. **Model** (:func:`_build`).  Heads: the distinct W found.  Neurons with
   positively parallel gammas are merged; then a rank factorisation
   ``[u_j gamma_{jh}]_{j,h} = B [O_1 ... O_H]`` (m = its rank)
   gives O and B, with u_j = +-1 (or the merged weight).
6. **Certificate.**  The returned model must reproduce every observed output
   exactly (real field: within its tolerance) *and* N fresh queries: random
   ones of length 1..6 with integer tokens in [-5, 5] and, for every
   recovered neuron, 10 queries whose final token lies exactly on its
   hyperplane or just across it, with random other tokens (the attention then
   decides the sign of that neuron).  Otherwise the run fails.  The fresh
   queries are asked through the same recorder as the learning ones, so
   ``queries`` and ``max_length`` cover every call the black box answered
   (``learning_queries`` + ``certificate_queries``; the random ones alone
   reach length 6).

Conditions (stated in the README and the claim's evidence)
-----------------------------------------------------------
C1  every neuron that matters (u_j != 0, some gamma_{jh} != 0) has
    beta_j != 0, i.e. single tokens can switch it;
C2  no two such neurons have parallel hyperplanes (beta_i || beta_j) unless
    their (gamma_{j1}, ..., gamma_{jH}) are parallel too (positively: they
    merge; negatively: they leave a linear term, written as two neurons);
C3  margin: in every cone crossed by the path some scale |M c| <= 64 * 24
    makes the final token dominate, i.e. no neuron changes sign along any query
    family of the cone's plan (checked by the cone certificate, escalated);
C4  generic draws: within a cone plan the rho of distinct heads differ and
    every c-value is nonzero (redrawn, as for attention), the path meets no
    intersection of two hyperplanes;
C5  visibility: each head read by a neuron is visible (w_h^S != 0) in a cone
    next to that neuron's kink -- implied by C1, since Delta_k carries
    u_j gamma_{jh} != 0;
C6  an ordered field: rational (exact) or real (its tolerances); at most H
    distinct W overall.
A violation that the learner detects ends in ``status = "failed"`` with the
reason; the certificate catches the rest (C1, C2 show up only there).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field as dc_field

from gmpy2 import mpq

from exactlearn.algebra import linalg
from exactlearn.pipeline.certify import CertificateError, certify
from exactlearn.fields.base import ExactnessError, Field, FieldError, as_mpq
from exactlearn.errors import DegenerateDraw as Degenerate
from exactlearn.oracle import Recorder, resolve_field
from exactlearn.pipeline.analysis import ask_and_analyse
from exactlearn.pipeline.plan import head_bound
from exactlearn.algebra.linalg import SingularMatrix
from exactlearn.fields.rational import QQ
from exactlearn.pipeline.plan import paper_plan
from exactlearn.transformer_model import (OneLayerTransformer, TransformerEvaluator, require_ordered,
                                          sign)
from exactlearn.algebra.rationals import mpf_to_mpq, simplest_rational
from exactlearn.errors import LearningFailure, TransformerFailure

CONDITIONS = [
    "C1: every neuron that matters has beta_j = sum_h O_h^T b_j != 0 (single tokens switch it)",
    "C2: no two neurons have parallel beta unless their (O_h^T b_j)_h are parallel too (positively: "
    "merged; negatively: a linear term, written as two neurons)",
    "C3: margin: in each cone crossed by the path, final tokens M*c + delta with |M*c| <= 64*24 "
    "dominate the query directions in [-2,2]^d (no neuron changes sign along a query family)",
    "C4: generic draws: distinct rho per head and nonzero c-values in each cone plan; the path "
    "avoids intersections of two hyperplanes (redrawn when detected)",
    "C5: visibility: each head read by a neuron is visible in a cone next to that neuron's kink "
    "(implied by C1)",
    "C6: ordered field (rational exact, real within tolerance); at most H distinct W overall",
]


@dataclass
class TransformerLearnResult:
    """What :func:`learn_transformer` returns; ``status`` is "certified" or "failed"."""

    status: str
    model: OneLayerTransformer | None
    error: str | None
    d: int
    heads_bound: int
    field: Field
    queries: int                     # every query the black box answered (learning + certificate)
    max_length: int                  # the longest of them all
    attempts: int = 1
    learning_queries: int = 0        # kink search and cone plans, over all attempts
    learning_max_length: int = 0
    certificate_queries: int = 0     # fresh queries actually asked by the certificate
    certificate_max_length: int = 0
    learner_seconds: float = 0.0
    oracle_seconds: float = 0.0
    cones: list = dc_field(default_factory=list)
    kinks: int = 0
    observations: int = 0
    fresh_queries: list = dc_field(default_factory=list)
    fresh_kinds: dict = dc_field(default_factory=dict)
    certificate_ran: bool = False

    @property
    def certified(self) -> bool:
        return self.status == "certified"

    @property
    def heads(self) -> tuple:
        return self.model.heads if self.model is not None else ()

    def to_json(self) -> dict:
        K = self.field
        fmt = K.format
        model = self.model.to_json(fmt) if self.model is not None else None
        return {
            "status": self.status,
            "field": K.name,
            "d": self.d,
            "heads_bound": self.heads_bound,
            "canonical_heads": len(self.heads),
            "queries": self.queries,
            "max_length": self.max_length,
            "learning_queries": self.learning_queries,
            "learning_max_length": self.learning_max_length,
            "certificate_queries": self.certificate_queries,
            "certificate_max_length": self.certificate_max_length,
            "heads": model["heads"] if model else [],
            "error": self.error,
            "learner_seconds": round(self.learner_seconds, 6),
            "oracle_seconds": round(self.oracle_seconds, 6),
            "format": "exactlearn.transformer/1",
            "model": model,
            "neurons": self.model.r if self.model is not None else 0,
            "attempts": self.attempts,
            "kinks": self.kinks,
            "cones": self.cones,
            "field_info": K.describe(),
            "conditions": CONDITIONS,
            "certificate": {
                "observations": self.observations,
                "fresh_queries": len(self.fresh_queries),
                "fresh_kinds": self.fresh_kinds,
                "agreed": self.certified if self.certificate_ran else None,
                "queries": [[[fmt(a) for a in t] for t in q] for q in self.fresh_queries],
            },
        }


# ------------------------------------------------------------------ small exact helpers
def _to_mpq(K, x) -> mpq:
    """A param-domain value as an exact rational (the dyadic value of an mpf)."""
    if K.is_exact:
        return as_mpq(x)
    return mpf_to_mpq(x)


def _primitive(v) -> tuple:
    """The primitive integer vector with the direction of a nonzero rational vector."""
    v = [as_mpq(a) for a in v]
    L = 1
    for a in v:
        L = L * int(a.denominator) // math.gcd(L, int(a.denominator))
    ints = [int(a * L) for a in v]
    g = 0
    for a in ints:
        g = math.gcd(g, a)
    if g == 0:
        raise TransformerFailure("a path point is the zero vector")
    return tuple(a // g for a in ints)


class _Line:
    """The linear piece g(s) = g0 + slope (s - s0) of the single-token output."""

    def __init__(self, s0, g0, slope):
        self.s0, self.g0, self.slope = s0, g0, slope

    def at(self, s, K):
        return self.g0 + self.slope * K(s - self.s0)


class _Path:
    """x(t) = A + t (P - A) on [0, 1], P + (t - 1)(-A - P) on [1, 2]; single-token outputs."""

    def __init__(self, A, P, ask, K):
        self.A, self.P, self.ask, self.K = A, P, ask, K
        self.samples: dict = {}          # t -> g(t)

    def x(self, t):
        K = self.K
        if t <= 1:
            return tuple(K(a) + K(t) * K(p - a) for a, p in zip(self.A, self.P))
        return tuple(K(p) + K(t - 1) * K(-a - p) for a, p in zip(self.A, self.P))

    def value(self, x):
        """T of the single token x (integer tokens only over exact fields)."""
        K = self.K
        if K.is_exact:                         # integer token: T(x) = T(L x) / L (no biases)
            L = 1
            for a in x:
                L = L * int(a.denominator) // math.gcd(L, int(a.denominator))
            return self.ask([tuple(int(a * L) for a in x)]) / K(L)
        return self.ask([x])

    def g(self, t):
        got = self.samples.get(t)
        if got is None:
            if len(self.samples) > 400:
                raise TransformerFailure("kink search exceeded its query budget (400 single tokens)")
            got = self.samples[t] = self.value(self.x(t))
        return got

    def off_hyperplanes(self, point, direction) -> bool:
        """Is T linear on single tokens near ``point`` along ``direction`` (5 collinear
        samples for some small step)?  False when a hyperplane passes through it."""
        K = self.K
        h = K(1) / 64
        for _ in range(5):
            ys = [self.value(tuple(K(p) + K(j) * h * K(q) for p, q in zip(point, direction)))
                  for j in range(-2, 3)]
            if all(K.eq(ys[j + 1] - ys[j], ys[1] - ys[0]) for j in range(1, 4)):
                return True
            h = h / 8
        return False


def _line(path, pts):
    """The line through three samples if they are collinear, else None."""
    K = path.K
    (s0, s1, s2) = pts
    g0, g1, g2 = path.g(s0), path.g(s1), path.g(s2)
    m01 = (g1 - g0) / K(s1 - s0)
    m12 = (g2 - g1) / K(s2 - s1)
    return _Line(s0, g0, m01) if K.eq(m01, m12) else None


def _line_near(path, s, side, width):
    """The linear piece just right (side=+1) / left (-1) of s, or around s (side=0)."""
    h = width / 64
    for _ in range(6):
        pts = {1: (s, s + h, s + 2 * h), -1: (s - 2 * h, s - h, s), 0: (s - h, s, s + h)}[side]
        ln = _line(path, pts)
        if ln is not None:
            return ln
        h = h / 8
    raise TransformerFailure(f"no linear piece near path parameter {path.K.format(s)} "
                             f"(kinks too close together, or the path meets two hyperplanes at once)")


def _same_line(K, L1, L2, s) -> bool:
    return K.eq(L1.slope, L2.slope) and K.eq(L1.at(s, K), L2.at(s, K))


def _pieces_at(path, s, a, b, La, Lb) -> bool:
    """Is g exactly La just left of s and Lb just right of it?

    Three samples on each side at distances eps, 2 eps, 3 eps with a tiny eps
    (2^-30 of the interval), s itself excluded: two kinks whose outer pieces
    happen to meet at s are rejected unless both lie within 3 eps of s.
    """
    K = path.K
    eps = K(b - a) / K(2 ** 30)
    left = _line(path, (s - 3 * eps, s - 2 * eps, s - eps))
    right = _line(path, (s + eps, s + 2 * eps, s + 3 * eps))
    return (left is not None and right is not None
            and _same_line(K, left, La, s) and _same_line(K, right, Lb, s))


def _kinks(path, lo, hi) -> list:
    """Exact kink parameters of the single-token output on the segment [lo, hi] (SPEC §7.3)."""
    K = path.K
    found = []

    def search(a, b, La, Lb, depth):
        if depth > 40:
            raise TransformerFailure("kink search did not terminate (more than 2^40 pieces?)")
        same_slope = K.eq(La.slope, Lb.slope)
        if same_slope and K.eq(La.at(b, K), Lb.at(b, K)):
            m = (a + b) / 2
            if K.eq(path.g(m), La.at(m, K)):
                return
        elif not same_slope:
            s = (Lb.g0 - La.g0 + La.slope * K(La.s0) - Lb.slope * K(Lb.s0)) / (La.slope - Lb.slope)
            if a < s < b and K.eq(path.g(s), La.at(s, K)) and _pieces_at(path, s, a, b, La, Lb):
                found.append(s)
                return
        for frac in (mpq(1, 2), mpq(3, 7), mpq(4, 7), mpq(2, 5), mpq(3, 5)):
            m = a + (b - a) * K(frac)
            try:
                Lm = _line_near(path, m, 0, (b - a) / 4)
            except TransformerFailure:
                continue
            break
        else:
            raise TransformerFailure("no kink-free split point in a path interval")
        search(a, m, La, Lm, depth + 1)
        search(m, b, Lm, Lb, depth + 1)

    width = K(hi - lo)
    search(K(lo), K(hi), _line_near(path, K(lo), 1, width), _line_near(path, K(hi), -1, width), 0)
    return sorted(found)


# ------------------------------------------------------------------ one cone
E_RANGE = 2
"""Entries of the query directions e_j (and of the perturbations delta_i) lie in [-2, 2]."""


def _draw_directions(d, rng) -> tuple:
    """Invertible E with nonzero entries in [-E_RANGE, E_RANGE] whose within-group sums
    e_1 + e_j have no zero entry either: a zero entry would make e^T (W_h - W_g) x or
    w_h . e vanish whenever those have a zero coordinate, which small integer models
    often do (a wider range makes such coincidences rarer but needs a larger M)."""
    vals = [v for v in range(-E_RANGE, E_RANGE + 1) if v]
    for _ in range(1000):
        E = tuple(tuple(rng.choice(vals) for _ in range(d)) for _ in range(d))
        if any(a + b == 0 for e in E[1:] for a, b in zip(E[0], e)):
            continue
        if linalg.is_invertible([[mpq(e[r]) for e in E] for r in range(d)], QQ):
            return E
    raise TransformerFailure("cannot draw invertible query directions")


def _learn_cone(rec, K, c, H, rng, target, draws, info):
    """Heads (W_h, w_h^S) of the cone of direction c (primitive integer vector), certified."""
    d = len(c)
    norm = max(abs(a) for a in c)
    last = None
    for attempt in range(draws):
        M = -(-target * 2 ** max(0, attempt - 1) // norm)   # two draws at the first scale
        for _ in range(100):
            X = tuple(tuple(M * a + rng.randint(-E_RANGE, E_RANGE) for a in c) for _ in range(d))
            if linalg.is_invertible([[K(col[r]) for col in X] for r in range(d)], K):
                break
        else:
            raise TransformerFailure(f"cannot draw invertible final tokens near direction {list(c)}")
        E = _draw_directions(d, rng)
        if not K.is_exact:                    # real field: scores of order one, same ratio e/x
            lam = mpq(1, math.isqrt(4 * d * M * norm) + 1)
            X = tuple(tuple(lam * a for a in col) for col in X)
            E = tuple(tuple(lam * a for a in col) for col in E)
        plan = paper_plan(X, E, H)
        start = len(rec.observations)
        q0 = rec.queries
        try:
            heads = ask_and_analyse(plan, rec, K, None)
            asked = {plan.configs[0].x}
            for cfg in plan.configs:         # k = 0 at every distinct final token
                if cfg.x not in asked:
                    asked.add(cfg.x)
                    rec([cfg.x])
            # ... and at the centre itself: the plan's final tokens lie in c's cone
            rec([c if K.is_exact else tuple(mpq(a, norm) for a in c)])
            certify(heads, d, rec.observations[start:], K)
            info.append({"direction": [int(a) for a in c], "M": int(M), "draws": attempt + 1,
                         "queries": rec.queries - q0, "visible_heads": len(heads)})
            return heads
        except ExactnessError as exc:
            last = exc
            break
        except TransformerFailure:
            raise
        except (LearningFailure, FieldError) as exc:
            last = exc
    raise TransformerFailure(f"cone of direction {list(c)}: no consistent plan in {attempt + 1} "
                             f"draw(s) up to M = {M} (margin condition C3, degenerate draws C4, or more "
                             f"heads than the bound {H}): "
                             f"{type(last).__name__}: {last}")


# ------------------------------------------------------------------ the learner
def learn_transformer(oracle, d: int, heads: int | None = None, max_heads: int | None = None,
                      field: Field | None = None, seed=None, fresh: int = 200, retries: int = 2,
                      cone_draws: int = 8, target: int = 24) -> TransformerLearnResult:
    """Learn a Transformer functionally equivalent to the black box ``oracle`` (module doc).

    ``heads``/``max_heads`` bound the number of distinct W (per cone plan and
    overall).  ``retries`` redraws the path after a detected failure (queries
    keep counting; ``attempts`` reports how many paths were used);
    ``cone_draws`` is the number of draws per cone (M doubles from the third
    on, starting at ``|M c| ~ target``).  ``fresh`` random queries plus 10
    boundary queries per recovered neuron form the certificate.  ``queries``
    and ``max_length`` count every query the black box answered, the
    certificate's included; ``learning_queries`` / ``certificate_queries``
    (and their ``*_max_length``) split them.
    """
    t_start = time.perf_counter()
    H = head_bound(d, heads, max_heads)
    K, convert = resolve_field(oracle, field)
    require_ordered(K)
    rng = random.Random(seed)
    rec = Recorder(oracle, K, convert)
    error, model, attempts, info, n_kinks = None, None, 0, [], 0
    while attempts <= retries:
        attempts += 1
        info = []
        try:
            if d < 2:
                raise TransformerFailure("d = 1 is not supported: the kink path needs a plane (d >= 2)")
            model, n_kinks = _attempt(rec, K, d, H, rng, cone_draws, target, info)
            bad = _reproduces(model, rec.observations, K)
            if bad is not None:           # costs no query: a new path may avoid the cause
                raise TransformerFailure(
                    f"the assembled model does not reproduce an observed output of length "
                    f"{len(bad)} (two neurons switching at one point of the path, C4, or C1/C2)")
            error = None
            break
        except TransformerFailure as exc:
            error = str(exc)
        except (LearningFailure, FieldError) as exc:
            error = f"{type(exc).__name__}: {exc}"
    res = TransformerLearnResult("failed", None, error, d, H, K, rec.queries, rec.max_length,
                                 attempts=attempts, cones=info, kinks=n_kinks,
                                 learning_queries=rec.queries, learning_max_length=rec.max_length)
    if error is None:
        res.observations = len(rec.observations)
        ok, why, queries, kinds = _certificate(model, rec, K, rng, fresh)
        res.certificate_ran = True
        res.fresh_queries, res.fresh_kinds = queries, kinds
        res.certificate_queries = rec.queries - res.learning_queries
        res.certificate_max_length = max((len(q) for q in queries), default=0)
        if ok:
            res.status, res.model = "certified", model
        else:
            res.error = f"certificate failed: {why}"
    res.queries, res.max_length = rec.queries, rec.max_length     # every answered query
    total = time.perf_counter() - t_start
    res.oracle_seconds = rec.seconds
    res.learner_seconds = max(0.0, total - res.oracle_seconds)
    return res


def _attempt(rec, K, d, H, rng, cone_draws, target, info):
    # 1. a path A -> P -> -A through the half-plane of directions; neither A (nor so -A)
    #    nor the corner P may lie on a hyperplane (a kink there would be invisible)
    for _ in range(20):
        A = tuple(rng.randint(-6, 6) for _ in range(d))
        P = tuple(rng.randint(-6, 6) for _ in range(d))
        if not any(A[i] * P[j] != A[j] * P[i] for i in range(d) for j in range(d)):
            continue
        path = _Path(A, P, rec, K)
        step = tuple(p - a for a, p in zip(A, P))
        if path.off_hyperplanes(A, step) and path.off_hyperplanes(P, step):
            break
    else:
        raise TransformerFailure("no path whose end points avoid the neuron hyperplanes in 20 draws")
    # 2. kinks on both segments, as parameters t in (0, 2)
    ts = _kinks(path, 0, 1)
    ts += [t for t in _kinks(path, 1, 2)]
    if any(K.eq(K(t), K(1)) for t in ts):
        raise TransformerFailure("a kink at the path's corner P")
    bounds = [K(0)] + ts + [K(2)]
    # 3. one certified cone plan per piece, at a simple point of its middle third
    centres, cone_heads = [], []
    for lo, hi in zip(bounds, bounds[1:]):
        qlo, qhi = _to_mpq(K, lo), _to_mpq(K, hi)
        t = simplest_rational(qlo + (qhi - qlo) / 3, qhi - (qhi - qlo) / 3)
        x = tuple(as_mpq(a) + t * (p - a) for a, p in zip(A, P)) if t <= 1 else \
            tuple(p + (t - 1) * (-a - p) for a, p in zip(A, P))
        c = _primitive(x)
        centres.append(c)
        cone_heads.append(_learn_cone(rec, K, c, H, rng, target, cone_draws, info))
    # 4. the distinct W over all cones, and each cone's values w^S per head
    Ws = []
    for hs in cone_heads:
        for h in hs:
            if not any(_same_matrix(K, h.W, W) for W in Ws):
                Ws.append(h.W)
    if len(Ws) > H:
        raise TransformerFailure(f"{len(Ws)} distinct W over the cones exceed the head bound {H} "
                                 "(black box outside the model class)")
    G = len(Ws)

    def wvec(hs):
        out = [K.zero] * (G * d)
        for h in hs:
            g = next(i for i, W in enumerate(Ws) if _same_matrix(K, h.W, W))
            for c in range(d):
                out[g * d + c] = K(h.v[c])
        return out

    w = [wvec(hs) for hs in cone_heads]

    def beta(vec):                            # sum over heads: the single-token linear map
        return [sum((vec[g * d + c] for g in range(G)), K.zero) for c in range(d)]

    def dot(u, x):
        return sum((a * K(b) for a, b in zip(u, x)), K.zero)

    # checks: every sampled single-token output lies on its cone's linear map
    for t, y in path.samples.items():
        k = sum(1 for b in ts if b < t)
        cones = [k] + ([k + 1] if any(b == t for b in ts) else [])
        for n in cones:
            if not K.eq(dot(beta(w[n]), path.x(t)), y):
                raise TransformerFailure("a single-token output is off its cone's linear map "
                                         "(an undetected kink, or a neuron with beta = 0 (C1))")
    # 5. the jump across each kink is one neuron, on its hyperplane
    deltas = []
    for k, t in enumerate(ts):
        delta = [a - b for a, b in zip(w[k + 1], w[k])]
        if all(K.is_zero(a) for a in delta):
            raise TransformerFailure("a kink with no change of the cone values")
        if not K.is_zero(dot(beta(delta), path.x(t))):
            raise TransformerFailure("a kink off the hyperplane of its neuron (two neurons at once? C2)")
        deltas.append(delta)
    # 6. which kinks switch a neuron off (sum over Off of Delta_k = -w^{first}), and the
    #    linear term L.y left over when no subset fits (see _orientations), written as
    #    L.y = ReLU(L.y) - ReLU(-L.y)
    off, linear = _orientations(K, deltas, w[0])
    neurons, u = [], []
    for k, delta in enumerate(deltas):
        U = [-a for a in delta] if k in off else delta
        active = centres[k] if k in off else centres[k + 1]
        s = sign(K, dot(beta(U), active))
        if not s:
            raise TransformerFailure("cannot decide on which side of its hyperplane a neuron is active")
        neurons.append([a * s for a in U])
        u.append(K(s))
    if not all(K.is_zero(a) for a in linear):
        neurons += [linear, [-a for a in linear]]
        u += [K.one, -K.one]
    neurons, u = _merge_parallel(K, neurons, u)
    return _build(K, d, Ws, neurons, u), len(ts)


def _same_matrix(K, A, B) -> bool:
    return all(K.eq(K(a), K(b)) for ra, rb in zip(A, B) for a, b in zip(ra, rb))


def _orientations(K, deltas, w0):
    """Which kinks switch a neuron off, and the linear term left over.

    ``L = w0 + sum_{k in Off} Delta_k`` is what the kink neurons leave of the
    first cone's values.  Preferred: L = 0 (the usual case); else L parallel to
    one Delta_k (two neurons on that hyperplane with opposite gammas:
    ``a ReLU(z) + b ReLU(-z) = (a + b) ReLU(z) - b z``); else Off empty and
    L = w0 (e.g. an opposite pair whose kinks cancel leaves a pure linear term).
    Every choice is the same function *if* each kink is one neuron or a group of
    neurons with parallel gammas (C2); when it is not, the certificate fails.
    """
    n = len(deltas)
    if n > 16:
        raise TransformerFailure(f"{n} kinks: too many neurons for the sign resolution")
    fallback = None
    for mask in range(1 << n):
        L = list(w0)
        for k in range(n):
            if mask >> k & 1:
                L = [a + b for a, b in zip(L, deltas[k])]
        off = {k for k in range(n) if mask >> k & 1}
        if all(K.is_zero(a) for a in L):
            return off, L
        if fallback is None and any(_parallel(K, L, dl) for dl in deltas):
            fallback = (off, L)
    return fallback if fallback is not None else (set(), list(w0))


def _parallel(K, a, b) -> bool:
    """a = lambda b for some scalar lambda (b nonzero)."""
    i = next((i for i, x in enumerate(b) if not K.is_zero(x)), None)
    if i is None:
        return False
    lam = a[i] / b[i]
    return all(K.eq(x, lam * y) for x, y in zip(a, b))


def _merge_parallel(K, neurons, u):
    """Merge neurons with positively parallel gammas: s1 ReLU(G) + s2 ReLU(c G) = (s1 + c s2) ReLU(G)."""
    out_n, out_u = [], []
    for n, s in zip(neurons, u):
        for idx, m in enumerate(out_n):
            if _parallel(K, n, m):
                i = next(i for i, x in enumerate(m) if not K.is_zero(x))
                c = n[i] / m[i]
                if sign(K, c) == 1:
                    out_u[idx] = out_u[idx] + c * s
                    break
        else:
            out_n.append(list(n))
            out_u.append(s)
    keep = [(n, s) for n, s in zip(out_n, out_u) if not K.is_zero(s)]
    return [n for n, _ in keep], [s for _, s in keep]


def _build(K, d, Ws, neurons, u) -> OneLayerTransformer:
    """Heads (W_g, O_g) and FFN (B, u) with O_g^T b_j = neuron j's block g.

    Exact fields: a rank factorisation ``N = B R`` of the neuron matrix N (rows
    ``(gamma'_{j1}, ..., gamma'_{jG})``), R its reduced row echelon form, so m is
    the rank of N.  Real field: one hidden unit per neuron (B = identity, no
    rank decision); the weights are stored as the exact dyadic values of the mpfs.
    """
    rows = [[_to_mpq(K, a) for a in n] for n in neurons]
    if K.is_exact:
        R, pivots = _rref(QQ, rows)
        B = [[row[p] for p in pivots] for row in rows]
    else:
        R = rows
        B = [[mpq(int(i == j)) for i in range(len(rows))] for j in range(len(rows))]
    if not R:                                 # no neuron: T = 0
        return OneLayerTransformer([], [], [], d=d, m=1)
    heads = [([[_to_mpq(K, a) for a in row] for row in W],
              [[r[g * d + c] for c in range(d)] for r in R]) for g, W in enumerate(Ws)]
    return OneLayerTransformer(heads, B, [_to_mpq(K, a) for a in u], d=d, m=len(R))


def _rref(K, rows):
    """Nonzero rows of the reduced row echelon form and their pivot columns (exact fields)."""
    M = [list(r) for r in rows]
    n = len(M[0]) if M else 0
    pivots, r = [], 0
    for col in range(n):
        piv = next((i for i in range(r, len(M)) if not K.is_zero(M[i][col])), None)
        if piv is None:
            continue
        M[r], M[piv] = M[piv], M[r]
        inv = K.one / M[r][col]
        M[r] = [a * inv for a in M[r]]
        for i in range(len(M)):
            if i != r and not K.is_zero(M[i][col]):
                f = M[i][col]
                M[i] = [a - f * b for a, b in zip(M[i], M[r])]
        pivots.append(col)
        r += 1
    return M[:r], pivots


# ------------------------------------------------------------------ the certificate
def hyperplane_point(beta, rng) -> tuple:
    """A small nonzero integer point z with beta . z = 0 (beta exact rational, nonzero)."""
    n = _primitive(beta)
    d = len(n)
    basis = [tuple((n[j] if k == i else -n[i] if k == j else 0) for k in range(d))
             for i in range(d) for j in range(i + 1, d)]
    basis = [b for b in basis if any(b)]
    for _ in range(50):
        z = [sum(rng.randint(-2, 2) * b[k] for b in basis) for k in range(d)]
        if any(z):
            return _primitive(z)
    return _primitive(basis[0])


def _reproduces(model, observations, K):
    """None if the model reproduces every (tokens, value), else the first failing tokens."""
    ev = TransformerEvaluator(model, K)
    for tokens, y in observations:
        if not K.eq(ev(tokens), y):
            return tokens
    return None


def _certificate(model, rec, K, rng, n_random):
    """Observed outputs, then fresh random and ReLU-boundary queries (module doc, step 6).

    The fresh queries go through ``rec``, so they are counted (and timed) with
    the learning ones.  Returns ``(ok, why, asked, kinds)``: ``asked`` the fresh
    queries actually asked, in order (a prefix of the drawn ones when one
    disagrees), ``kinds`` how many of them are random / boundary queries.
    """
    ev = TransformerEvaluator(model, K)
    if _reproduces(model, rec.observations, K) is not None:
        return False, "an observed output is not reproduced", [], {"random": 0, "boundary": 0}
    d = model.d
    exact = K.is_exact
    R = 5

    def tok(lo=-R, hi=R):
        t = tuple(rng.randint(lo, hi) for _ in range(d))
        return t if exact else tuple(mpq(a, 4) for a in t)

    queries = [[tok() for _ in range(rng.randint(1, 6))] for _ in range(n_random)]
    wmax = max((abs(a) for W, _ in model.heads for row in W for a in row), default=mpq(0))
    for b in model.B:                          # each recovered neuron's hyperplane
        gam = [sum((O[k][c] * b[k] for _, O in model.heads for k in range(model.m)), mpq(0))
               for c in range(d)]
        if not any(gam):
            continue
        if exact:
            z = hyperplane_point(gam, rng)
            zmax = max(abs(a) for a in z) + 1
        else:                                  # real: a point of size ~1 on the hyperplane
            g = [K(a) for a in gam]
            z = [K.zero] * d
            for i in range(d):
                for j in range(i + 1, d):
                    c = K(rng.choice((-2, -1, 1, 2)))
                    z[i], z[j] = z[i] + c * g[j], z[j] - c * g[i]
            big = max(abs(a) for a in z)
            z = tuple(a / big for a in z)
        for _ in range(3):
            v = tok(-1, 1)
            queries += [[z], [tuple(a + e for a, e in zip(z, v))], [tuple(a - e for a, e in zip(z, v))]]
        if exact and K.D * wmax * d * d * zmax * (zmax + R) > 100_000:
            continue                           # scores too large for exact 2^s: single tokens only
        for _ in range(7):
            final = z if rng.random() < 0.6 else tuple(a + e for a, e in zip(z, tok(-1, 1)))
            queries.append([tok() for _ in range(rng.randint(1, 5))] + [final])

    def asked(n):                              # the first n fresh queries, by kind
        return queries[:n], {"random": min(n, n_random), "boundary": max(0, n - n_random)}

    for n, q in enumerate(queries):
        try:
            y = rec(q)
        except FieldError as exc:                # not answered
            return (False, f"a fresh query could not be answered: {exc}", *asked(n))
        except Degenerate as exc:                # answered, with a value outside K
            return (False, str(exc), *asked(n + 1))
        if not K.eq(ev(q), y):
            return (False, f"a fresh query of length {len(q)} disagrees with the recovered model",
                    *asked(n + 1))
    return (True, None, *asked(len(queries)))
