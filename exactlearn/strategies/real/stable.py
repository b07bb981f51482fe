"""The stable plan: learning a finite-precision black box (a float64 or float32 attention
layer) over the real field (docs "The real field", "The stable plan for float black
boxes"; the approximate-oracle conditions of arXiv:2608.03294).

The paper's plan samples each family at ``k = 0 .. 2H``: exact for exact oracles, but at
float64 accuracy its interpolation loses the poles from H = 3 on, and every family must
resolve.  The stable plan keeps the paper's 2d^2 - 1 configurations and changes how each
is sampled, labelled and solved:

1. **Tokens** (:func:`dyadic_basis`): X and E are the Cayley-orthogonal matrices of the
   draw rounded to the dyadic grid ``2^-20`` and scaled by ``sigma``, a power of two or 3/2
   of one: every token entry has at most 23 significant bits, exactly a float32 and a
   float64, so a float box evaluates the very query the learner analyses.  The solve uses
   the exact inverses of the (nearly orthogonal) X and E.
2. **Scale** (:mod:`~exactlearn.strategies.real.stable_probe`): ``sigma^2`` brings the rms
   of ``log rho`` of a probe to about 3.
3. **Families** (:mod:`~exactlearn.strategies.real.ratio`): ``t = k/m`` geometric on
   ``[1/256, 256]`` plus the single tokens ``(x)`` and ``(a)``, weighted least squares,
   residuals checked.  A family that does not resolve (fit fails, or a relative
   first-order bound above ``LINEAR_LIMIT``) is asked again scaled by 1/2, 2, 1/4, 4; one
   that still does not is left out (more than ``MAX_UNRESOLVED`` of them fail the run).
4. **Labelling** (:mod:`~exactlearn.strategies.real.labels`): ties both ways and predicted
   c-values; entries left undetermined or weakly determined get supplementary families
   ``(x_i, e_j - e_k)`` (:func:`_supplement`).
3b. **The pencil start** (:mod:`~exactlearn.strategies.real.stable_pencil`): when the probe
   or too many families fail with ``H`` given (``H >= PENCIL_MIN_HEADS``: many heads whose
   exponents crowd in every family, e.g. twelve MiniLM heads in d' = 8), the heads are read
   off a matrix pencil per final token instead, the configurations are asked at
   ``PENCIL_SCALES`` times the ``sigma`` their exponents suggest, and the polish
   (Levenberg--Marquardt first) must fit every observation; nothing is certified without it.
5. **Solve** (:mod:`~exactlearn.strategies.real.stable_solve`), **polish**
   (:mod:`~exactlearn.strategies.real.stable_polish`: every head fitted to every observation
   at once, kept when its bound is smaller; its residuals also test the declared noise) and
   **certificate**
   (:mod:`~exactlearn.strategies.real.stable_certificate`): every observation is
   recomputed from the heads within ``eta + eta_rel |y|`` plus the effect of the parameter
   bounds; each entry's bound is ``SAFETY = 2`` times its first-order bound plus rounding.

**Coarse boxes** (a declared eta above ``COARSE = 2^-32`` of the outputs: float32, or
noisier).  A float32 box rounds each token's scores once, to about ``2^-24 |s|``, and every
query of a family repeats the same two tokens: that rounding moves the family's ``log rho``
and ``c`` (the fit absorbs it) but scatters no residual, while the eta that must cover every
observation at once (the polish, the certificate) has to include it -- for the layers of
tests/float_layers.py about a hundred times what the family's residuals show.  So a coarse
family whose bounds exceed LINEAR_LIMIT is given bounds at ``kappa`` times its eta, ``kappa``
``SCATTER_MARGIN = 4`` times the rms of its weighted residuals per degree of freedom
(:func:`_scatter_fit`; the estimate is unchanged), and labels within ``COARSE_LINEAR_LIMIT``.
Those bounds only label and start; when a labelled family's bound at the declared eta exceeds
LINEAR_LIMIT the solve's bounds are not used, and only the polish of every observation at
the declared eta can certify (else the run fails).  A failure of too many families says how
coarse the eta is and whether its families missed a sample (the box noisier than declared)
or could not resolve H heads at that precision (:func:`_precision_failure`); each fit may
take COARSE_EVALUATIONS; the labelling passes undecided c-values over (``equal_only`` of
:func:`~exactlearn.strategies.real.labels.label_families`); the fits stop once more than
COARSE_MAX_UNRESOLVED have failed, and the pencil start is not tried (its
extrapolation in 1/m cannot separate heads at float32 precision).  The supplement
(:func:`_supplement`) also asks ``(x_i, e_j + e_k)`` and ``(x_i + x_k, e_j)`` (every family at
one final token along e_j can crowd), and a direction whose every basis family failed gets
its c-values from a pair of its families (:func:`_blind_directions`).  Boxes declared at float64
rounding run exactly as before.

Query count: ``(2d^2 - 1) n_t + (2d^2 - 1) + (2d - 1)`` (:func:`stable_count`, ``n_t``
the finite nodes), plus the probe, rescues and supplementary families, all counted; the
pencil start adds about ``(d + 1) (d + 1) (2H + 2)(2H + 3) / 2 * 5`` queries of up to 1025 tokens.

**Biases** (``bias=True``, docs/explanation/biases.md, "Over the real field"): the scores gain
``u_h^T x_i`` and the output a constant c.  The ratio families keep their form, with
``log rho = e^T (W x + u)`` and ``A = c + V.a``.  The plan (:func:`stable_bias_plan`) takes
d + 1 final tokens x_0..x_d (:func:`bias_tokens`: the vertices of a regular simplex centred
at 0, on the grid ``2^-19``) and the d directions: ``(d + 1) d`` basis, ``(d + 1)(d - 1)``
within and d across families ``((x_0 + x_i)/2, e_j(i))`` (the midpoint: its rho squared is
the product of ``(x_0, e_j)``'s and ``(x_i, e_j)``'s), ``2d^2 + 2d - 1`` configurations.  The
solve recovers ``[W | u]`` and v per head and c from the families' limits
(:func:`~exactlearn.strategies.real.stable_solve.solve_bias_heads`); the polish fits u and c
with the rest; the certificate recomputes every observation with u and c and their bounds.
``log rho`` is not homogeneous in a family's scale with u, so a family asked at another scale
(a rescue) enters the solve with its own row, and the labelling's ties only with families at
its scale (:func:`~exactlearn.strategies.real.labels.label_families`).  Count:
:func:`stable_count` with ``bias`` (``2d + 1`` distinct final tokens).  The pencil start
(step 3b) reads ``[W | u]`` off ``d + 1`` final tokens and c off the query ``(x_0)``.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
from gmpy2 import mpq

from exactlearn.errors import (DegenerateDraw, InterpolationError, LearningFailure, MatchError,
                               NoisierThanDeclared, ResidualsBeyondNoise, SingularMatrix)
from exactlearn.fields.rational import QQ
from exactlearn.model import Head, HeadSet
from exactlearn.algebra.linalg import is_invertible
from exactlearn.noise import noise_bound
from exactlearn.pipeline.match import WithinBounds
from exactlearn.pipeline.plan import (Config, Plan, across_direction, final_token_configs,
                                      paper_plan)
from exactlearn.progress import current
from exactlearn.strategies.real.analysis import EQUAL_FACTOR
from exactlearn.strategies.real.certificate import (SAFETY, SECOND_ORDER, RealOutcome,
                                                    residual_bounds)
from exactlearn.strategies.real.labels import (directions, known_part, label_by_c, label_by_c_pair,
                                              label_families, references)
from exactlearn.strategies.real.probe import cayley
from exactlearn.strategies.real.lsq import box_blas_threads
from exactlearn.strategies.real.ratio import (COARSE_EVALUATIONS, LSQ_EVALUATIONS, MAX_COPIES,
                                              dyadic, family_tokens, fit_ratio_family, node_t,
                                              ratio_nodes)
from exactlearn.strategies.real.sensitivity import LO, rounding
from exactlearn.strategies.real.stable_certificate import certify_two_token
from exactlearn.strategies.real.stable_pencil import pencil_heads
from exactlearn.strategies.real.evaluate import evaluate_with_gradient
from exactlearn.strategies.real.stable_polish import (Weak, hat, minimax_bound, polish,
                                                     split_gain)
from exactlearn.strategies.real.stable_probe import TARGET, ask_family, probe_scale, sigma_for
from exactlearn.strategies.real.stable_solve import (bias_frame, rows_bias, rows_of,
                                                     solve_bias_heads, solve_stable_heads,
                                                     undetermined, weak_entries)

#: first-order validity: a family's relative bounds at most this (second-order terms are
#: then below 1e-2 of the first-order ones, inside the certificate's SAFETY factor 2)
LINEAR_LIMIT = 1e-2
#: matching: equal within EQUAL_FACTOR (10) first-order bounds, unequal beyond this many
UNEQUAL_FACTOR = 10 ** 2
#: the run fails when more than this share of the configurations cannot be resolved
MAX_UNRESOLVED = 0.25
#: the same for a coarse box (module doc): its families only label and start the polish, which
#: alone certifies; four float32 heads left 26 % to 30 % unresolved (d = 4, 8), the rest labelled
COARSE_MAX_UNRESOLVED = 0.5
ROOTS_TRIED = 4          # basis families of x_1 tried as the root of the labelling
SUPPLEMENT_ROUNDS = 5    # rounds of supplementary families for undetermined entries
SUPPLEMENT_PER_ENTRY = 3
PENCIL_MIN_HEADS = 2     # the pencil start (step 3b) when the families fail, from this many heads
PENCIL_SCALES = (mpq(1, 2), mpq(1), mpq(2))   # the plan's families after it, around sigma
#: a box whose declared eta exceeds this times its outputs is coarser than float64 (a float32
#: box declares ~1e-6, a float64 one ~1e-15): its families' bounds follow their scatter
COARSE = 2.0 ** -32
SCATTER_MARGIN = 4       # kappa = this x the rms of the weighted residuals per degree of freedom
SCATTER_MIN = 1e-3       # kappa at least this
#: a coarse box's families only label and start the polish (their solve's bounds are used
#: only within LINEAR_LIMIT at the declared eta): first-order bounds within 10 %
COARSE_LINEAR_LIMIT = 1e-1


def stable_count(d: int, H: int, bias: bool = False) -> int:
    """Queries of the stable plan (probe excluded): every configuration at its finite
    nodes, one ``(a)`` per configuration, one ``(x)`` per distinct final token:
    ``(2d^2 - 1)(n_t + 1) + 2d - 1``, and with ``bias`` ``(2d^2 + 2d - 1)(n_t + 1) + 2d + 1``
    (``n_t = len(ratio_nodes(H)) - 2`` finite nodes, at most ``4H + 4``).

    >>> stable_count(2, 1), stable_count(4, 2), stable_count(2, 1, bias=True)
    (66, 410, 104)
    """
    n_t = len(ratio_nodes(H)) - 2
    if bias:
        configs = 2 * d * d + 2 * d - 1
        return configs * n_t + configs + (2 * d + 1)
    configs = 2 * d * d - 1
    return configs * n_t + configs + (2 * d - 1)


BIAS_GRID = 19           # the plan for biases' final tokens: on 2^-19, so midpoints are on 2^-20


def bias_tokens(Q) -> list:
    """d + 1 final tokens x_0..x_d from d near-orthonormal dyadic columns ``Q``: with
    ``q_0 = beta (q_1 + ... + q_d)``, ``beta = (1 - sqrt(d + 1))/d``, the q's are the vertices
    of a regular simplex; centred at 0 (so that u is an interpolation, not an extrapolation)
    and rounded to the grid ``2^-BIAS_GRID``.  Raises
    :class:`~exactlearn.errors.DegenerateDraw` when they are not affinely independent.

    >>> from gmpy2 import mpq
    >>> pts = bias_tokens([(mpq(1), mpq(0)), (mpq(0), mpq(1))])
    >>> len(pts), [round(float(a), 4) for a in pts[0]]
    (3, [-0.5774, -0.5774])
    """
    d = len(Q)
    beta = (1 - math.sqrt(d + 1)) / d
    s = [sum(float(q[r]) for q in Q) for r in range(d)]
    pts = [[beta * s[r] for r in range(d)]] + [[float(q[r]) for r in range(d)] for q in Q]
    g = [sum(p[r] for p in pts) / (d + 1) for r in range(d)]
    scale = 2 ** BIAS_GRID
    out = [tuple(mpq(int(round((p[r] - g[r]) * scale)), scale) for r in range(d)) for p in pts]
    if not is_invertible([[QQ(p[r]) for p in out] for r in range(d)] + [[QQ(1)] * (d + 1)], QQ):
        raise DegenerateDraw("the d + 1 final tokens of the plan for biases are not affinely "
                             "independent")
    return out


def stable_bias_plan(X, E, H: int):
    """The stable plan for biases (module doc): ``X`` the d + 1 final tokens x_0..x_d, ``E``
    the d directions.

    >>> p = stable_bias_plan([(0, 0), (2, 0), (0, 2)], [(1, 0), (0, 1)], 1)
    >>> len(p.configs), p.configs[-1].kind, [str(a) for a in p.configs[-1].x]
    (11, 'across', ['0', '1'])
    """
    X = tuple(tuple(x) for x in X)
    E = tuple(tuple(e) for e in E)
    d = len(E)
    configs = []
    for i in range(d + 1):
        configs.extend(final_token_configs(i, X[i], E))
    for i in range(1, d + 1):
        j = across_direction(i, d)
        mid = tuple((QQ(a) + QQ(b)) / 2 for a, b in zip(X[0], X[i]))
        configs.append(Config("across", i, j, mid, E[j]))
    return Plan(d, H, X, E, configs, name="stable", bias=True)


def dyadic_basis(cols):
    """The Cayley-orthogonal matrix of ``cols`` (a drawn integer matrix, columns), rounded
    to the grid ``2^-GRID`` (:func:`~exactlearn.strategies.real.ratio.dyadic`): columns of exact
    dyadic rationals."""
    d = len(cols)
    Q = cayley([[cols[j][i] for j in range(d)] for i in range(d)])
    return [dyadic(Q[i][j] for i in range(d)) for j in range(d)]


class _Asker:
    """Asks queries (in batches when the box has ``batch``) once each, keeping indices.  A
    query is known by its runs of equal tokens (:func:`query_key`): the plan's queries are
    a few hundred copies of two tokens, so the key is built and hashed in a few steps.  The
    box runs with the BLAS threads the run started with
    (:func:`~exactlearn.strategies.real.lsq.box_blas_threads`)."""

    def __init__(self, rec):
        self.rec = rec
        self.seen: dict = {}

    def ask(self, queries) -> list:
        """``[(y, observation index)]`` for a list of token lists."""
        keys = [query_key(q) for q in queries]
        new, seen_now = [], set()
        for key, q in zip(keys, queries):
            if key not in self.seen and key not in seen_now:
                seen_now.add(key)
                new.append((key, q))
        if new:
            start = len(self.rec.observations)
            with box_blas_threads():
                ys = self.rec.ask_many([q for _, q in new])
            for n, ((key, _), y) in enumerate(zip(new, ys, strict=True)):
                self.seen[key] = (y, start + n)
        return [self.seen[k] for k in keys]


def query_key(tokens) -> tuple:
    """The query as its runs: ``((token, copies), ...)``, adjacent equal tokens in one run (so
    two queries have the same key exactly when they are the same sequence of tokens).

    >>> query_key([(1, 2), (1, 2), (3, 4), (1, 2)])
    (((1, 2), 2), ((3, 4), 1), ((1, 2), 1))
    """
    runs: list = []
    prev = prev_key = None
    for t in tokens:
        if t is prev:                   # the same object: one more copy (no comparison)
            runs[-1][1] += 1
            continue
        key = tuple(t)
        if runs and key == prev_key:
            runs[-1][1] += 1
        else:
            runs.append([key, 1])
            prev_key = key
        prev = t
    return tuple((key, n) for key, n in runs)


class _Noise:
    """eta_q = eta + eta_rel |y_q| + rounding (floats: bounds need a few digits)."""

    def __init__(self, K, eta, eta_rel):
        self.K, self.eta, self.rel = K, float(eta), float(eta_rel)
        self.unit = float(rounding(K, 1))       # a power of two: unit * size is exact

    def of(self, y, size):
        return self.eta + self.rel * abs(float(y)) + self.unit * float(size)


RESCUE = (mpq(1, 2), mpq(2), mpq(1, 4), mpq(4))   # a family that fails is re-asked scaled
RESCALE = (mpq(1, 2), mpq(2))                      # a weak entry's basis family, again


def _rel_bound(fit, m):
    bl, bc = fit.bounds[1:m + 1], fit.bounds[m + 1:]
    return max([float(b) for b in bl] + [float(b) / max(abs(float(c)), 1e-300)
                                         for b, c in zip(bc, fit.cs)])


def _normalised(fit, f, m):
    """A fit of the family (f x, f e) expressed at scale 1: log rho / f^2, c / f, A / f."""
    scale = np.concatenate([[1 / float(f)], np.full(m, 1 / float(f) ** 2), np.full(m, 1 / float(f))])
    fit.A = fit.A / f
    fit.logs = [x / f ** 2 for x in fit.logs]
    fit.cs = [c / f for c in fit.cs]
    fit.G = fit.G * scale[:, None]
    fit.bounds = fit.bounds * scale
    return fit


def _normalised_c(fit, f, m):
    """With biases: only the c-values of a fit of ``(f x, f e)`` go back to scale 1 (``c / f``);
    ``log rho`` and ``A`` stay as asked (not homogeneous in f; module doc)."""
    scale = np.concatenate([[1.0], np.ones(m), np.full(m, 1 / float(f))])
    fit.cs = [c / f for c in fit.cs]
    fit.G = fit.G * scale[:, None]
    fit.bounds = fit.bounds * scale
    return fit


def _fit_all(plan, K, asker, noise, nodes, m, H):
    """Ask and fit every configuration: ``(fits, ids, rescued, bad, stopped)``; ``ids[n]`` are the
    observation indices of the fit.  A configuration whose fit fails, or whose first-order
    relative bound exceeds LINEAR_LIMIT (poles crowded or beyond the nodes), is asked again
    with x and e scaled by 1/2, 2, 1/4, 4 (exact dyadic tokens) and its fit taken back to
    scale 1 (``log rho`` scales by f^2, ``c`` by f); every query asked stays an observation
    that the certificate must reproduce.  A coarse box (module doc) stops once more than
    COARSE_MAX_UNRESOLVED of the configurations have failed, the run's failure then certain
    (``stopped``: how many were tried; None when all were); ``share``: the share of
    unresolved configurations that fails the run (MAX_UNRESOLVED, or COARSE_MAX_UNRESOLVED)."""
    got = asker.ask([q for c in plan.configs for q in
                     (family_tokens(c.x, c.a, k, mm) for k, mm in nodes)])      # one batch
    ys = [abs(float(y)) for y, _ in got if float(y) != 0]
    coarse = bool(ys) and float(np.median([noise.of(y, 0) / y for y in ys])) > COARSE
    share = COARSE_MAX_UNRESOLVED if coarse else MAX_UNRESOLVED
    fits, ids, rescued, bad = {}, {}, {}, {}
    for n, c in enumerate(plan.configs):
        try:
            fits[n], ids[n], f = _resolve(c, K, asker, noise, nodes, m, H, bias=plan.bias)
        except LearningFailure as exc:
            bad[n] = exc
            last = n + 1 == len(plan.configs)
            if coarse and len(bad) > share * len(plan.configs) and not last:
                return fits, ids, rescued, bad, n + 1, share
            continue
        if f != 1:
            rescued[n] = str(f)
    return fits, ids, rescued, bad, None, share


def _resolve(c, K, asker, noise, nodes, m, H, scales=(mpq(1),) + RESCUE, bias=False):
    """``(fit at scale 1, observation indices, scale asked)`` of one configuration, at the
    first of ``scales`` (1, 1/2, 2, 1/4, 4) whose fit succeeds within LINEAR_LIMIT
    (COARSE_LINEAR_LIMIT for a coarse box, its bounds following its scatter:
    :func:`_scatter_fit`); raises the first failure when none does.  With ``bias`` only the
    c-values go back to scale 1 (:func:`_normalised_c`)."""
    ts = [node_t(k, mm) for k, mm in nodes]
    what = f"configuration {c.kind}{(c.i + 1, c.j + 1)}"
    first = None
    for f in scales:
        ys, etas, ids = ask_family(c, f, asker, noise, nodes, H)
        label = what if f == 1 else f"{what} at scale {f}"
        coarse = _coarse(ys, etas)
        try:
            fit = fit_ratio_family(K, ts, ys, etas, m, what=label,
                                   evaluations=COARSE_EVALUATIONS if coarse else LSQ_EVALUATIONS)
        except (InterpolationError, NoisierThanDeclared, DegenerateDraw) as exc:
            first = first or exc
            continue
        except (np.linalg.LinAlgError, ValueError) as exc:
            first = first or InterpolationError(f"{what}: {exc}")
            continue
        kappa = _scatter(ts, ys, etas, m, fit) if coarse else 1.0
        norm = _normalised_c if bias else _normalised
        fit = fit if f == 1 else norm(fit, f, m)
        if kappa < 1 and _rel_bound(fit, m) > LINEAR_LIMIT:
            tight = _scatter_fit(K, ts, ys, etas, m, kappa, label)
            if tight is not None:
                fit = tight if f == 1 else norm(tight, f, m)
        limit = COARSE_LINEAR_LIMIT if coarse else LINEAR_LIMIT
        if _rel_bound(fit, m) > limit:
            first = first or DegenerateDraw(
                f"{what}: relative first-order error bound {_rel_bound(fit, m):.3g} > "
                f"{limit} (two heads' exponents crowd, or lie beyond the nodes"
                f"{_precision_note(fit, m) if coarse else ''})")
            continue
        return fit, ids, f
    raise first


def _coarse(ys, etas) -> bool:
    """A family of a box declared coarser than float64 (COARSE): its median eta_q above
    ``COARSE`` times its largest |y| (float32, or noisier; a float64 box declares ~1e-15)."""
    return float(np.median(etas)) > COARSE * max(abs(float(y)) for y in ys)


def _scatter(ts, ys, etas, m, fit) -> float:
    """``kappa``: SCATTER_MARGIN times the rms weighted residual of ``fit`` per degree of
    freedom, at least SCATTER_MIN; 1 when that is not below 1 (or too few samples)."""
    n, p = len(ts), 2 * m + 1
    if n <= p:
        return 1.0
    t = [np.inf if x is None else float(x) for x in ts]
    with np.errstate(all="ignore"):
        rho = np.exp(np.array([float(x) for x in fit.logs]))
        cs = np.array([float(c) for c in fit.cs])
        f = float(fit.A) + np.array([0.0 if x == np.inf else float(np.sum(cs / (1 + x * rho)))
                                     for x in t])
        r = (np.array([float(y) for y in ys]) - f) / np.asarray(etas, dtype=float)
        kappa = SCATTER_MARGIN * math.sqrt(float(r @ r) / (n - p))
    return max(kappa, SCATTER_MIN) if kappa < 1 else 1.0


def _scatter_fit(K, ts, ys, etas, m, kappa, what):
    """The family refitted with its bounds scaled to the scatter its residuals show
    (``kappa eta_q``, :func:`_scatter`), or None (module doc, "Coarse boxes").

    A float32 box rounds each token's scores once, and every query of a family repeats the
    same two tokens: that rounding moves the family's ``log rho`` and ``c`` (which the fit
    absorbs) but scatters no residual.  What scatters is the sums' rounding, often a hundredth
    of the eta that must cover both.  The weights, hence the estimate, are those of the
    declared eta; only its bounds shrink by ``kappa``.  The fit keeps ``kappa``
    (``RatioFit.kappa``): its bounds at the declared eta are ``1 / kappa`` times larger, and
    the solve's bounds are certified only when those are within LINEAR_LIMIT too (else only
    the polish of every observation, at the declared eta, can certify)."""
    try:
        out = fit_ratio_family(K, ts, ys, [kappa * e for e in etas], m, what=what,
                               evaluations=COARSE_EVALUATIONS)
    except (InterpolationError, NoisierThanDeclared, DegenerateDraw, np.linalg.LinAlgError,
            ValueError):
        return None
    out.kappa = kappa
    return out


def _level(nz, rec, start) -> float:
    """The declared eta against the outputs: the median of ``eta_q / |y_q|`` over the
    observations since ``start`` (0 when there are none); above COARSE the box is coarse."""
    ys = np.array([abs(float(y)) for _, y in rec.observations[start:]])
    ys = ys[ys > 0]
    return float(np.median([nz.of(y, 0) / y for y in ys])) if len(ys) else 0.0


def _coarseness(nz, rec, start) -> str:
    """``"; the declared eta (noise=..., noise_rel=...) is L of the typical output, KIND"``:
    below a float32 box's rounding (L < 2^-24), about it (L < 2^-10: the float32 layers
    measured declare 1e-6 to 3e-4), or coarser than float32."""
    level = _level(nz, rec, start)
    kind = ("below a float32 box's rounding (2^-24 = 6e-08)" if level < 2.0 ** -24 else
            "about a float32 box's rounding" if level < 2.0 ** -10 else "coarser than float32")
    return (f"; the declared eta (noise={nz.eta:.3g}, noise_rel={nz.rel:.3g}) is {level:.2g} "
            f"of the typical output, {kind}")


def _precision_failure(bad, nz, rec, start, H) -> str:
    """What a coarse box's unresolved families say about its precision (module doc, "Coarse
    boxes"), or ``""`` for a box declared at float64 rounding: how coarse the declared eta is
    against the outputs, how many families missed a sample by more than it or did not
    converge, and how many fitted H heads within it but could not resolve them.  When half
    of them missed, or the eta is below float32 rounding, it advises a larger ``noise=`` or
    ``noise='auto'``; else it names the box's precision as the limit."""
    level = _level(nz, rec, start)
    if not level > COARSE:
        return ""
    miss = sum(1 for e in bad.values() if isinstance(e, NoisierThanDeclared))
    crowd = sum(1 for e in bad.values() if "relative first-order error bound" in str(e))
    other = len(bad) - miss - crowd
    out = (f"{_coarseness(nz, rec, start)}: of the {len(bad)} unresolved, {miss} missed a sample "
           f"by more than it, {other} did not converge, {crowd} fitted {_plural(H)} within it but "
           f"left their exponents unresolved at that precision")
    if 2 * miss >= len(bad) or level < 2.0 ** -24:
        out += (" -- the box's rounding likely exceeds the declared eta: declare a larger "
                "noise=, or use noise='auto'")
    else:
        out += (" -- the box's precision, not the eta, limits them: evaluate the layer in "
                "float64 (float32 layers resolved 4 heads at d <= 16, "
                "docs/howto/float-black-box.md)")
    return out


def _precision_note(fit, m) -> str:
    """A coarse family's bound at the scatter its residuals show (``kappa``)."""
    if fit.kappa == 1:
        return ""
    return (f"; the bound is at {fit.kappa:.2g} times the declared eta, the scatter its "
            f"residuals show")


def _supplement(splan, configs, rows, fits, ids, index, poles_of, K, asker, noise, nodes, m, H,
                relation, frame=None, scales=None, equal_only=False):
    """Supplementary families for the entries of M (and c) that the labelled families leave
    undetermined -- ``(x_i, e_j - e_k)`` for the k whose basis family at x_i is labelled; for
    a coarse box (``equal_only``) then the other k, ``(x_i, e_j + e_k)`` and ``(x_i + x_k, e_j)``
    (:func:`_extra`), at most SUPPLEMENT_PER_ENTRY an entry a round -- or, once every
    entry is determined, determine only
    poorly for some head (:func:`~exactlearn.strategies.real.stable_solve.weak_entries`) --
    those and the basis family ``(x_i, e_j)`` again at scales 1/2 and 2.  Each is labelled by
    its predicted c-values; for a coarse box one of a direction that no labelled family
    references yet is kept, and labelled once a pair gives that direction its c-values
    (:func:`_blind_directions`);
    up to SUPPLEMENT_ROUNDS rounds, new ones each round.  Returns
    how many were asked.  With biases (``frame``,
    :func:`~exactlearn.strategies.real.stable_solve.bias_frame`) the unknowns are ``M~`` (d x (d + 1)), each new family's rows come from its tokens as asked
    and ``scales`` records its scale."""
    d = splan.d
    dc = d + 1 if frame is not None else d
    asked = 0
    tried: set = set()
    pending: list = []                  # fitted, not labelled (_blind_directions may label them)
    synth: dict = {}                    # c-values of directions without a labelled basis family

    def add(c, k, f_used, fit, q, pl, lab):
        n = len(configs)
        configs.append(c)
        if frame is None:               # k: None, or _extra's
            rows.append(rows_of(c) if k is None else _extra_rows(c, k))
        else:
            scales[n] = f_used
            rows.append(rows_bias(frame, tuple(f_used * a for a in c.x),
                                  tuple(f_used * b for b in c.e), f_used, K))
        fits[n], ids[n], poles_of[n], index[n] = fit, q, pl, lab

    for _ in range(SUPPLEMENT_ROUNDS):
        used = sorted(index)
        missW = undetermined([[(j * dc + i, co) for (j, i), co in rows[n][0]] for n in used],
                             d * dc)
        missv = undetermined([rows[n][1] for n in used], d)
        weak = not missW and not missv
        if weak:
            missW = weak_entries(rows, fits, index, m, d, dc)
            if not missW:
                break
        view = type("View", (), {"configs": configs})()
        refs = {**synth, **references(view, index, poles_of)}
        want = [divmod(u, dc) for u in missW] + [(j, 0) for j in missv]
        new = []
        if weak:
            # weak entries: the basis family itself again at other scales (exponents x 1/4
            # and x 4: a head out of the nodes' range, or crowded, is seen anew)
            for j, i in want:
                for f in RESCALE:
                    if ("scale", i, j, f) not in tried:
                        tried.add(("scale", i, j, f))
                        new.append((splan.configs[splan.index("basis", i, j)], None, f))
        for j, i in want:
            # e_j - e_k, then e_j + e_k; first the k whose basis family at x_i is labelled
            ks = sorted(sorted(k for k in refs if k != j),
                        key=lambda k: splan.index("basis", i, k) not in index)
            if not equal_only:          # a box at float64 rounding: as before
                ks = [k for k in ks if splan.index("basis", i, k) in index]
            opts = [("e", k, s) for s in ((-1, 1) if equal_only else (-1,)) for k in ks]
            if j in refs and equal_only:    # then (x_i + x_k, e_j): another final token
                opts += [("x", k, 1) for k in range(len(splan.X)) if k != i]
            opts = [o for o in opts if (i, j) + o not in tried]
            for o in opts[:SUPPLEMENT_PER_ENTRY]:
                tried.add((i, j) + o)
                new.append((_extra(splan, i, j, o), o, None))
        if not new:
            break
        asker.ask([q for c, _, f in new for q in
                   (family_tokens(tuple((f or 1) * a for a in c.x),
                                  tuple((f or 1) * b for b in c.a), kk, mm) for kk, mm in nodes)])
        asked += len(new)
        for c, k, f in new:             # f None: the rescue scales, as for the plan's families
            try:
                fit, q, f_used = _resolve(c, K, asker, noise, nodes, m, H,
                                          **({} if f is None else {"scales": (f,)}),
                                          bias=frame is not None)
            except LearningFailure:
                continue
            pl = _poles(K, fit, m)
            dirs = [(c.j, 1)] + ([] if k is None or k[0] == "x" else [k[1:]])
            lab = label_by_c(pl, dirs, refs, relation, equal_only)
            if lab is None:             # kept: a direction without a reference may label it
                pending.append((c, k, f_used, fit, q, pl, dirs))
                continue
            add(c, k, f_used, fit, q, pl, lab)
        if equal_only:
            _blind_directions(splan, configs, index, poles_of, pending, synth, relation,
                              equal_only, add)
    return asked


def _extra(splan, i, j, o):
    """The supplementary configuration ``o`` for the entry ``(j, i)``: ``("e", k, s)`` is
    ``(x_i, e_j + s e_k)``, ``("x", k, 1)`` is ``(x_i + x_k, e_j)`` (tokens on the plan's grid)."""
    kind, k, sg = o
    if kind == "e":
        e = tuple(p + sg * q for p, q in zip(splan.E[j], splan.E[k]))
        return Config("extra", i, j, splan.X[i], e)
    return Config("extra", i, j, tuple(p + q for p, q in zip(splan.X[i], splan.X[k])), splan.E[j])


def _extra_rows(c, o):
    """The rows (:func:`~exactlearn.strategies.real.stable_solve.rows_of`) of a bias-free
    supplementary configuration ``c`` made by :func:`_extra` with ``o``."""
    kind, k, sg = o
    if kind == "e":
        return [((c.j, c.i), 1), ((k, c.i), sg)], [(c.j, 1), (k, sg)]
    return [((c.j, c.i), 1), ((c.j, k), 1)], [(c.j, 1)]


def _blind_directions(splan, configs, index, poles_of, pending, synth, relation, equal_only,
                      add):
    """Directions ``e_j`` that no labelled basis family references (every ``(x_i, e_j)`` failed:
    two heads' exponents crowd in each, as four float32 heads often do) get their c-values from
    a pair of unlabelled families of ``e_j`` plus different labelled directions -- a within
    family ``(x_i, e_1 + e_j)`` of the plan and a supplementary ``(x_k, e_j - e_1)``, say
    (:func:`~exactlearn.strategies.real.labels.label_by_c_pair`); those, stored in ``synth``,
    then label the other families of ``e_j`` by their predicted c-values.  ``pending``: the
    supplementary families fitted but not labelled (``add`` labels one); the plan's unlabelled
    families are those of ``poles_of`` outside ``index``; ``configs`` every family labelled."""
    n_plan = len(splan.configs)
    while True:
        refs = {**synth, **references(type("View", (), {"configs": configs})(), index, poles_of)}
        for p, e in enumerate(pending):  # references found since it was fitted
            lab = None if e is None else label_by_c(e[5], e[6], refs, relation, equal_only)
            if lab is not None:
                _label_candidate(("pending", p), lab, index, pending, add)
        cands = [(n, poles_of[n], directions(splan.configs[n])) for n in sorted(poles_of)
                 if n < n_plan and n not in index]
        cands += [(("pending", p), e[5], e[6]) for p, e in enumerate(pending) if e is not None]
        by_dir: dict = {}
        for key, pl, dirs in cands:
            blind = [(j, co) for j, co in dirs if j not in refs]
            if len(blind) == 1 and blind[0][1] == 1:
                known = known_part(dirs, blind[0][0], refs)
                if known is not None:
                    by_dir.setdefault(blind[0][0], []).append((key, pl, known))
        found = None
        for j, fams in sorted(by_dir.items()):
            for a in range(len(fams)):
                for b in range(a + 1, len(fams)):
                    got = label_by_c_pair(fams[a][1], fams[a][2], fams[b][1], fams[b][2],
                                          relation, equal_only)
                    if got is not None:
                        found = (j, fams[a][0], fams[b][0], got)
                        break
                if found:
                    break
            if found:
                break
        if found is None:
            return
        j, ka, kb, (pa, pb, own) = found
        synth[j] = own
        refs[j] = own
        for key, perm in ((ka, pa), (kb, pb)):
            _label_candidate(key, perm, index, pending, add)
        for key, pl, dirs in cands:     # the rest of e_j's families by their c-values
            if key in (ka, kb):
                continue
            lab = label_by_c(pl, dirs, refs, relation, equal_only)
            if lab is not None:
                _label_candidate(key, lab, index, pending, add)


def _label_candidate(key, perm, index, pending, add):
    """Labels a plan family (its index) or a pending supplementary one (``("pending", p)``)."""
    if isinstance(key, tuple):
        c, k, f_used, fit, q, pl, _ = pending[key[1]]
        pending[key[1]] = None
        add(c, k, f_used, fit, q, pl, perm)
    else:
        index[key] = perm


def _target(weak, splan, heads, asker, noise, nodes, H):
    """Families for the directions the polish found undetermined (:class:`Weak`): per
    direction (at most d), the basis family ``(x_i, e_j)`` of the entry of ``M = E^T U X``
    it weighs most, asked with its tokens scaled by the power of two ``f`` that brings that
    head's ``f^2 e_j^T W x_i`` to about 1 (a step beyond the nodes comes back between them),
    and by ``f/2``, ``2f``.  Returns how many families were asked; every query is counted
    and certified with the rest."""
    d = splan.d
    Xm = np.array([[float(a) for a in x] for x in splan.X]).T       # columns x_i
    Em = np.array([[float(a) for a in e] for e in splan.E]).T
    if splan.bias:                      # columns (x_i; 1) and U = [W | u] directions
        Xm = np.concatenate([Xm, np.ones((1, Xm.shape[1]))])
    asked, seen = 0, set()
    for h, U in weak.directions[:d]:
        if not np.abs(U).max() > 0:
            continue                    # a direction of v: the solve's families see it
        Md = Em.T @ U @ Xm
        j, i = np.unravel_index(int(np.argmax(np.abs(Md))), Md.shape)
        W = np.array([[float(a) for a in row] for row in heads[h].W])
        if splan.bias:
            W = np.concatenate([W, np.array([[float(b)] for b in heads[h].u])], axis=1)
        z = abs(float(Em[:, j] @ W @ Xm[:, i]))
        if not z > 1e-12 or (i, j) in seen:
            continue
        seen.add((i, j))
        f = mpq(2) ** int(round(-np.log2(z) / 2))
        c = splan.configs[splan.index("basis", i, j)]
        for g in (f / 2, f, 2 * f):
            if g != 1:
                ask_family(c, g, asker, noise, nodes, H)
                asked += 1
    return asked


def _poles(K, fit, m):
    """``(rho, c, bound of rho, bound of c)`` per pole (the matching's poles)."""
    bl, bc = fit.bounds[1:m + 1], fit.bounds[m + 1:]
    return [(K.ctx.exp(x), c, float(b) * float(K.ctx.exp(x)), float(b2))
            for x, c, b, b2 in zip(fit.logs, fit.cs, bl, bc)]


def _per_family(plan0, sigma, K, asker, nz, nodes, m, H, rec, start):
    """Steps 3--5 up to the solve (module doc): the plan at scale ``sigma``, its families fitted,
    labelled, supplemented and solved.  Raises when too many families do not resolve."""
    d = plan0.d
    X = [tuple(sigma * a for a in x) for x in plan0.X]
    E = [tuple(sigma * a for a in e) for e in plan0.E]
    bias = plan0.bias
    splan = stable_bias_plan(X, E, H) if bias else paper_plan(X, E, H)
    fits, ids, rescued, bad, stopped, share = _fit_all(splan, K, asker, nz, nodes, m, H)
    if len(bad) > share * len(splan.configs) or not fits:
        first = bad[min(bad)]
        some = (f"of the first {stopped} (fitting stopped there: more than "
                f"{share:.0%} of all had failed) " if stopped else "")
        raise type(first)(f"{len(bad)} {some}of {len(splan.configs)} configurations could not be "
                          f"resolved at any scale (a box noisier than declared, or more heads "
                          f"than {H}){_precision_failure(bad, nz, rec, start, H)}; the first: "
                          f"{first}")
    # first-order validity, then labelling with per-relation bounds
    worst_rel = max((_rel_bound(f, m) / f.kappa for f in fits.values()), default=0.0)   # at eta
    poles_of = {n: _poles(K, f, m) for n, f in fits.items()}
    basis0 = [splan.index("basis", 0, j) for j in range(d)]
    roots = sorted((n for n in basis0 if n in fits), key=lambda n: _rel_bound(fits[n], m))
    if not roots:
        raise DegenerateDraw(f"no basis configuration with final token x_1 could be resolved; "
                             f"(x_1, e_1): {bad[basis0[0]]}")
    relation = WithinBounds(EQUAL_FACTOR, UNEQUAL_FACTOR, size=float)
    loose = _level(nz, rec, start) > COARSE       # a coarse box: c-values by equality alone
    index = {}
    for root in roots[:ROOTS_TRIED]:       # the head numbering: the root that labels most
        got = (label_families(splan, poles_of, relation, root, square_joint=True,
                              scales={n: mpq(f) for n, f in rescued.items()}, equal_only=loose)
               if bias else label_families(splan, poles_of, relation, root, equal_only=loose))
        if len(got) > len(index):
            index = got
        if len(index) >= 0.9 * len(fits):
            break
    configs = list(splan.configs)
    if not bias:
        rows = [rows_of(c) for c in configs]
        n_supp = _supplement(splan, configs, rows, fits, ids, index, poles_of, K, asker, nz,
                             nodes, m, H, relation, equal_only=loose)
        heads, SW, Sv, rounds = solve_stable_heads(splan, rows, fits, ids, index, K, m,
                                                   len(rec.observations))
        return {"splan": splan, "heads": heads, "SW": SW, "Sv": Sv, "rounds": rounds,
                "fits": fits, "bad": bad, "rescued": rescued, "index": index,
                "supplementary": n_supp, "worst_rel": worst_rel, "start": None}
    frame = bias_frame(splan.X, splan.E)
    scales = {n: mpq(rescued[n]) if n in rescued else mpq(1) for n in range(len(configs))}
    rows = [rows_bias(frame, tuple(scales[n] * a for a in c.x), tuple(scales[n] * b for b in c.e),
                      scales[n], K) for n, c in enumerate(configs)]
    n_supp = _supplement(splan, configs, rows, fits, ids, index, poles_of, K, asker, nz, nodes,
                         m, H, relation, frame=frame, scales=scales, equal_only=loose)
    tokens_a = {n: tuple(scales[n] * a for a in configs[n].a) for n in index}
    heads, c, SW, Sv, Sc, rounds, c_round = solve_bias_heads(
        splan, frame, rows, fits, ids, index, K, m, len(rec.observations), scales, tokens_a)
    return {"splan": splan, "heads": heads, "SW": SW, "Sv": Sv, "rounds": rounds, "fits": fits,
            "bad": bad, "rescued": rescued, "index": index, "supplementary": n_supp,
            "worst_rel": worst_rel, "start": None, "constant": c, "Sc": Sc, "c_round": c_round}


def _pencil_route(plan0, K, asker, nz, nodes, H, why, bias=False):
    """Step 3b (module doc): the heads started by
    :mod:`~exactlearn.strategies.real.stable_pencil`, then the plan's configurations asked as
    ratio families at ``PENCIL_SCALES`` times the ``sigma`` at which the start's exponents have
    an rms of about TARGET; the polish that follows fits all of them.  With ``bias`` the start
    has u (from ``d + 1`` final tokens) and c from the single-token query ``(x_0)``:
    ``f((x_0)) = c + V.x_0``."""
    d = plan0.d

    def ask(queries):
        return [float(y) for y, _ in asker.ask(queries)]

    start, info = pencil_heads(ask, d, H, x_norm=1.0, e_norm=0.5, bias=bias)
    Xm = np.array([[float(a) for a in x] for x in plan0.X]).T
    Em = np.array([[float(a) for a in e] for e in plan0.E]).T
    if bias:
        logs = np.array([Em.T @ (W @ Xm + u[:, None]) for W, _, u in start])
    else:
        logs = np.array([Em.T @ W @ Xm for W, _ in start])
    rms = float(np.sqrt(np.mean(logs ** 2)))
    sigma = sigma_for(rms)
    X = [tuple(sigma * a for a in x) for x in plan0.X]
    E = [tuple(sigma * a for a in e) for e in plan0.E]
    splan = stable_bias_plan(X, E, H) if bias else paper_plan(X, E, H)
    plan_start = len(asker.rec.observations)
    asker.ask([family_tokens(tuple(f * a for a in c.x), tuple(f * b for b in c.a), k, mm)
               for f in PENCIL_SCALES for c in splan.configs for k, mm in nodes])
    mpf = K.ctx.mpf                 # a float64 is exact in any precision
    out = {}
    if bias:
        heads = [Head(tuple(tuple(mpf(float(a)) for a in row) for row in W),
                      tuple(mpf(float(a)) for a in v), tuple(mpf(float(a)) for a in u))
                 for W, v, u in start]
        x0 = splan.X[0]
        y0 = float(asker.ask([[x0]])[0][0])
        V = np.sum([v for _, v, _ in start], axis=0)
        out["constant"] = mpf(y0 - float(V @ np.array([float(a) for a in x0])))
    else:
        heads = [Head(tuple(tuple(mpf(float(a)) for a in row) for row in W),
                      tuple(mpf(float(a)) for a in v)) for W, v in start]
    info["why"] = str(why)[:200]
    return {"splan": splan, "heads": heads, "SW": None, "Sv": None, "rounds": None, "fits": {},
            "bad": {}, "rescued": {}, "index": {}, "supplementary": 0, "worst_rel": 0.0,
            "sigma": sigma, "pencil": info, "plan_start": plan_start} | out


def _sorted(heads, BW, Bv, Bu=None):
    """The heads in their canonical order, their bounds with them (``Bu``: the biases')."""
    order = sorted(range(len(heads)), key=lambda h: heads[h])
    return ([heads[h] for h in order], [BW[h] for h in order], [Bv[h] for h in order],
            None if Bu is None else [Bu[h] for h in order])


def _largest(BW, Bv, Bu=None, Bc=0.0) -> float:
    """The largest of a set of bounds."""
    return max(np.max(BW), np.max(Bv), np.max(Bu) if Bu is not None else 0.0, Bc)


def order_of(before, after) -> list:
    """``[index in before of after[i]]`` (the heads are the same objects, reordered)."""
    return [next(j for j, h in enumerate(before) if h is a) for a in after]


class _SolveAllowance:
    """The first-order residual bound of :mod:`~exactlearn.strategies.real.certificate`
    (:func:`~exactlearn.strategies.real.certificate.residual_bounds`) for the solve's heads,
    one observation at a time: their sensitivities ``route["SW"], route["Sv"]`` give ``G``
    (formed at the first call).  ``constant``: the plan for biases' c (its rows ``[W | u]``,
    v, and last c: the order of
    :func:`~exactlearn.strategies.real.evaluate.evaluate_with_gradient` with ``bias``)."""

    def __init__(self, heads, route, K, rec, start, etas_all, d, constant=None):
        self.heads, self.route, self.K, self.rec, self.start, self.d = heads, route, K, rec, start, d
        self.constant = constant
        self.order = [next(j for j, h in enumerate(route["heads"]) if h is a) for a in heads]
        self.etas = np.asarray(etas_all[start:], dtype=float)
        self.unit = float(self.etas.max()) or 1.0
        self.G = None

    def _form(self):
        d, start, N = self.d, self.start, len(self.etas)
        bias = self.constant is not None
        dd = d * (d + 1) if bias else d * d
        SW, Sv, rounds = self.route["SW"], self.route["Sv"], self.route["rounds"]
        G = np.zeros((len(self.heads) * (dd + d) + bias, N))   # later observations: not solved
        rnd = []
        for k, h in enumerate(self.order):
            rows = [np.asarray(SW[h][e], dtype=float) for e in range(dd)]
            rows += [np.asarray(Sv[h][r], dtype=float) for r in range(d)]
            for i, row in enumerate(rows):
                part = row[start:start + N]
                G[k * (dd + d) + i, :len(part)] = part
            rnd += [rounds[h][0]] * dd + [rounds[h][1]] * d
        if bias:
            part = np.asarray(self.route["Sc"], dtype=float)[start:start + N]
            G[-1, :len(part)] = part
            rnd.append(self.route["c_round"])
        self.G, self.rnd = G, np.array(rnd, dtype=float)

    def __call__(self, q) -> float:
        if self.G is None:
            self._form()
        if self.constant is None:
            _, g, _ = evaluate_with_gradient(self.heads, self.rec.observations[q][0], self.K)
        else:
            _, g, _ = evaluate_with_gradient(self.heads, self.rec.observations[q][0], self.K,
                                             True, self.constant)
        g = np.array(g)
        b, T = residual_bounds(g[None, :], self.G, self.etas / self.unit, [q - self.start])
        return (self.unit * float(SAFETY * b[0] + SECOND_ORDER * T[0])
                + float(np.abs(g) @ self.rnd))


def resolution_test(heads, rec, start, etas, H, bias=False) -> dict:
    """The resolution test (docs/explanation/real-field.md, "The resolution test") of ``m =
    len(heads) < H`` heads, from the statistics of
    :func:`~exactlearn.strategies.real.stable_polish.split_gain`: the observations resolve
    more than m heads when the ``k`` dimensions a split head adds lower the residuals' sum of
    squares (i) by more than Gaussian noise of the variance the box shows exceeds with
    probability ``e^-t``, ``t = RESOLVE_T`` (each residual over its float64 rounding scale; the
    F quantile of :func:`_f_limit`, the variance being estimated from the residuals left), or
    (ii) with each residual over its declared eta, by more than ``k + 2 sqrt(t k) + 2 t``,
    ``t = RESOLVE_T_ETA`` (:func:`_chi2_limit`: what independent output errors within eta
    exceed with probability below ``e^-t``).  Then :class:`~exactlearn.errors.ResidualsBeyondNoise`
    (``resolved``; the escalation fits m + 1 heads).  Returns what it found."""
    got = split_gain(heads, rec, start, etas, bias)
    if got is None:
        return {"run": False, "why": "too few observations for the columns of a split head"}
    gain, extra, rest, dof, floor = (got[k] for k in ("gain", "extra", "rest", "dof", "floor"))
    sigma2 = max(rest / max(dof, 1), floor)
    limit = _f_limit(extra, dof, RESOLVE_T)
    eta_limit = _chi2_limit(extra, RESOLVE_T_ETA)
    m = len(heads)
    what = None
    if gain / sigma2 > limit and gain > extra * floor:
        what = (f"{gain / sigma2:.3g} times the noise variance the {got['n']} observations "
                f"show, beyond the {limit:.3g} that noise explains")
    elif got["gain_eta"] > eta_limit:
        what = (f"by {got['gain_eta']:.3g} times eta^2, beyond the {eta_limit:.3g} output "
                f"errors within eta explain")
    if what is not None:
        raise ResidualsBeyondNoise(
            f"the observations resolve more heads than {m} (below the bound {H}): fitting the "
            f"{extra} dimensions a split head adds lowers the residuals' sum of squares {what}; "
            f"no bound of {_plural(m)} covers the heads they resolve", heads=m, resolved=True)
    return {"run": True, "gain_over_noise": f"{gain / sigma2:.3g}", "threshold": f"{limit:.3g}",
            "dimensions": extra, "gain_over_eta": f"{got['gain_eta']:.3g}",
            "eta_threshold": f"{eta_limit:.3g}"}


#: the resolution test's tail exponents: noise explains a fall of the sum of squares beyond
#: ``k + 2 sqrt(t k) + 2 t`` noise variances in k dimensions with probability below e^-t
RESOLVE_T = 20           # the noise the observations show (estimated: the larger margin)
RESOLVE_T_ETA = 40       # output errors within the declared eta


def _f_limit(k, dof, t):
    """``k x`` with ``P(F(k, dof) > x) = e^-t``: the fall of the sum of squares, in noise
    variances estimated from ``dof`` residuals, that Gaussian noise exceeds with probability
    ``e^-t`` (the F quantile, from the regularized incomplete beta function; bisection on
    ``log x``).

    >>> round(_f_limit(7, 70, 20), 1)         # larger than the chi-square's 70.7: sigma estimated
    78.3
    """
    target = mpmath.exp(-t)

    def tail(x):               # P(F > x) = I_{dof / (dof + k x)}(dof / 2, k / 2)
        return mpmath.betainc(dof / 2, k / 2, 0, dof / (dof + k * x), regularized=True)

    lo, hi = 0.0, math.log(_chi2_limit(k, t) / k) + 1
    while tail(math.exp(hi)) > target:
        hi += 1
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tail(math.exp(mid)) > target else (lo, mid)
    return k * math.exp(hi)


def _chi2_limit(k, t):
    """``k + 2 sqrt(t k) + 2 t`` (Laurent--Massart: a chi-square of k degrees exceeds it with
    probability at most e^-t; a sum of k squared projections of independent errors bounded by
    1, sub-Gaussian, likewise).

    >>> round(_chi2_limit(7, 20), 1)
    70.7
    """
    return k + 2 * math.sqrt(t * k) + 2 * t


def _plural(m):
    return f"{m} head{'s' if m != 1 else ''}"


def run_stable(plan, rec, K, *, noise=None, noise_rel=None, query_scale=None, heads_exact=True,
               probe_log=None, fit_heads=None, bias=False):
    """Probe, scale, ask, fit, label, solve and certify (module doc).  Returns
    ``(heads, certified observations, RealOutcome)``.  ``fit_heads``: fit exactly that many heads
    (at most ``plan.H``; the escalation of :func:`exactlearn.strategies.real.run`), where
    ``heads_exact`` is False.  ``bias``: the plan for biases (module doc); the heads are then a
    :class:`~exactlearn.model.HeadSet` with their u and the constant c."""
    H, d = plan.H, plan.d
    eta = K(0) if noise is None else noise_bound(K, noise)
    eta_rel = K(0) if noise_rel is None else noise_bound(K, noise_rel)
    nz = _Noise(K, eta, eta_rel)
    if float(eta) == 0 and float(eta_rel) == 0:
        nz.eta = float(rounding(K, 1))      # an exact box: its field's rounding only
    start = len(rec.observations)
    asker = _Asker(rec)
    nodes = ratio_nodes(H)
    X0, E0 = dyadic_basis(plan.X), dyadic_basis(plan.E)
    plan0 = stable_bias_plan(bias_tokens(X0), E0, H) if bias else paper_plan(X0, E0, H)
    probe_log = [] if probe_log is None else probe_log
    probe_log.append(0)
    m = fit_heads if fit_heads is not None else H if heads_exact else None
    tries = []
    route = None
    n_probe = None
    try:
        if query_scale is None:
            current().stage("probe")
            try:
                sigma, m, tries = probe_scale(plan0, K, asker, nz, nodes, H, m)
            finally:
                probe_log[-1] = len(rec.observations) - start
        else:
            sigma = mpq(query_scale) if not isinstance(query_scale, str) else QQ(query_scale)
            if m is None:
                m = H
        n_probe = len(rec.observations) - start
        current().phase("ask", stable_count(d, H, bias))    # progress=: the families, fitted
        route = _per_family(plan0, sigma, K, asker, nz, nodes, m, H, rec, start)
    except (DegenerateDraw, InterpolationError, MatchError, SingularMatrix) as exc:
        # crowded exponents in every family (many heads for d): the pencil start (step 3b)
        if not heads_exact or H < PENCIL_MIN_HEADS or query_scale is not None:
            raise
        if _level(nz, rec, start) > COARSE:     # its extrapolation in 1/m needs float64 outputs
            where = "" if "the declared eta (noise=" in str(exc) else _coarseness(nz, rec, start)
            raise type(exc)(f"{exc}{where} (the pencil start is not tried at a declared eta "
                            f"coarser than float64: its extrapolation in 1/m from queries of "
                            f"257 to 1025 tokens cannot separate the heads at that "
                            f"precision)") from None
        if n_probe is None:             # the probe itself failed: all it asked was probing
            n_probe = len(rec.observations) - start
        probe_log[-1] = n_probe
        try:
            route = _pencil_route(plan0, K, asker, nz, nodes, H, exc, bias)
        except LearningFailure as exc2:
            raise type(exc)(f"{exc}; the pencil start failed too: {str(exc2)[:400]}") from None
        sigma, m = route["sigma"], H
    probe_log[-1] = n_probe
    splan, heads = route["splan"], route["heads"]
    fits, bad, rescued, index = route["fits"], route["bad"], route["rescued"], route["index"]
    n_supp, worst_rel = route["supplementary"], route["worst_rel"]
    name = lambda n: f"{splan.configs[n].kind}{(splan.configs[n].i + 1, splan.configs[n].j + 1)}"
    obs = rec.observations[start:]
    n_obs = len(rec.observations)
    etas_all = np.zeros(n_obs)
    size = H * max(abs(float(y)) for _, y in obs)
    for q in range(start, n_obs):
        etas_all[q] = nz.of(rec.observations[q][1], size)
    # a family whose bounds follow its scatter (_scatter_fit) may exceed LINEAR_LIMIT at the
    # declared eta: the solve's first-order bounds then do not hold, and only the polish's can
    loose = max((_rel_bound(fits[n], m) / fits[n].kappa for n in index if n in fits),
                default=0.0) > LINEAR_LIMIT
    Bu, Bc, const = None, 0.0, None
    if route["SW"] is None or loose:    # the pencil route: only the polish gives bounds
        BW = [[[float("inf")] * d for _ in range(d)] for _ in range(m)]
        Bv = [[float("inf")] * d for _ in range(m)]
        if bias:
            Bu, Bc, const = [[float("inf")] * d for _ in range(m)], float("inf"), route["constant"]
            heads = HeadSet(heads, constant=const, bias=True)
    elif not bias:
        SW, Sv, rounds = route["SW"], route["Sv"], route["rounds"]
        BW = [[[SAFETY * float(np.abs(SW[h][r * d + q]) @ etas_all) + rounds[h][0]
                for q in range(d)] for r in range(d)] for h in range(m)]
        Bv = [[SAFETY * float(np.abs(Sv[h][r]) @ etas_all) + rounds[h][1] for r in range(d)]
              for h in range(m)]
    else:                               # [W | u]'s rows: d entries of W, then u[r]
        SW, Sv, rounds = route["SW"], route["Sv"], route["rounds"]
        dc = d + 1
        BWt = [[[SAFETY * float(np.abs(SW[h][r * dc + q]) @ etas_all) + rounds[h][0]
                 for q in range(dc)] for r in range(d)] for h in range(m)]
        BW = [[row[:d] for row in bw] for bw in BWt]
        Bu = [[row[d] for row in bw] for bw in BWt]
        Bv = [[SAFETY * float(np.abs(Sv[h][r]) @ etas_all) + rounds[h][1] for r in range(d)]
              for h in range(m)]
        const = route["constant"]
        Bc = SAFETY * float(np.abs(route["Sc"][:n_obs]) @ etas_all) + route["c_round"]
        heads = HeadSet(heads, constant=const, bias=True)
    # the polish computes in float64: worth it (and its noise test meaningful) only when the
    # declared noise is above float64 rounding (an exact high-precision box keeps the solve)
    ys = np.array([abs(float(y)) for _, y in obs])
    float_noise = float(np.median(etas_all[start:] / np.maximum(8 * 2.0 ** -52 * ys, 1e-300))) >= 1
    far = "pencil" in route
    if far and not float_noise:
        raise DegenerateDraw("the pencil start needs the polish, which runs in float64 only for "
                             "a declared noise above float64 rounding")
    lm_from = route.get("plan_start") if far else None
    current().stage("polish" if float_noise else "certify")
    polished = (polish(heads, K, rec, start, etas_all, far=lm_from, bias=bias) if float_noise
                else None)
    n_target = 0
    weak = polished if isinstance(polished, Weak) else polished[4] if polished else None
    if weak is not None and weak.directions:   # directions few observations see: ask for them
        n_target = _target(weak, splan, heads, asker, nz, nodes, H)
        obs = rec.observations[start:]
        if n_target:
            etas_all = np.concatenate([etas_all, np.zeros(len(rec.observations) - n_obs)])
            for q in range(n_obs, len(rec.observations)):
                etas_all[q] = nz.of(rec.observations[q][1], size)
            again = polish(polished[0] if isinstance(polished, tuple) else heads, K, rec, start,
                           etas_all, far=lm_from, bias=bias)
            if not isinstance(again, Weak) and again is not None:
                polished = again
    if isinstance(polished, Weak):
        polished = None
    if far and polished is None:
        raise DegenerateDraw(f"the pencil start ({route['pencil']['why'][:80]}...) did not "
                             f"converge to a well-determined fit of all {len(obs)} observations")
    method = "solve"
    if polished is not None:
        pheads, (fW, rW), (fV, rV), excess = polished[:4]
        if far and excess > 1:
            raise DegenerateDraw(
                f"the fit of all {len(obs)} observations from the pencil start leaves a weighted "
                f"residual sum of squares {excess:.3g} times their number (at most 1 when every "
                f"output is within its eta): it did not converge, or the outputs are noisier "
                f"than declared")
        if excess > 1:
            raise ResidualsBeyondNoise(
                f"outputs noisier than the declared eta (or a black box outside the model "
                f"class, or more heads than {m}): the heads that fit all {len(obs)} observations "
                f"best leave a weighted residual sum of squares {excess:.3g} times their number, "
                f"at most 1 when every output is within its eta", heads=m)
        chebyshev = None if far else minimax_bound(polished, rec, start, etas_all)
        if chebyshev is not None and chebyshev > 1 + SECOND_ORDER:
            raise ResidualsBeyondNoise(
                f"outputs noisier than the declared eta (or a black box outside the model "
                f"class, or more heads than {m}): no model of {m} head{'s' if m != 1 else ''} "
                f"keeps every output within its eta -- about the least-squares fit of all "
                f"{len(obs)} observations the smallest largest residual over its eta is at "
                f"least {chebyshev:.3g}", heads=m)
        pBW = (SAFETY * fW + rW).tolist()
        pBv = (SAFETY * fV + rV).tolist()
        pBu, pBc = None, 0.0
        if bias:                        # [W | u] bounds: split; the constant's
            pBu = [[row[d] for row in bw] for bw in pBW]
            pBW = [[row[:d] for row in bw] for bw in pBW]
            pBc = SAFETY * polished[5][0] + polished[5][1]
        if far or _largest(pBW, pBv, pBu, pBc) < _largest(BW, Bv, Bu, Bc):
            heads, BW, Bv, Bu, Bc, method = pheads, pBW, pBv, pBu, pBc, "polish"
            const = getattr(pheads, "constant", None) if bias else None
    if not (np.all(np.isfinite(BW)) and np.all(np.isfinite(Bv))
            and (not bias or (np.all(np.isfinite(Bu)) and math.isfinite(Bc)))):
        raise DegenerateDraw("a parameter's error bound is not finite: nothing to certify")
    heads, BW, Bv, Bu = _sorted(heads, BW, Bv, Bu)
    extra = {"Bu": Bu, "constant": const, "Bc": Bc} if bias else {}
    # the residual test (docs/explanation/real-field.md): every residual within eta or, where
    # larger, its first-order bound through the estimate (the polish's or the solve's)
    if method == "polish":
        fitted = hat(polished, rec, start, etas_all)
        allowance = (lambda q: fitted.allowance(q, SAFETY, SECOND_ORDER)) if fitted else None
    else:
        allowance = _SolveAllowance(heads, route, K, rec, start, etas_all, d,
                                    const if bias else None)
    try:
        worst_ratio, resid_ratio = certify_two_token(heads, BW, Bv, K, rec, start, etas_all,
                                                     allowance=allowance, **extra)
    except ResidualsBeyondNoise:
        if method == "polish" or polished is None:
            raise
        # the solve's heads miss: certify the polish's least-squares heads instead
        heads, BW, Bv, Bu = _sorted(pheads, pBW, pBv, pBu)
        method = "polish"
        if bias:
            const, Bc = pheads.constant, pBc
            extra = {"Bu": Bu, "constant": const, "Bc": Bc}
        fitted = hat(polished, rec, start, etas_all)
        allowance = (lambda q: fitted.allowance(q, SAFETY, SECOND_ORDER)) if fitted else None
        worst_ratio, resid_ratio = certify_two_token(heads, BW, Bv, K, rec, start, etas_all,
                                                     allowance=allowance, **extra)
    head_b = [max([x for row in bw for x in row] + list(bv) + (list(Bu[h]) if bias else []))
              for h, (bw, bv) in enumerate(zip(BW, Bv))]
    err = max(head_b + ([Bc] if bias else []), default=0.0)
    resolution = None
    if not heads_exact and len(heads) < H and float_noise:
        resolution = resolution_test(HeadSet(heads, constant=const, bias=True) if bias else heads,
                                     rec, start, etas_all, H, bias)
    detail = {
        "plan": "stable: ratio families t = k/m geometric on [1/%d, %d], %d finite nodes, "
                "weighted least squares" % (MAX_COPIES, MAX_COPIES, len(nodes) - 2),
        "certificate": "within tolerance (noise + propagated parameter uncertainty); not exact",
        "certified_observations": len(obs),
        "max_residual_over_tolerance": f"{worst_ratio:.3g}",
        "max_residual_over_noise_allowance": (None if resid_ratio is None
                                              else f"{float(resid_ratio):.3g}"),
        "eta": f"{float(eta):.6g}", "eta_rel": f"{float(eta_rel):.6g}",
        "head_error_bounds": [f"{b:.3g}" for b in head_b],
        "matching": f"per relation: equal within {EQUAL_FACTOR}, unequal beyond "
                    f"{UNEQUAL_FACTOR} first-order bounds",
        "max_relative_pole_error_bound": f"{worst_rel:.3g}",
        "max_abs_exponent": f"{max((abs(float(x)) for f in fits.values() for x in f.logs), default=0.0):.4g}",
        "query_scale": str(sigma), "scale_rule": "dyadic near-orthogonal X, E; sigma^2 brings the "
        f"probe's rms log rho to about {TARGET}", "probe": tries, "probe_queries": n_probe,
        "stable_plan_queries": stable_count(d, H, bias),
        "unresolved_configurations": {name(n): str(e)[:160] for n, e in bad.items()},
        "unlabelled_configurations": [name(n) for n in fits if n not in index and n < len(splan.configs)],
        "supplementary_families": n_supp,
        "estimate": method,
        "start": "pencil" if far else "solve",
        "targeted_families": n_target,
        "rescued_configurations": {name(n): f for n, f in rescued.items()},
    }
    if resolution is not None:
        detail["resolution_test"] = resolution
    if bias:
        detail["bias"] = ("u and c learned (docs/explanation/biases.md): d + 1 final tokens, "
                          "across families at the midpoints (x_0 + x_i)/2")
        detail["constant_error_bound"] = f"{Bc:.3g}"
    if far:
        detail["pencil"] = route["pencil"]
        detail["max_relative_pole_error_bound"] = "n/a (pencil start: no family fitted)"
    out = RealOutcome(sigma=sigma, probe_queries=n_probe, error_bound=LO.convert(err),
                      head_bounds=[LO.convert(b) for b in head_b], eta=eta, detail=detail,
                      W_bounds=[[[LO.convert(x) for x in row] for row in bw] for bw in BW],
                      v_bounds=[[LO.convert(x) for x in bv] for bv in Bv],
                      etas={q: LO.convert(float(etas_all[q])) for q in range(start, len(rec.observations))})
    if bias:
        out.u_bounds = [[LO.convert(x) for x in bu] for bu in Bu]
        out.c_bound = LO.convert(Bc)
        out.constant = const
        return HeadSet(heads, constant=const, bias=True), len(obs), out
    return tuple(heads), len(obs), out


