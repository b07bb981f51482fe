"""The stable plan: learning a finite-precision black box (a float64 or float32 attention
layer) over the real field (README, "Float black boxes: the stable plan"; the
approximate-oracle conditions of arXiv:2608.03294).

The paper's plan samples each family at ``k = 0 .. 2H``: exact for exact oracles, but at
float64 accuracy its interpolation loses the poles from H = 3 on.  The stable plan keeps
the paper's 2d^2 - 1 configurations (basis, within, across: the same matching, the same
linear relations) and changes how each is sampled and solved:

1. **Tokens.**  X and E are the exactly orthogonal Cayley matrices of the drawn ones
   (:func:`~exactlearn.strategies.real.probe.cayley`) rounded to the dyadic grid
   ``2^-20`` and scaled by ``sigma``, a power of two or 3/2 of one: every token entry is a
   dyadic rational with at most 23 significant bits, exactly representable in float32
   and float64, so a float box evaluates the very query the learner analyses.  X and E
   are then nearly (not exactly) orthogonal; the solve uses their exact inverses.
2. **Scale.**  A probe (the families ``(x_i, e_i)`` at unit scale, ``ceil(6/H)`` of them,
   retried at 4, 1/4, 16, 1/16) measures the rms of ``log rho``; ``sigma^2`` brings it to
   about ``TARGET = 3``, where the logistic steps of distinct heads stand apart.
3. **Families** (:mod:`~exactlearn.strategies.real.ratio`): each configuration is asked at
   ``t = k/m`` geometric on ``[1/256, 256]`` (``4H + 4`` nodes) plus the single tokens
   ``(x)`` (t = 0, shared by every configuration with final token x) and ``(a)``
   (t = oo), and fitted by weighted least squares; residuals are checked against their
   first-order bounds.  The longest query has 257 tokens.
4. **Labelling**: the one traversal of :func:`exactlearn.pipeline.match.label_heads`, each
   relation decided against its own first-order bound (as the paper plan over the real
   field, :func:`~exactlearn.strategies.real.analysis.label_real`).
5. **Solve.**  In the coordinates ``M = E^T W X`` every configuration measures one entry
   or a sum of two (basis ``M[j,i]``, within ``M[1,i] + M[j,i]``, across
   ``M[j,1] + M[j,i]``), and ``c`` likewise: a sparse weighted least-squares problem per
   head (weights ``1/B^2``), solved with a float64 ``G`` and one step of iterative
   refinement in the field's precision; ``W = E^-T M X^-1``, ``v = -E^-T c``.
   Sensitivities stay float64 matrices over the observations; the reported bound of an
   entry is ``SAFETY = 2`` times its first-order bound plus rounding.
6. **Certificate**: every observation (probe included) is recomputed from the recovered
   heads and must agree within ``eta_q`` plus the first-order effect of the parameter
   bounds plus rounding; a family query has two distinct tokens, so it is evaluated in
   closed form (``f_h = (k rho u_a + m u_x) / (k rho + m)``).

Query count: ``(2d^2 - 1)(n_t) + (2d^2 - 1) + (2d - 1)`` plus the probe, with ``n_t`` the
finite nodes (``stable_count``).
"""

from __future__ import annotations

import math

import numpy as np
from gmpy2 import mpq

from exactlearn.algebra import linalg
from exactlearn.errors import DegenerateDraw, FieldError, InterpolationError, LearningFailure, \
    NoisierThanDeclared, SingularMatrix
from exactlearn.fields.rational import QQ
from exactlearn.model import Head
from exactlearn.noise import noise_bound
from exactlearn.pipeline.match import WithinBounds
from exactlearn.pipeline.plan import Config, paper_plan
from exactlearn.strategies.real.analysis import EQUAL_FACTOR
from exactlearn.strategies.real.certificate import SAFETY, RealOutcome
from exactlearn.strategies.real.evaluate import evaluate_with_bounds
from exactlearn.strategies.real.labels import label_by_c, label_families, references
from exactlearn.strategies.real.probe import cayley
from exactlearn.strategies.real.ratio import (MAX_COPIES, family_tokens, fit_ratio_family,
                                              node_t, ratio_nodes)
from exactlearn.strategies.real.sensitivity import LO, rounding

#: first-order validity: a family's relative bounds at most this (second-order terms are
#: then below 1e-2 of the first-order ones, inside the certificate's SAFETY factor 2)
LINEAR_LIMIT = 1e-2
#: matching: equal within EQUAL_FACTOR (10) first-order bounds, unequal beyond this many
UNEQUAL_FACTOR = 10 ** 2
#: the run fails when more than this share of the configurations cannot be resolved
MAX_UNRESOLVED = 0.25
WEAK = 30                # an entry whose bound proxy exceeds 30 x the median gets supplements
WEIGHT_RANGE = 1e9       # the least squares' bounds span at most this factor
ROOTS_TRIED = 4          # basis families of x_1 tried as the root of the labelling
SUPPLEMENT_ROUNDS = 3    # rounds of supplementary families for undetermined entries
SUPPLEMENT_PER_ENTRY = 3
TARGET = 3.0             # rms log rho the scale aims at
GRID = 20                # token entries on the dyadic grid 2^-GRID
PROBE_SCALES = (mpq(1), mpq(4), mpq(1, 4), mpq(16), mpq(1, 16))


def stable_count(d: int, H: int) -> int:
    """Queries of the stable plan (probe excluded): every configuration at its finite
    nodes, one ``(a)`` per configuration, one ``(x)`` per distinct final token.

    >>> stable_count(2, 1), stable_count(4, 2)
    (66, 410)
    """
    n_t = len(ratio_nodes(H)) - 2
    configs = 2 * d * d - 1
    return configs * n_t + configs + (2 * d - 1)


def dyadic_basis(cols):
    """The Cayley-orthogonal matrix of ``cols`` (a drawn integer matrix, columns), rounded
    to the grid ``2^-GRID``: columns of exact dyadic rationals."""
    d = len(cols)
    Q = cayley([[cols[j][i] for j in range(d)] for i in range(d)])
    scale = 2 ** GRID
    return [tuple(mpq(round(Q[i][j] * scale), scale) for i in range(d)) for j in range(d)]


def sigma_for(rms: float) -> mpq:
    """The scale with ``sigma^2 rms`` closest to TARGET among ``2^k`` and ``3 * 2^(k-1)``."""
    want = math.sqrt(TARGET / rms) if rms > 0 else 1.0
    cands = [mpq(2) ** k for k in range(-8, 9)] + [mpq(3, 2) * mpq(2) ** k for k in range(-8, 8)]
    return min(cands, key=lambda s: abs(math.log(float(s) / want)))


class _Asker:
    """Asks queries (in batches when the box has ``batch``) once each, keeping indices."""

    def __init__(self, rec):
        self.rec = rec
        self.seen: dict = {}

    def ask(self, queries) -> list:
        """``[(y, observation index)]`` for a list of token lists."""
        keys = [tuple(tuple(t) for t in q) for q in queries]
        new, seen_now = [], set()
        for key, q in zip(keys, queries):
            if key not in self.seen and key not in seen_now:
                seen_now.add(key)
                new.append((key, q))
        if new:
            start = len(self.rec.observations)
            ys = self.rec.ask_many([q for _, q in new])
            for n, ((key, _), y) in enumerate(zip(new, ys)):
                self.seen[key] = (y, start + n)
        return [self.seen[k] for k in keys]


class _Noise:
    """eta_q = eta + eta_rel |y_q| + rounding (floats: bounds need a few digits)."""

    def __init__(self, K, eta, eta_rel):
        self.K, self.eta, self.rel = K, float(eta), float(eta_rel)

    def of(self, y, size):
        return self.eta + self.rel * abs(float(y)) + float(rounding(self.K, size))


def _families(plan, nodes):
    return [[family_tokens(c.x, c.a, k, m) for k, m in nodes] for c in plan.configs]


RESCUE = (mpq(1, 2), mpq(2), mpq(1, 4), mpq(4))   # a family that fails is re-asked scaled


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


def _fit_all(plan, K, asker, noise, nodes, m, H):
    """Ask and fit every configuration: ``(fits, ids, rescued)``; ``ids[n]`` are the
    observation indices of the fit.  A configuration whose fit fails, or whose first-order
    relative bound exceeds LINEAR_LIMIT (poles crowded or beyond the nodes), is asked again
    with x and e scaled by 1/2, 2, 1/4, 4 (exact dyadic tokens) and its fit taken back to
    scale 1 (``log rho`` scales by f^2, ``c`` by f); every query asked stays an observation
    that the certificate must reproduce."""
    asker.ask([q for c in plan.configs for q in
               (family_tokens(c.x, c.a, k, mm) for k, mm in nodes)])      # one batch
    fits, ids, rescued, bad = {}, {}, {}, {}
    for n, c in enumerate(plan.configs):
        try:
            fits[n], ids[n], f = _resolve(c, K, asker, noise, nodes, m, H)
        except LearningFailure as exc:
            bad[n] = exc
            continue
        if f != 1:
            rescued[n] = str(f)
    return fits, ids, rescued, bad


def _resolve(c, K, asker, noise, nodes, m, H):
    """``(fit at scale 1, observation indices, scale asked)`` of one configuration, at the
    first of the scales 1, 1/2, 2, 1/4, 4 whose fit succeeds within LINEAR_LIMIT; raises
    the first failure when none does."""
    ts = [node_t(k, mm) for k, mm in nodes]
    what = f"configuration {c.kind}{(c.i + 1, c.j + 1)}"
    first = None
    for f in (mpq(1),) + RESCUE:
        x = tuple(f * a for a in c.x)
        a = tuple(f * b for b in c.a)
        part = asker.ask([family_tokens(x, a, k, mm) for k, mm in nodes])
        ys = [y for y, _ in part]
        size = H * max(abs(float(y)) for y in ys)
        etas = [noise.of(y, size) for y in ys]
        try:
            fit = fit_ratio_family(K, ts, ys, etas, m, what=what if f == 1 else f"{what} at scale {f}")
        except (InterpolationError, NoisierThanDeclared, DegenerateDraw) as exc:
            first = first or exc
            continue
        except (np.linalg.LinAlgError, ValueError) as exc:
            first = first or InterpolationError(f"{what}: {exc}")
            continue
        fit = fit if f == 1 else _normalised(fit, f, m)
        if _rel_bound(fit, m) > LINEAR_LIMIT:
            first = first or DegenerateDraw(
                f"{what}: relative first-order error bound {_rel_bound(fit, m):.3g} > "
                f"{LINEAR_LIMIT} (two heads' exponents crowd, or lie beyond the nodes)")
            continue
        return fit, np.array([q for _, q in part]), f
    raise first


def _supplement(splan, configs, rows, fits, ids, index, poles_of, K, asker, noise, nodes, m, H,
                relation):
    """Supplementary families ``(x_i, e_j - e_k)`` for the entries of M (and c) that the
    labelled families leave undetermined -- or, once every entry is determined, determine
    only poorly for some head (:func:`_weak`) -- labelled by their predicted c-values; up to SUPPLEMENT_ROUNDS rounds, new pairs each round.
    Returns how many were asked."""
    d = splan.d
    asked = 0
    tried: set = set()
    for _ in range(SUPPLEMENT_ROUNDS):
        used = sorted(index)
        missW = _undetermined([[(j * d + i, co) for (j, i), co in rows[n][0]] for n in used], d * d)
        missv = _undetermined([rows[n][1] for n in used], d)
        if not missW and not missv:
            missW = _weak(rows, fits, index, m, d)
            if not missW:
                break
        view = type("View", (), {"configs": configs})()
        refs = references(view, index, poles_of)
        want = [divmod(u, d) for u in missW] + [(j, 0) for j in missv]
        new = []
        for j, i in want:
            ks = [k for k in sorted(refs) if k != j and splan.index("basis", i, k) in index
                  and (i, j, k) not in tried]
            for k in ks[:SUPPLEMENT_PER_ENTRY]:
                tried.add((i, j, k))
                e = tuple(p - q for p, q in zip(splan.E[j], splan.E[k]))
                new.append((Config("extra", i, j, splan.X[i], e), k))
        if not new:
            break
        asker.ask([q for c, _ in new for q in (family_tokens(c.x, c.a, kk, mm) for kk, mm in nodes)])
        asked += len(new)
        for c, k in new:
            try:
                fit, q, _ = _resolve(c, K, asker, noise, nodes, m, H)
            except LearningFailure:
                continue
            pl = _poles(K, fit, m)
            lab = label_by_c(pl, [(c.j, 1), (k, -1)], refs, relation)
            if lab is None:
                continue
            n = len(configs)
            configs.append(c)
            rows.append(_rows(c, k))
            fits[n], ids[n], poles_of[n], index[n] = fit, q, pl, lab
    return asked


def _weak(rows, fits, index, m, d) -> list:
    """Entries of M that some head has only poorly determined: a least-squares proxy of its
    bound (``sqrt diag (A^T B^-2 A)^-1``) above WEAK times that head's median, the worst
    tenth of the entries at most."""
    used = sorted(index)
    A = np.zeros((len(used), d * d))
    for r, n in enumerate(used):
        for (j, i), co in rows[n][0]:
            A[r, j * d + i] = co
    worst = np.zeros(d * d)
    for h in range(m):
        b = np.array([fits[n].bounds[1 + index[n][h]] for n in used])
        b = np.minimum(b, WEIGHT_RANGE * b.min())
        Aw = A / b[:, None]
        try:
            proxy = np.sqrt(np.abs(np.diag(np.linalg.pinv(Aw.T @ Aw, rcond=1e-15))))
        except np.linalg.LinAlgError:
            return []
        worst = np.maximum(worst, proxy / np.median(proxy))
    weak = [u for u in np.argsort(-worst) if worst[u] > WEAK]
    return weak[:max(1, d * d // 10)]


def _poles(K, fit, m):
    """``(rho, c, bound of rho, bound of c)`` per pole (the matching's poles)."""
    bl, bc = fit.bounds[1:m + 1], fit.bounds[m + 1:]
    return [(K.ctx.exp(x), c, float(b) * float(K.ctx.exp(x)), float(b2))
            for x, c, b, b2 in zip(fit.logs, fit.cs, bl, bc)]


def _probe(plan0, K, asker, noise, nodes, H, m_fixed):
    """``(sigma, m, probe detail)`` from the probe families at the scales tried."""
    tries = []
    d = plan0.d
    fams = [plan0.configs[plan0.index("basis", i, i)] for i in range(min(d, max(3, -(-6 // H))))]
    ts = [node_t(k, mm) for k, mm in nodes]
    for s0 in PROBE_SCALES:
        logs, m, failed = [], m_fixed, []
        for c in fams:                 # a family that cannot be resolved is passed over
            x = tuple(s0 * a for a in c.x)
            a = tuple(s0 * b for b in c.a)
            part = asker.ask([family_tokens(x, a, k, mm) for k, mm in nodes])
            ys = [y for y, _ in part]
            size = H * max(abs(float(y)) for y in ys)
            etas = [noise.of(y, size) for y in ys]
            try:
                if m is None:
                    m = _count_heads(K, ts, ys, etas, H)
                fit = fit_ratio_family(K, ts, ys, etas, m, what="a probe family")
            except (FieldError, LearningFailure, ArithmeticError, ValueError,
                    np.linalg.LinAlgError) as exc:
                failed.append(exc)
                continue
            logs += [float(x) for x in fit.logs]
        if not logs:
            if all(isinstance(e, NoisierThanDeclared) for e in failed) and s0 == PROBE_SCALES[-1]:
                raise failed[0]
            tries.append({"scale": str(s0), "failed": str(failed[0])[:120]})
            continue
        rms = math.sqrt(sum(x * x for x in logs) / len(logs)) / float(s0) ** 2
        tries.append({"scale": str(s0), "families": len(fams) - len(failed), "poles": len(logs),
                      "rms_exponent": f"{rms * float(s0) ** 2:.4g}"})
        return sigma_for(rms), m, tries
    raise DegenerateDraw(f"the scale probe failed at every scale tried "
                         f"({', '.join(t['scale'] for t in tries)}): its families never fit "
                         f"{H if m_fixed else 'at most ' + str(H)} heads within the declared "
                         f"noise; first failure: {tries[0]['failed']}")


def _count_heads(K, ts, ys, etas, H):
    """The fewest heads m <= H whose least-squares fit keeps every residual within its bound."""
    for m in range(1, H + 1):
        try:
            fit_ratio_family(K, ts, ys, etas, m)
            return m
        except (NoisierThanDeclared, InterpolationError, ValueError, np.linalg.LinAlgError):
            if m == H:
                raise
    return H


def _rows(c, k=None):
    """The configuration's ``log rho`` and ``c`` as combinations of the unknowns:
    ``([((j, i), coef)], [(j, coef)])`` with ``M[j][i] = e_j^T W x_i`` and ``y_j = c(e_j)``.
    ``k``: a supplementary family ``(x_i, e_j - e_k)``."""
    if c.kind == "basis":
        return [((c.j, c.i), 1)], [(c.j, 1)]
    if c.kind == "within":
        return [((0, c.i), 1), ((c.j, c.i), 1)], [(0, 1), (c.j, 1)]
    if c.kind == "across":
        return [((c.j, 0), 1), ((c.j, c.i), 1)], [(c.j, 1)]
    return [((c.j, c.i), 1), ((k, c.i), -1)], [(c.j, 1), (k, -1)]


def _undetermined(design, p) -> list:
    """The unknowns (column indices) that the rows of ``design`` do not determine."""
    A = np.zeros((max(1, len(design)), p))
    for r, row in enumerate(design):
        for col, coef in row:
            A[r, col] = coef
    _, sv, Vt = np.linalg.svd(A)
    rank = int(np.sum(sv > 1e-9 * sv[0])) if len(sv) else 0
    null = Vt[rank:]
    return [u for u in range(p) if null.size and np.abs(null[:, u]).max() > 1e-6]


def _wls(K, design, p, meas, bounds, sens_rows, n_obs):
    """Weighted least squares of ``meas`` (mpf) over the ``design`` (rows of
    ``(unknown, coefficient)``): values in the field's precision (float64 G plus iterative
    refinement), float64 sensitivities ``S = G S_meas`` (p x n_obs)."""
    ctx = K.ctx
    N = len(design)
    A = np.zeros((N, p))
    for n, row in enumerate(design):
        for col, coef in row:
            A[n, col] = coef
    b = np.asarray(bounds, dtype=float)
    # any left inverse G gives an unbiased estimator whose sensitivities G S are exact, so the
    # weights need not be optimal: capping the bounds' range at 1e9 keeps the weighted matrix's
    # condition (and so G A - I, which the refinement removes) well inside float64
    b = np.minimum(np.maximum(b, 1e-300), WEIGHT_RANGE * max(b.min(), 1e-300))
    sw = 1 / b
    try:
        G = np.linalg.pinv(A * sw[:, None], rcond=1e-14) * sw[None, :]
    except np.linalg.LinAlgError:
        raise SingularMatrix("the weighted least-squares system of a head is singular") from None
    with ctx.extraprec(30):
        Gm = [[ctx.mpf(float(g)) for g in row] for row in G]
        u = [ctx.fdot(row, meas) for row in Gm]
        goal = ctx.ldexp(1, -ctx.prec) * max(1, max(abs(x) for x in u))
        last = None
        for it in range(16):           # iterative refinement: G A = I + O(eps) contracts
            r = [meas[n] - ctx.fsum(co * u[c] for c, co in design[n]) for n in range(N)]
            du = [ctx.fdot(row, r) for row in Gm]
            u = [a + b for a, b in zip(u, du)]
            size = max(abs(x) for x in du)
            if size <= goal or (it >= 2 and size > last / 2):    # converged, or rounding floor
                break
            last = size
        else:
            raise SingularMatrix("the refinement of a head's least-squares solve did not converge")
    S = np.zeros((p, n_obs))
    for n, (ids, row) in enumerate(sens_rows):
        S[:, ids] += np.outer(G[:, n], row)
    return [+x for x in u], S, 2 * float(size)


def run_stable(plan, rec, K, *, noise=None, noise_rel=None, query_scale=None, heads_exact=True,
               probe_log=None):
    """Probe, scale, ask, fit, label, solve and certify (module doc).  Returns
    ``(heads, certified observations, RealOutcome)``."""
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
    plan0 = paper_plan(X0, E0, H)
    probe_log = [] if probe_log is None else probe_log
    probe_log.append(0)
    m = H if heads_exact else None
    tries = []
    if query_scale is None:
        try:
            sigma, m, tries = _probe(plan0, K, asker, nz, nodes, H, m)
        finally:
            probe_log[-1] = len(rec.observations) - start
    else:
        sigma = mpq(query_scale) if not isinstance(query_scale, str) else QQ(query_scale)
        if m is None:
            m = H
    n_probe = len(rec.observations) - start
    X = [tuple(sigma * a for a in x) for x in X0]
    E = [tuple(sigma * a for a in e) for e in E0]
    splan = paper_plan(X, E, H)
    fits, ids, rescued, bad = _fit_all(splan, K, asker, nz, nodes, m, H)
    probe_log[-1] = n_probe
    name = lambda n: f"{splan.configs[n].kind}{(splan.configs[n].i + 1, splan.configs[n].j + 1)}"
    if len(bad) > MAX_UNRESOLVED * len(splan.configs) or not fits:
        first = bad[min(bad)]
        raise type(first)(f"{len(bad)} of {len(splan.configs)} configurations could not be "
                          f"resolved at any scale (a box noisier than declared, or more heads "
                          f"than {H}); the first: {first}")
    # first-order validity, then labelling with per-relation bounds
    worst_rel = max((_rel_bound(f, m) for f in fits.values()), default=0.0)
    poles_of = {n: _poles(K, f, m) for n, f in fits.items()}
    basis0 = [splan.index("basis", 0, j) for j in range(d)]
    roots = sorted((n for n in basis0 if n in fits), key=lambda n: _rel_bound(fits[n], m))
    if not roots:
        raise DegenerateDraw(f"no basis configuration with final token x_1 could be resolved; "
                             f"(x_1, e_1): {bad[basis0[0]]}")
    relation = WithinBounds(EQUAL_FACTOR, UNEQUAL_FACTOR, size=float)
    index = {}
    for root in roots[:ROOTS_TRIED]:       # the head numbering: the root that labels most
        got = label_families(splan, poles_of, relation, root)
        if len(got) > len(index):
            index = got
        if len(index) >= 0.9 * len(fits):
            break
    configs = list(splan.configs)
    rows = [_rows(c) for c in configs]
    n_supp = _supplement(splan, configs, rows, fits, ids, index, poles_of, K, asker, nz, nodes,
                         m, H, relation)
    obs = rec.observations[start:]
    n_obs = len(rec.observations)
    heads, SW, Sv, rounds = _solve(splan, rows, fits, ids, index, K, m, n_obs)
    etas_all = np.zeros(n_obs)
    size = H * max(abs(float(y)) for _, y in obs)
    for q in range(start, n_obs):
        etas_all[q] = nz.of(rec.observations[q][1], size)
    BW = [[[SAFETY * float(np.abs(SW[h][r * d + q]) @ etas_all) + rounds[h][0] for q in range(d)]
           for r in range(d)] for h in range(m)]
    Bv = [[SAFETY * float(np.abs(Sv[h][r]) @ etas_all) + rounds[h][1] for r in range(d)]
          for h in range(m)]
    order = sorted(range(m), key=lambda h: heads[h])
    heads = [heads[h] for h in order]
    BW = [BW[h] for h in order]
    Bv = [Bv[h] for h in order]
    worst_ratio = _certify(heads, BW, Bv, K, rec, start, etas_all)
    head_b = [max([x for row in bw for x in row] + list(bv)) for bw, bv in zip(BW, Bv)]
    err = max(head_b, default=0.0)
    detail = {
        "plan": "stable: ratio families t = k/m geometric on [1/%d, %d], %d finite nodes, "
                "weighted least squares" % (MAX_COPIES, MAX_COPIES, len(nodes) - 2),
        "certificate": "within tolerance (noise + propagated parameter uncertainty); not exact",
        "certified_observations": len(obs),
        "max_residual_over_tolerance": f"{worst_ratio:.3g}",
        "eta": f"{float(eta):.6g}", "eta_rel": f"{float(eta_rel):.6g}",
        "head_error_bounds": [f"{b:.3g}" for b in head_b],
        "matching": f"per relation: equal within {EQUAL_FACTOR}, unequal beyond "
                    f"{UNEQUAL_FACTOR} first-order bounds",
        "max_relative_pole_error_bound": f"{worst_rel:.3g}",
        "max_abs_exponent": f"{max(abs(float(x)) for f in fits.values() for x in f.logs):.4g}",
        "query_scale": str(sigma), "scale_rule": "dyadic near-orthogonal X, E; sigma^2 brings the "
        f"probe's rms log rho to about {TARGET}", "probe": tries, "probe_queries": n_probe,
        "stable_plan_queries": stable_count(d, H),
        "unresolved_configurations": {name(n): str(e)[:160] for n, e in bad.items()},
        "unlabelled_configurations": [name(n) for n in fits if n not in index and n < len(splan.configs)],
        "supplementary_families": n_supp,
        "rescued_configurations": {name(n): f for n, f in rescued.items()},
    }
    out = RealOutcome(sigma=sigma, probe_queries=n_probe, error_bound=LO.convert(err),
                      head_bounds=[LO.convert(b) for b in head_b], eta=eta, detail=detail,
                      W_bounds=[[[LO.convert(x) for x in row] for row in bw] for bw in BW],
                      v_bounds=[[LO.convert(x) for x in bv] for bv in Bv],
                      etas={q: LO.convert(float(etas_all[q])) for q in range(start, n_obs)})
    return tuple(heads), len(obs), out


def _solve(plan, rows, fits, ids, index, K, m, n_obs):
    """Heads in the field's precision and their float64 sensitivities (module doc, step 5);
    ``rows[n]`` from :func:`_rows`."""
    d = plan.d
    used = sorted(index)
    dW = [[(j * d + i, co) for (j, i), co in rows[n][0]] for n in used]
    dv = [rows[n][1] for n in used]
    for design, p, what in ((dW, d * d, "W"), (dv, d, "v")):
        if _undetermined(design, p):
            raise SingularMatrix(f"the {len(used)} configurations that could be labelled do not "
                                 f"determine every entry of {what}")
    Xq = [[QQ(plan.X[i][r]) for i in range(d)] for r in range(d)]     # columns -> matrix
    Eq = [[QQ(plan.E[j][r]) for j in range(d)] for r in range(d)]
    Xinv = linalg.inverse(Xq, QQ)
    EinvT = linalg.transpose(linalg.inverse(Eq, QQ))
    Xi = np.array([[float(a) for a in row] for row in Xinv])
    Ei = np.array([[float(a) for a in row] for row in EinvT])
    XiK = [[K(a) for a in row] for row in Xinv]
    EiK = [[K(a) for a in row] for row in EinvT]
    heads, SWs, Svs, rounds = [], [], [], []
    e_norm = float(np.abs(Ei).sum(axis=1).max())
    x_norm = float(np.abs(Xi).sum(axis=0).max())
    floor = float(K.ctx.ldexp(1, -K.prec)) * 64 * d * d
    for h in range(m):
        ml, bl, sl, mc, bc, sc = [], [], [], [], [], []
        for n in used:
            f = fits[n]
            p = index[n][h]
            ml.append(f.logs[p])
            bl.append(f.bounds[1 + p])
            sl.append((ids[n], f.G[1 + p]))
            mc.append(f.cs[p])
            bc.append(f.bounds[1 + m + p])
            sc.append((ids[n], f.G[1 + m + p]))
        Mu, SM, rM = _wls(K, dW, d * d, ml, bl, sl, n_obs)
        cu, Sc, rc = _wls(K, dv, d, mc, bc, sc, n_obs)
        M = [[Mu[j * d + i] for i in range(d)] for j in range(d)]
        # W = E^-T M X^-1, v = -E^-T c
        EM = [[K.ctx.fsum(EiK[r][j] * M[j][i] for j in range(d)) for i in range(d)] for r in range(d)]
        W = tuple(tuple(K.ctx.fsum(EM[r][i] * XiK[i][q] for i in range(d)) for q in range(d))
                  for r in range(d))
        v = tuple(-K.ctx.fsum(EiK[r][j] * cu[j] for j in range(d)) for r in range(d))
        SMr = SM.reshape(d, d, n_obs)
        SW = np.einsum("rj,jin,iq->rqn", Ei, SMr, Xi, optimize=True).reshape(d * d, n_obs)
        heads.append(Head(W, v))
        SWs.append(SW)
        Svs.append(-(Ei @ Sc))
        size = max(abs(float(a)) for row in W for a in row) + max(abs(float(a)) for a in v)
        rounds.append((rM * e_norm * x_norm + floor * size, rc * e_norm + floor * size))
    return heads, SWs, Svs, rounds


def _certify(heads, BW, Bv, K, rec, start, etas):
    """Every observation since ``start`` recomputed from the heads within its tolerance
    (module doc, step 6); returns the largest residual / tolerance.  Every query of this
    plan (probe and rescues included) is ``k`` copies of a token ``a`` and ``m >= 1`` of a
    final token ``x`` (or ``a`` alone), so each head is evaluated in closed form once per
    distinct ``(a, x)`` pair."""
    ctx = K.ctx
    worst = 0.0
    Bvn = [np.array(bv) for bv in Bv]
    BWn = [np.array(bw) for bw in BW]
    cache: dict = {}

    def per_head(a_tok, x_tok):
        key = (a_tok, x_tok)
        got = cache.get(key)
        if got is None:
            x = [K(t) for t in x_tok]
            a = [K(t) for t in a_tok]
            xf = np.array([abs(float(t)) for t in x_tok])
            af = np.array([abs(float(t)) for t in a_tok])
            ef = np.array([abs(float(p) - float(q)) for p, q in zip(a_tok, x_tok)])
            got = []
            for h, head in enumerate(heads):
                wx = [ctx.fdot(row, x) for row in head.W]
                rho = ctx.exp(ctx.fdot(a, wx) - ctx.fdot(x, wx))
                ua, ux = ctx.fdot(head.v, a), ctx.fdot(head.v, x)
                got.append((rho, ua, ux, float(ef @ BWn[h] @ xf), float(af @ Bvn[h]),
                            float(xf @ Bvn[h])))
            cache[key] = got
        return got

    for q in range(start, len(rec.observations)):
        tokens, y = rec.observations[q]
        x_tok = tuple(tokens[-1])
        others = {tuple(t) for t in tokens} - {x_tok}
        if len(others) > 1:
            raise AssertionError("a stable-plan query has at most two distinct tokens")
        m = sum(1 for t in tokens if tuple(t) == x_tok)
        k = len(tokens) - m
        a_tok = others.pop() if others else x_tok
        f, grad, size = ctx.zero, 0.0, 0.0
        for rho, ua, ux, kw, va, vx in per_head(a_tok, x_tok):
            den = k * rho + m
            pa, px = k * rho / den, m / den
            f += pa * ua + px * ux
            fpa, fpx = float(pa), float(px)
            grad += fpa * va + fpx * vx + fpa * fpx * abs(float(ua - ux)) * kw
            size += fpa * abs(float(ua)) + fpx * abs(float(ux))
        tol = float(etas[q]) + grad + float(rounding(K, 4 * size))
        ratio = abs(float(f - y)) / tol
        worst = max(worst, ratio)
        if ratio > 1:
            raise NoisierThanDeclared(
                f"outputs noisier than the declared eta (or a black box outside the model "
                f"class): the recovered heads miss an observation of length {len(tokens)} by "
                f"{abs(float(f - y)):.3g} > tolerance {tol:.3g}")
    return worst
