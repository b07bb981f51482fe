"""The stable plan's certificate: every observation recomputed from the recovered heads
(docs "The real field", "The stable plan for
float black boxes").

Every query of the stable plan -- probe, rescues and supplementary families included -- is
``k`` copies of a token ``a`` followed by ``m >= 1`` copies of the final token ``x`` (or ``a``
alone), so each head's value is ``f_h = (k rho u_a + m u_x) / (k rho + m)`` with
``rho = exp((a - x)^T W x)``, ``u = v.token``, computed once per distinct ``(a, x)``.  The
tolerance is ``eta_q`` plus the first-order effect of the parameter bounds
(``df_h/dv = p_a a + p_x x``; ``df_h/dW_rc = p_a p_x (u_a - u_x) e_r x_c``) plus rounding;
a miss is :class:`~exactlearn.errors.NoisierThanDeclared`.  With ``allowance`` each residual
must moreover stay within what the declared noise allows, whatever the parameter bounds:
``eta_q`` plus the rounding of the evaluation -- or, where it is larger, the estimate's own
first-order bound on that residual, ``allowance(q)`` (for the polish's least-squares heads
:class:`~exactlearn.strategies.real.stable_polish.Hat`: their residuals are the output
errors less their projection on the model).  A miss is
:class:`~exactlearn.errors.ResidualsBeyondNoise` (a box noisier than declared, or more heads
than were fitted).  The general evaluator
(:mod:`~exactlearn.strategies.real.evaluate`) gives the same numbers on these queries,
at d^2 work per query instead of H.

With biases (docs/explanation/biases.md) ``rho = exp((a - x)^T (W x + b))`` with the head's
query bias ``b``, its bound adds ``p_a p_x |u_a - u_x| |a - x|^T B_b``, and the additive
constant c and its bound are added to every value and tolerance.
"""

from __future__ import annotations

import numpy as np

from exactlearn.errors import NoisierThanDeclared, ResidualsBeyondNoise
from exactlearn.strategies.real.sensitivity import rounding


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
    for t in tokens:                    # identity first: a long query repeats two objects
        if t is last or tuple(t) == x:
            m += 1
        elif a is None:
            a, a_obj = tuple(t), t
        elif not (t is a_obj or tuple(t) == a):
            raise AssertionError("a stable-plan query has at most two distinct tokens")
    return (x if a is None else a), x, len(tokens) - m, m


def certify_two_token(heads, BW, Bv, K, rec, start, etas, allowance=False, Bu=None,
                      constant=None, Bc=0.0):
    """Every observation since ``start`` recomputed from the heads within its tolerance
    (module doc, step 6); returns the largest residual / tolerance, and with ``allowance``
    (None, or a function of the observation index) the largest residual over what the noise
    allows as well, ``(worst, worst_residual)``.  Every query of this
    plan (probe and rescues included) is ``k`` copies of a token ``a`` and ``m >= 1`` of a
    final token ``x`` (or ``a`` alone), so each head is evaluated in closed form once per
    distinct ``(a, x)`` pair.  With biases: ``Bu`` the bounds of each head's ``u``,
    ``constant`` and its bound ``Bc`` (module doc)."""
    ctx = K.ctx
    bias = Bu is not None
    Bun = [np.array(bu) for bu in Bu] if bias else None
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
                if bias:
                    wx = [w + K(b) for w, b in zip(wx, head.u)]
                rho = ctx.exp(ctx.fdot(a, wx) - ctx.fdot(x, wx))
                ua, ux = ctx.fdot(head.v, a), ctx.fdot(head.v, x)
                kw = float(ef @ BWn[h] @ xf) + (float(ef @ Bun[h]) if bias else 0.0)
                got.append((rho, ua, ux, kw, float(af @ Bvn[h]), float(xf @ Bvn[h])))
            cache[key] = got
        return got

    worst_resid = 0.0
    for q in range(start, len(rec.observations)):
        tokens, y = rec.observations[q]
        a_tok, x_tok, k, m = family_key(tokens)
        f, grad, size = ctx.zero, 0.0, 0.0
        for rho, ua, ux, kw, va, vx in per_head(a_tok, x_tok):
            den = k * rho + m
            pa, px = k * rho / den, m / den
            f += pa * ua + px * ux
            fpa, fpx = float(pa), float(px)
            grad += fpa * va + fpx * vx + fpa * fpx * abs(float(ua - ux)) * kw
            size += fpa * abs(float(ua)) + fpx * abs(float(ux))
        if bias:
            f += K(constant)
            grad += float(Bc)
            size += abs(float(constant))
        tol = float(etas[q]) + grad + float(rounding(K, 4 * size))
        ratio = abs(float(f - y)) / tol
        worst = max(worst, ratio)
        if allowance is not False and ratio <= 1:
            allow = float(etas[q]) + float(rounding(K, 4 * size))
            if abs(float(f - y)) > allow:
                allow = (float("inf") if allowance is None      # no bound formed: not tested
                         else max(allow, allowance(q) + float(rounding(K, 4 * size))))
            worst_resid = max(worst_resid, abs(float(f - y)) / allow)
            if abs(float(f - y)) > allow:
                raise ResidualsBeyondNoise(
                    f"outputs noisier than the declared eta (or a black box outside the model "
                    f"class, or more heads than {len(heads)}): the recovered heads miss an "
                    f"observation of length {len(tokens)} by {abs(float(f - y)):.3g}, "
                    f"{abs(float(f - y)) / allow:.3g} times what the declared noise allows "
                    f"({allow:.3g}: eta, or the noise propagated through the fit to first "
                    f"order)", heads=len(heads))
        if ratio > 1:
            raise NoisierThanDeclared(
                f"outputs noisier than the declared eta (or a black box outside the model "
                f"class): the recovered heads miss an observation of length {len(tokens)} by "
                f"{abs(float(f - y)):.3g} > tolerance {tol:.3g}")
    return worst if allowance is False else (worst, worst_resid)
