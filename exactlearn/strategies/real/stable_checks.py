"""The stable plan's checks of an estimate (:mod:`~exactlearn.strategies.real.stable`; step 5,
docs/explanation/real-field.md): the polish's tests of the declared noise
(:func:`noise_tests`), the certificate of the solve's or the polish's :class:`Estimate`
(:func:`certify_estimate`) with the solve's first-order residual allowance
(:class:`SolveAllowance`), and the resolution test of fewer heads than the bound
(:func:`resolution_test`, "The resolution test").
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, replace

import mpmath
import numpy as np

from exactlearn.errors import DegenerateDraw, ResidualsBeyondNoise
from exactlearn.model import distinct_tokens
from exactlearn.progress import current
from exactlearn.strategies.real import plural
from exactlearn.strategies.real.certificate import SAFETY, SECOND_ORDER, beyond_noise
from exactlearn.strategies.real.lsq import EPS
from exactlearn.strategies.real.stable_certificate import certify_two_token
from exactlearn.strategies.real.stable_minimax import minimax_bound
from exactlearn.strategies.real.stable_normal import Families, head_arrays, normal_equations
from exactlearn.strategies.real.stable_scaled import Scaled
from exactlearn.strategies.real.stable_split import split_gain


def noise_tests(polished, far, m, n, rec, start, etas_all):
    """The polish's tests of the declared noise on its ``n`` observations: a weighted residual
    sum of squares above n, or (from the families' start) a Chebyshev bound above ``1 +
    SECOND_ORDER``, is :class:`~exactlearn.errors.ResidualsBeyondNoise` (from the pencil
    start, an excess is non-convergence: :class:`~exactlearn.errors.DegenerateDraw`)."""
    excess = polished.excess
    if far and excess > 1:
        raise DegenerateDraw(
            f"the fit of all {n} observations from the pencil start leaves a weighted "
            f"residual sum of squares {excess:.3g} times their number (at most 1 when every "
            f"output is within its eta): it did not converge, or the outputs are noisier "
            f"than declared")
    beyond_noise(m, n, excess,
                 lambda: None if far else minimax_bound(polished, rec, start, etas_all,
                                                         1 + SECOND_ORDER),
                 f"the heads that fit all {n} observations best leave")


@dataclass
class Estimate:
    """Heads and the bounds of their parameters, ``SAFETY`` times first order plus rounding:
    ``BW[h][r][c]``, ``Bv[h][r]``, with biases ``Bu[h][r]`` (None without), the constant's
    ``Bc`` and the ``constant``; ``method`` says which step made it (``"solve"`` or
    ``"polish"``)."""

    heads: list
    BW: list
    Bv: list
    Bu: list | None = None
    Bc: float = 0.0
    constant: object = None
    method: str = "solve"

    def largest(self) -> float:
        """The largest bound."""
        return max(np.max(self.BW), np.max(self.Bv),
                   np.max(self.Bu) if self.Bu is not None else 0.0, self.Bc)

    def finite(self) -> bool:
        """Whether every bound is finite."""
        return bool(np.all(np.isfinite(self.BW)) and np.all(np.isfinite(self.Bv))
                    and (self.Bu is None or (np.all(np.isfinite(self.Bu))
                                             and math.isfinite(self.Bc))))

    def sorted(self) -> "Estimate":
        """The heads in their canonical order, their bounds with them."""
        order = sorted(range(len(self.heads)), key=lambda h: self.heads[h])
        return replace(self, heads=[self.heads[h] for h in order],
                       BW=[self.BW[h] for h in order], Bv=[self.Bv[h] for h in order],
                       Bu=None if self.Bu is None else [self.Bu[h] for h in order])


def certify_estimate(est, polished, pol, route, K, rec, start, etas_all, d, bias) -> tuple:
    """The certificate (step 5) of the :class:`Estimate` ``est`` (in canonical order), with
    the residual test against its first-order bounds (docs/explanation/real-field.md); when
    the solve's heads miss, the polish's (``pol``) are certified instead.  Returns the
    estimate certified and the two ratios of
    :func:`~exactlearn.strategies.real.stable_certificate.certify_two_token`."""
    current().stage("certify")          # progress=: after the polish (review, helper-71)
    try:
        return (est,) + _certify(est, polished, route, K, rec, start, etas_all, d, bias)
    except ResidualsBeyondNoise:
        if est.method == "polish" or polished is None:
            raise
    # the solve's heads miss: certify the polish's least-squares heads instead
    est = pol.sorted()
    return (est,) + _certify(est, polished, route, K, rec, start, etas_all, d, bias)


def _certify(est, polished, route, K, rec, start, etas_all, d, bias) -> tuple:
    extra = {"Bu": est.Bu, "constant": est.constant, "Bc": est.Bc} if bias else {}
    if est.method == "polish":
        fitted = hat(polished, rec, start, etas_all)
        allowance = (lambda q: fitted.allowance(q, SAFETY, SECOND_ORDER)) if fitted else None
    else:
        allowance = SolveAllowance(est.heads, route, K, rec, start, etas_all, d,
                                   est.constant if bias else None)
    return tuple(certify_two_token(est.heads, est.BW, est.Bv, K, rec, start, etas_all,
                                   allowance=allowance, **extra))


#: the bytes :class:`SolveAllowance` keeps of its contractions per final token (a noisy box's
#: certificate reads observations of hundreds of final tokens: 841 at d = 32, H = 4, 0.95 GB
#: unbounded -- review, helper-72)
END_CACHE_BYTES = 64 * 2 ** 20


class SolveAllowance:
    """The first-order residual bound of :mod:`~exactlearn.strategies.real.certificate`
    ("The residual test") for the solve's heads,
    one observation at a time, from their sensitivities ``route.SW, route.Sv`` as they are kept
    (:class:`~exactlearn.strategies.real.stable_solve.Sensitivities`, ``S = TG S_meas``): the
    row ``g S`` of an observation (``g`` its gradient) is ``(g TG) S_meas``, and ``|S| eta`` is
    formed once (at the first call) -- never the P x N matrix ``S``, 2 GB at d = 32, H = 4,
    whose every row the former code multiplied again for each observation.  The rounding of
    the factored product is bounded with ``|g| |TG| |S_meas| eta`` in place of ``|g| |S| eta``.
    The gradient ``g`` is float64's (:func:`_gradient`; it enters the bound linearly, so its
    relative error of order 1e-15 moves the allowance by as little): the field's precision
    (:func:`~exactlearn.strategies.real.evaluate.evaluate_with_bounds`' formulas) cost 15 ms
    a call at d = 32, H = 4, where 4,784 observations asked for one.  ``g TG`` of a head's
    ``[W | u]`` rows is ``dW . (TG contracted with xt)``, that contraction formed once per
    final token.
    ``constant``: the plan for biases' c (its rows ``[W | u]``, v, and last c: the order of
    :func:`_gradient` with ``bias``)."""

    def __init__(self, heads, route, K, rec, start, etas_all, d, constant=None):
        self.heads, self.route, self.K, self.rec, self.start, self.d = heads, route, K, rec, start, d
        self.constant = constant
        self.order = [next(j for j, h in enumerate(route.heads) if h is a) for a in heads]
        self.etas = np.asarray(etas_all[start:], dtype=float)
        self.unit = float(self.etas.max()) or 1.0
        self.eh = self.etas / self.unit                    # eta in that unit, from start on
        self.parts = None

    def _form(self):
        """Per block of parameters (each head's ``[W | u]`` rows, then its v; the constant last):
        its sensitivities, ``|S| eta`` and ``|TG| |S_meas| eta``, with eta over the
        observations the solve saw from ``start`` on (later ones have no sensitivity)."""
        start = self.start
        SW, Sv, rounds = self.route.SW, self.route.Sv, self.route.rounds
        n_solve = SW[0].SmT.shape[0]
        eh = np.zeros(n_solve)                              # eta / unit at the solve's columns
        eh[start:start + len(self.etas)] = self.eh[:max(n_solve - start, 0)]
        parts, c, c2, rnd = [], [], [], []
        for h in self.order:
            for S, r in ((SW[h], rounds[h][0]), (Sv[h], rounds[h][1])):
                parts.append(S)
                c.append(S.bounds(eh))
                c2.append(np.abs(S.TG) @ (abs(S.SmT).T @ eh))
                rnd.append(np.full(len(S.TG), r))
        if self.constant is not None:
            Sc = np.asarray(self.route.Sc, dtype=float)[:n_solve]
            c.append([np.abs(Sc) @ eh])
            c2.append(c[-1])
            rnd.append([self.route.c_round])
        self.parts, self.Sc = parts, (Sc if self.constant is not None else None)
        self.WV = head_arrays(self.heads, self.constant is not None)[:2]
        self.by_end = OrderedDict()     # final token -> each head's TG_W contracted with xt,
        per = sum(S.TG.size for S in parts[::2]) // self.WV[0].shape[2] * 8   # bytes an entry
        self.keep = max(1, END_CACHE_BYTES // max(per, 1))        # the latest used, at most
        self.c, self.c2, self.rnd = (np.concatenate([np.asarray(x, dtype=float) for x in v])
                                     for v in (c, c2, rnd))

    def __call__(self, q) -> float:
        if self.parts is None:
            self._form()
        g, dW, dv, xt = _gradient(*self.WV, self.rec.observations[q][0],
                                  self.constant is not None)
        key = xt.tobytes()
        ends = self.by_end.pop(key, None)
        if ends is None:
            ends = [np.tensordot(S.TG.reshape(-1, len(xt), S.TG.shape[1]), xt, axes=(1, 0))
                    for S in self.parts[::2]]               # each head's W part: d x N
            while len(self.by_end) >= self.keep:
                self.by_end.popitem(last=False)
        self.by_end[key] = ends
        row = np.zeros(self.parts[0].SmT.shape[0])
        for k in range(len(dW)):                            # (g S) over the solve's columns
            SW, Sv = self.parts[2 * k], self.parts[2 * k + 1]
            row += SW.SmT @ (dW[k] @ ends[k]) + Sv.SmT @ (dv[k] @ Sv.TG)
        if self.Sc is not None:
            row += g[-1] * self.Sc
        N, start = len(self.etas), self.start
        M = np.zeros(N)
        part = row[start:start + N]
        M[:len(part)] = part
        M[q - start] -= 1.0
        eh = self.eh
        T, T2 = float(np.abs(g) @ self.c), float(np.abs(g) @ self.c2)
        b = float(np.abs(M) @ eh) + 4 * (len(g) + N + 2) * EPS * (T2 + eh[q - start])
        return self.unit * (SAFETY * b + SECOND_ORDER * T) + float(np.abs(g) @ self.rnd)


def _gradient(W, V, tokens, bias) -> tuple:
    """The gradient of the output at ``tokens`` in float64, per head the rows of ``[W | u]``
    then v (the formulas of :func:`~exactlearn.strategies.real.evaluate.evaluate_with_bounds`; the
    softmax shifted by its largest score): ``(g, dW, dv, xt)``, ``W`` the heads' ``[W | u]``
    (H x d x dc), ``df/dW_h[r][c] = dW[h][r] xt[c]``, ``xt = (x_n; 1)`` with biases."""
    pairs, final = distinct_tokens(tokens)
    T = np.array([[float(a) for a in t] for t, _ in pairs])
    mult = np.array([float(m) for _, m in pairs])
    xn = np.array([float(a) for a in final])
    xt = np.append(xn, 1.0) if bias else xn
    S = T @ (W @ xt).T                                      # k x H: x_i^T (W_h x_n + u_h)
    w = np.exp(S - S.max(axis=0)) * mult[:, None]
    p = w / w.sum(axis=0)
    U = T @ V.T                                             # u_i = v_h . x_i
    f = (p * U).sum(axis=0)
    dv, dW = p.T @ T, (p * (U - f)).T @ T                   # H x d each
    g = np.concatenate([np.concatenate([np.outer(dW[h], xt).ravel(), dv[h]])
                        for h in range(len(V))] + ([[1.0]] if bias else []))
    return g, dW, dv, xt


def resolution_test(heads, rec, start, etas, H, bias=False) -> dict:
    """The resolution test (docs/explanation/real-field.md, "The resolution test") of ``m =
    len(heads) < H`` heads, from the statistics of
    :func:`~exactlearn.strategies.real.stable_split.split_gain`: the observations resolve
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
            f"no bound of {plural(m)} covers the heads they resolve", heads=m, resolved=True)
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


def hat(polished, rec, start, etas):
    """The :class:`Hat` of a :func:`~exactlearn.strategies.real.stable_polish.polish` result
    (its heads, bounds) on the observations it fitted, or None when its normal matrix no longer
    solves."""
    heads, (fW, rW), (fV, rV) = polished.heads, polished.W_bounds, polished.v_bounds
    bias = polished.bias
    W, V, c = head_arrays(heads, bias)
    kept = polished.normal
    if (kept is not None and kept[:2] == (len(rec.observations), start)
            and np.array_equal(kept[2], np.asarray(etas, dtype=float))):
        fam, parts, inv = kept[3:]      # the observations the polish fitted: its own inverse
    else:
        fam = Families(rec, start, etas, bias)
        A, _, parts, _ = normal_equations(fam, W, V, c)
        _, inv, _ = Scaled(A, name_weak=False, overwrite_a=True).solved(np.zeros(len(A)))
        if inv is None:
            return None
    cb = polished.constant_bound
    first = np.concatenate([np.ravel(fW), np.ravel(fV)] + ([[cb[0]]] if bias else []))
    rnd = np.concatenate([np.ravel(rW), np.ravel(rV)] + ([[cb[1]]] if bias else []))
    return Hat(fam, parts, inv, len(heads), W.shape[1], first, rnd)


class Hat:
    """The estimate's first-order residuals, one observation at a time: with output errors
    ``eps``, the fitted model's residual at q is ``sum_p ([p = q] - (J S)_qp) eps_p``, ``S`` the
    sensitivity of the module doc; :meth:`allowance` bounds it (docs/explanation/real-field.md,
    "The residual test") at ``N P`` work for the one row of ``J S``."""

    def __init__(self, fam, parts, inv, H, d, first, rnd):
        self.fam, self.parts, self.inv, self.H, self.d = fam, parts, inv, H, d
        self.first, self.rnd = first, rnd
        self.where = {int(q): (f, i) for f, idx in enumerate(fam.q) for i, q in enumerate(idx)}

    def allowance(self, q, safety, second_order) -> float:
        """``safety b_q + second_order T_q + |J_q| rnd``: ``b_q = sum_p |[p = q] - (J S)_qp|
        eta_p`` the first-order worst case of the residual at observation q, ``T_q = |J_q|
        first`` the entry-by-entry effect of the parameter bounds, ``rnd`` the parameters'
        rounding."""
        fam, H = self.fam, self.H
        dd = fam.D.shape[1]
        f0, i0 = self.where[q]
        gz, Jv = self.parts[f0][0], self.parts[f0][1]
        Jq = np.concatenate([np.concatenate([gz[i0, h] * fam.D[f0] for h in range(H)]), Jv[i0]])
        u = self.inv @ Jq
        Zu = np.stack([fam.D @ u[h * dd:(h + 1) * dd] for h in range(H)], axis=1)    # F x H
        uv = u[H * dd:]
        b = 0.0
        for f, (gz, Jv, w, _, _) in enumerate(self.parts):
            row = (gz @ Zu[f] + Jv @ uv) * w                 # (J S)_q,p over family f
            if f == f0:
                row[i0] -= 1.0
            b += float(np.abs(row) @ fam.eta[f])
        aJ = np.abs(Jq)
        return safety * b + second_order * float(aJ @ self.first) + float(aJ @ self.rnd)
