"""Evaluating recovered heads over the real field *with* their error bounds: the value, the
first-order effect of the parameter bounds and the size of the terms (which sets the rounding
allowance, :func:`~exactlearn.strategies.real.sensitivity.rounding`), in the field's context
with correctly rounded sums (docs: explanation/real-field.md#the-stable-plan-for-float-black-boxes).
:class:`~exactlearn.model.HeadEvaluator` serves the exact fields and returns f alone; both
group equal tokens alike (:func:`exactlearn.model.distinct_tokens`).

>>> from exactlearn.fields.real import Real
>>> from exactlearn.model import Head
>>> K = Real(dps=30)
>>> f, grad, size = evaluate_with_bounds([Head(((0,),), (2,))], [(1,), (3,)], K)
>>> K.format(f), grad, K.format(size)                      # (2*1 + 2*3) / 2, no bounds given
('4.0', mpf('0.0'), '4.0')
"""

from __future__ import annotations

from exactlearn.model import distinct_tokens
from exactlearn.strategies.real.sensitivity import LO


def _per_head(heads, tokens, K, partials: bool) -> tuple:
    """One query's per-head terms: ``(x_n, [(f_h, size_h, dv, dW) ...])`` with the head's
    output ``f_h = sum_i p_i u_i``, ``size_h = sum_i p_i |u_i|`` (``u_i = v_h.x_i``, the score
    ``x_i^T W_h x_n`` plus ``b_h^T x_i`` for a head with a query bias ``b_h = head.u``,
    docs/explanation/biases.md) and, with ``partials``, ``dv[r] = sum_i p_i x_i[r]`` and
    ``dW[r] = sum_i p_i (u_i - f_h) x_i[r]`` (``df/dW_h[r][c] = dW[r] x_n[c]``,
    ``df/db_h[r] = dW[r]``); else None."""
    ctx = K.ctx
    pairs, final = distinct_tokens(tokens)
    toks = [([K(a) for a in t], m) for t, m in pairs]
    xn = [K(a) for a in final]
    out = []
    for head in heads:
        wx = [ctx.fsum(a * b for a, b in zip(row, xn)) for row in head.W]
        if head.biased:                 # the scores' affine part: x_i^T (W x_n + b)
            wx = [w + K(b) for w, b in zip(wx, head.u)]
        s_n = ctx.fsum(a * b for a, b in zip(xn, wx))
        ws = [ctx.exp(ctx.fsum(a * b for a, b in zip(t, wx)) - s_n) * m for t, m in toks]
        Z = ctx.fsum(ws)
        ps = [w / Z for w in ws]
        us = [ctx.fsum(a * b for a, b in zip(head.v, t)) for t, _ in toks]
        fh = ctx.fsum(p * u for p, u in zip(ps, us))
        size = LO.convert(ctx.fsum(p * abs(u) for p, u in zip(ps, us)))
        dv = dW = None
        if partials:
            d = len(head.v)
            dv = [ctx.fsum(p * t[r] for p, (t, _) in zip(ps, toks)) for r in range(d)]
            dW = [ctx.fsum(p * (u - fh) * t[r] for p, u, (t, _) in zip(ps, us, toks))
                  for r in range(d)]
        out.append((fh, size, dv, dW))
    return xn, out


def evaluate_with_bounds(heads, tokens, K, BW=None, Bv=None, Bu=None, constant=0, Bc=0) -> tuple:
    """``(f, first-order effect of the parameter bounds, size of the terms)`` for one query.

    ``BW[h][r][c]`` and ``Bv[h][r]`` bound the errors of head h's entries (None: no
    parameter uncertainty, the effect is 0); with biases (docs/explanation/biases.md)
    ``Bu[h][r]`` those of its query bias ``u`` and ``Bc`` that of the additive ``constant``
    (added to f).
    ``df/dv_h[r] = sum_i p_i x_i[r]``, ``df/dW_h[r][c] = sum_i p_i (u_i - f_h) x_i[r] x_n[c]``
    with ``u_i = v_h.x_i``, ``f_h = sum_i p_i u_i`` (the score is ``x_i^T W_h x_n``)."""
    xn, terms = _per_head(heads, tokens, K, BW is not None)
    total, grad, size = K.zero, LO.zero, LO.zero
    for h, (fh, size_h, dv, dW) in enumerate(terms):
        total += fh
        size += size_h
        if BW is None:
            continue
        for r in range(len(dv)):
            grad += abs(LO.convert(dv[r])) * Bv[h][r]
            gw = LO.convert(abs(dW[r]))
            for c in range(len(dv)):
                grad += gw * abs(LO.convert(xn[c])) * BW[h][r][c]
            if Bu is not None:
                grad += gw * Bu[h][r]
    if constant != 0:
        total += K(constant)
    if BW is not None and Bc:
        grad += Bc
    return total, grad, size
