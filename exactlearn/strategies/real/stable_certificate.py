"""The certificate: every observation recomputed from the recovered heads
(docs: explanation/real-field.md#the-stable-plan-for-float-black-boxes;
docs: explanation/biases.md#over-the-real-field).

Every query is ``k`` copies of a token ``a`` then ``m >= 1`` copies of the final token ``x``
(or ``a`` alone), so each head's value is ``f_h = (k rho u_a + m u_x) / (k rho + m)``,
``rho = exp((a - x)^T (W x + b))``, ``u = v.token``: computed once per distinct ``(a, x)`` in
the field's precision (gmpy2, each dot product rounded once as mpmath's ``fdot``), the
tolerances in float64.  The tolerance is ``eta_q`` plus the first-order effect of the
parameter bounds (``df_h/dv = p_a a + p_x x``; ``df_h/dW_rc = p_a p_x (u_a - u_x) e_r x_c``;
with biases ``p_a p_x |u_a - u_x| |a - x|^T B_b`` and the constant's bound) plus rounding; a
miss is :class:`~exactlearn.errors.NoisierThanDeclared`.  With ``allowance`` each residual must
also stay within ``eta_q`` plus rounding, or the estimate's own first-order bound on it
(:class:`~exactlearn.strategies.real.stable_checks.Hat` for the polish's heads); a miss is
:class:`~exactlearn.errors.ResidualsBeyondNoise`.  The general evaluator
(:mod:`~exactlearn.strategies.real.evaluate`) gives the same numbers at d^2 work per query.
"""

from __future__ import annotations

import weakref

import gmpy2
import numpy as np

from exactlearn.errors import NoisierThanDeclared, ResidualsBeyondNoise
from exactlearn.oracle.adapt import token_runs
from exactlearn.strategies.real.lsq import field_precision, to_mpfr
from exactlearn.strategies.real.sensitivity import rounding


_MPQ = type(gmpy2.mpq(0))


def family_key(tokens):
    """``(a, x, k, m)`` of a stable-plan query: ``k`` copies of ``a``, then ``m >= 1`` of the
    final token ``x`` (``a == x``, ``k == 0`` for a single token repeated).

    >>> family_key(((1, 2), (1, 2), (3, 4)))
    ((1, 2), (3, 4), 2, 1)
    """
    last = tokens[-1]
    x = tuple(last)
    a = a_obj = None
    m = 0
    for t, n in token_runs(tokens):     # runs of one object: a long query repeats two
        if t is last or tuple(t) == x:
            m += n
        elif a is None:
            a, a_obj = tuple(t), t
        elif not (t is a_obj or tuple(t) == a):
            raise AssertionError("a stable-plan query has at most two distinct tokens")
    return (x if a is None else a), x, len(tokens) - m, m


_KEYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def family_keys(rec, start, n) -> list:
    """:func:`family_key` of the recorder's observations ``start .. n - 1``.  A recorder's
    observations are only ever appended, so the keys found so far are kept per recorder
    (while it lives) and only the new ones are computed; the observations list and the last
    kept observation's tokens are checked to be the same objects, else all are computed
    again (tokens are built afresh per query and never edited)."""
    obs = rec.observations
    try:
        kept = _KEYS.setdefault(rec, [[], None, None])
    except TypeError:                   # a recorder without weak references: not kept
        kept = [[], None, None]
    keys = kept[0]
    if keys and (kept[2] is not obs or len(keys) > len(obs)
                 or obs[len(keys) - 1][0] is not kept[1]):
        keys.clear()
    for q in range(len(keys), n):
        keys.append(family_key(obs[q][0]))
    if keys:
        kept[1], kept[2] = obs[len(keys) - 1][0], obs
    return keys[start:n]


def certify_two_token(heads, BW, Bv, K, rec, start, etas, allowance=False, Bu=None,
                      constant=None, Bc=0.0):
    """Every observation since ``start`` recomputed from the heads within its tolerance
    (module doc, step 6); returns the largest residual / tolerance, and with ``allowance``
    (None, or a function of the observation index) the largest residual over what the noise
    allows as well, ``(worst, worst_residual)``.  Every query of this
    plan (probe and rescues included) is ``k`` copies of a token ``a`` and ``m >= 1`` of a
    final token ``x`` (or ``a`` alone), so each head is evaluated in closed form once per
    distinct ``(a, x)`` pair (:class:`_Pairs`): the value of each observation in the field's
    precision, its tolerance (a bound, needing a few digits) in float64 for all at once.  With
    biases: ``Bu`` the bounds of each head's ``u``, ``constant`` and its bound ``Bc`` (module
    doc)."""
    N = len(rec.observations) - start
    if N <= 0:
        return 0.0 if allowance is False else (0.0, 0.0)
    pairs, pid, ks, ms, r = _residuals(heads, BW, Bv, K, rec, start, N, Bu, constant)
    grad, size = pairs.tolerance(pid, ks, ms)
    if Bu is not None:
        grad += float(Bc)
        size += abs(float(constant))
    eta = np.asarray(etas, dtype=float)[start:start + N]
    rnd = float(rounding(K, 1)) * 4 * size * (1 + 1e-12)   # rounding(K, 4 size), float64 rounded up
    tol = eta + grad + rnd
    res = np.abs(r)
    res[np.isnan(res)] = np.inf          # an answer that is no number misses every tolerance
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(res == 0, 0.0, res / tol)
    allow0 = eta + rnd
    worst_resid = _misses(ratio, res, tol, allow0, rnd, allowance, rec, start, len(heads))
    worst = float(np.max(ratio, initial=0.0))
    return worst if allowance is False else (worst, worst_resid)


def _residuals(heads, BW, Bv, K, rec, start, N, Bu, constant) -> tuple:
    """Each observation's residual ``f - y`` from the heads (in the field's precision, then
    float64) and its token pair: ``(pairs, pair index, k, m, residuals)``."""
    pid = np.zeros(N, dtype=np.intp)
    ks, ms = np.zeros(N), np.zeros(N)
    r = np.zeros(N)
    with field_precision(K.ctx):     # the field's precision, in gmpy2 (lsq.to_mpfr)
        pairs = _Pairs(heads, BW, Bv, K, Bu)
        cK = to_mpfr(K(constant)) if Bu is not None else None
        for n, (a_tok, x_tok, k, m) in enumerate(family_keys(rec, start, start + N)):
            y = rec.observations[start + n][1]
            p = pairs.of(a_tok, x_tok)
            pid[n], ks[n], ms[n] = p, k, m
            if k == 0:
                f = pairs.ux_sum[p]
            else:                        # f_h = (k u_a + m u_x / rho) / (k + m / rho): each
                # head's rounding within a few units of p_a |u_a| + p_x |u_x| (the size)
                f = gmpy2.fsum([(k * ua + m * ir * ux) / (k + m * ir) for ua, ux, ir in pairs.mp[p]])
            if cK is not None:
                f += cK
            r[n] = float(f - to_mpfr(y if hasattr(y, "_mpf_") else K(y)))
    return pairs, pid, ks, ms, r


def _misses(ratio, res, tol, allow0, rnd, allowance, rec, start, H) -> float:
    """The observations beyond their tolerance (:class:`~exactlearn.errors.NoisierThanDeclared`)
    or, with ``allowance``, beyond what the noise allows
    (:class:`~exactlearn.errors.ResidualsBeyondNoise`), the first in order named; returns the
    largest residual over what the noise allows (0 without ``allowance``)."""
    worst_resid = 0.0
    if allowance is not False:       # the residual test where the tolerance holds (module doc)
        within = ratio <= 1
        low = within & (res <= allow0)
        with np.errstate(invalid="ignore", divide="ignore"):
            worst_resid = float(np.max(np.where(res[low] == 0, 0.0, res[low] / allow0[low]),
                                       initial=0.0))
        look = np.flatnonzero((ratio > 1) | (within & (res > allow0)))
    else:
        look = np.flatnonzero(ratio > 1)
    for n in look:                       # in order: the first that fails names the failure
        tokens = rec.observations[start + n][0]
        if ratio[n] > 1:
            raise NoisierThanDeclared(
                f"outputs noisier than the declared eta (or a black box outside the model "
                f"class): the recovered heads miss an observation of length {len(tokens)} by "
                f"{res[n]:.3g} > tolerance {tol[n]:.3g}")
        allow = (float("inf") if allowance is None      # no bound formed: not tested
                 else max(allow0[n], allowance(start + int(n)) + rnd[n]))
        worst_resid = max(worst_resid, res[n] / allow)
        if res[n] > allow:
            raise ResidualsBeyondNoise(
                f"outputs noisier than the declared eta (or a black box outside the model "
                f"class, or more heads than {H}): the recovered heads miss an "
                f"observation of length {len(tokens)} by {res[n]:.3g}, "
                f"{res[n] / allow:.3g} times what the declared noise allows "
                f"({allow:.3g}: eta, or the noise propagated through the fit to first "
                f"order)", heads=H)
    return worst_resid


class _Pairs:
    """Per distinct token pair ``(a, x)`` and head: in the field, ``u_a``, ``u_x`` and
    ``1 / rho`` (``mp``) and ``sum_h u_x`` (``ux_sum``); in float64 for the tolerances, ``log rho``,
    ``|u_a|``, ``|u_x|``, and the bound terms ``|a - x|^T B_W |x|`` (+ ``|a - x|^T B_u``),
    ``|a|^T B_v``, ``|x|^T B_v``.  ``W x`` (+ u) and ``u_x`` are formed once per final token.
    The field's numbers are gmpy2's at its precision (built inside
    :func:`~exactlearn.strategies.real.lsq.field_precision`); a dot product is rounded once,
    as mpmath's ``fdot``: its products are exact at twice the precision, their sum
    (``gmpy2.fsum``) correctly rounded."""

    def __init__(self, heads, BW, Bv, K, Bu=None):
        self.K, self.ctx = K, K.ctx
        self.bias = Bu is not None
        self.wide = gmpy2.context(precision=2 * int(K.ctx.prec) + 8)
        self.W = [[[to_mpfr(K(a)) for a in row] for row in head.W] for head in heads]
        self.v = [[to_mpfr(K(a)) for a in head.v] for head in heads]
        self.u = [[to_mpfr(K(a)) for a in head.u] for head in heads] if self.bias else None
        self.BW = [np.array(bw, dtype=float) for bw in BW]
        self.Bv = [np.array(bv, dtype=float) for bv in Bv]
        self.Bu = [np.array(bu, dtype=float) for bu in Bu] if self.bias else None
        self.index: dict = {}
        self.tok: dict = {}
        self.xs: dict = {}
        self.mp, self.ux_sum, self.fl = [], [], []

    def _dots(self, ps, q):
        """``[p . q for p in ps]``, each rounded once (class doc)."""
        with self.wide:
            prods = [[a * b for a, b in zip(p, q)] for p in ps]
        return [gmpy2.fsum(pr) for pr in prods]

    def _token(self, t):
        got = self.tok.get(t)
        if got is None:
            # an exact rational rounded once to the field's precision, as K(a) rounds it
            got = self.tok[t] = ([gmpy2.mpfr(a) if type(a) is _MPQ else to_mpfr(self.K(a))
                                  for a in t], np.array([float(a) for a in t]))
        return got

    def _final(self, x_tok):
        got = self.xs.get(x_tok)
        if got is None:
            x, _ = self._token(x_tok)
            wx = []
            for h, W in enumerate(self.W):
                w = self._dots(W, x)
                if self.bias:
                    w = [a + b for a, b in zip(w, self.u[h])]
                wx.append((w, *self._dots((w, self.v[h]), x)))
            got = self.xs[x_tok] = (wx, gmpy2.fsum([ux for _, _, ux in wx]))
        return got

    def of(self, a_tok, x_tok) -> int:
        key = (a_tok, x_tok)
        p = self.index.get(key)
        if p is not None:
            return p
        a, af = self._token(a_tok)
        _, xf = self._token(x_tok)
        ef = np.abs(af - xf)
        xf, af = np.abs(xf), np.abs(af)
        mp, fl = [], []
        wx, ux_sum = self._final(x_tok)
        dots = self._dots([w for w, _, _ in wx] + self.v, a)
        for h, (w, wxx, ux) in enumerate(wx):
            z = dots[h] - wxx                            # log rho = (a - x)^T (W x + u)
            ua = dots[len(wx) + h]
            mp.append((ua, ux, gmpy2.exp(-z)))
            kw = float(ef @ self.BW[h] @ xf) + (float(ef @ self.Bu[h]) if self.bias else 0.0)
            fl.append((float(z), abs(float(ua)), abs(float(ux)), abs(float(ua - ux)), kw,
                       float(af @ self.Bv[h]), float(xf @ self.Bv[h])))
        p = self.index[key] = len(self.mp)
        self.mp.append(mp)
        self.ux_sum.append(ux_sum)
        self.fl.append(fl)
        return p

    def tolerance(self, pid, ks, ms):
        """Per observation (pair ``pid``, ``k`` copies of a, ``m`` of x): the first-order effect
        of the parameter bounds ``sum_h p_a B.a + p_x B.x + p_a p_x |u_a - u_x| kw`` and the
        size of the terms ``sum_h p_a |u_a| + p_x |u_x|`` (module doc), in float64."""
        F = np.array(self.fl)[pid]                       # N x H x 7
        z, ua, ux, du, kw, va, vx = (F[:, :, i] for i in range(7))
        with np.errstate(divide="ignore", over="ignore"):
            s = np.log(ks)[:, None] - np.log(ms)[:, None] + z      # log (k rho / m)
            pa = np.where(ks[:, None] == 0, 0.0, 1 / (1 + np.exp(-s)))
            px = np.where(ks[:, None] == 0, 1.0, 1 / (1 + np.exp(s)))
        grad = (pa * va + px * vx + pa * px * du * kw).sum(axis=1)
        size = (pa * ua + px * ux).sum(axis=1)
        return grad, size
