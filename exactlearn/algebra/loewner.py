"""Rational interpolation from noisy samples in an mpmath context: Loewner matrices and SVD.

The real field's replacement (docs: explanation/real-field.md)
for the extended Euclidean algorithm of
:func:`exactlearn.pipeline.interpolate.cauchy_interpolate`: that algorithm needs
degree decisions on remainders whose coefficients span many orders of magnitude,
and with a zero test against a fixed scale it miscounts poles from H = 3 on.
Over the reals the equivalent linear algebra is used instead, and every decision
compares a quantity with the error that the *sample* noise propagates into it.
Written against an mpmath context ``ctx``, mpmath style.

>>> import mpmath
>>> ctx = mpmath.MPContext(); ctx.dps = 30
>>> ks = [ctx.mpf(k) for k in range(3)]
>>> P, Q = loewner_interpolate(ctx, ks, [2 + 1 / (1 + 3 * k) for k in ks], 1, ctx.mpf(10) ** -27)
>>> [mpmath.nstr(c, 10) for c in P], [mpmath.nstr(c, 10) for c in Q]      # (3 + 6k) / (1 + 3k)
(['3.0', '6.0'], ['1.0', '3.0'])
"""

from __future__ import annotations

from exactlearn.errors import InterpolationError, Undecided


def loewner_matrix(ctx, ks, ys, rows, cols):
    """The Loewner matrix ``(y_i - y_j) / (k_i - k_j)``, i in rows, j in cols."""
    return ctx.matrix([[(ys[i] - ys[j]) / (ks[i] - ks[j]) for j in cols] for i in rows])


def _decider(ctx, noise, dps, default_margin):
    """``decide(x, bound, what, margin)`` of :func:`loewner_interpolate`: True (zero) at most
    ``bound``, False (nonzero) above ``bound * margin``, Undecided in the band."""
    def decide(x, bound, what, margin=default_margin):
        if x <= bound:
            return True
        if x > bound * margin:
            return False
        raise Undecided(f"rational interpolation: {what} is {ctx.nstr(x, 3)}, within "
                        f"a factor {ctx.nstr(margin, 3)} above its sample-noise bound "
                        f"{ctx.nstr(bound, 3)} (noise={ctx.nstr(noise, 3)}, "
                        f"dps={dps})")
    return decide


def _constant_fit(ys, decide, bound, H) -> None:
    """No pole: every sample must equal the first within ``bound``, or InterpolationError."""
    for y in ys:
        if not decide(abs(y - ys[0]), bound, "a sample difference"):
            raise InterpolationError("samples are not those of a rational function "
                                     f"of type ({H},{H}) (constant fit fails)")


def _monomials(ctx, ks, ys, sup, w, m) -> tuple:
    """Step 3 of :func:`loewner_interpolate`: ``Q = sum_j w_j prod_{i != j} (k - s_i)`` and
    ``P`` likewise with ``w_j y_j`` (lowest degree first), and ``sum_j |prod_{i != j} (0 -
    s_i)|``."""
    Q = [ctx.zero] * (m + 1)
    P = [ctx.zero] * (m + 1)
    at0 = ctx.zero                          # sum_j |prod_{i != j} (0 - s_i)|
    for j in range(m + 1):
        basis = [ctx.one]                   # prod_{i != j} (k - s_i), lowest first
        for i in sup:
            if i != sup[j]:
                basis = [(basis[t - 1] if t else 0) - (basis[t] * ks[i] if t < len(basis) else 0)
                         for t in range(len(basis) + 1)]
        at0 += abs(basis[0])
        for t, b in enumerate(basis):
            Q[t] += w[j] * b
            P[t] += w[j] * ys[sup[j]] * b
    return P, Q, at0


def loewner_interpolate(ctx, ks, ys, H, noise):
    """Minimal ``P/Q`` with ``deg P, deg Q <= H`` through the ``2H+1`` points (``ks``
    sorted increasingly, ``ys`` the samples, both mpf of ``ctx``), in barycentric
    (Loewner) form; returns (P, Q) coefficient lists, lowest degree first, ``Q(0) = 1``.

    ``noise`` is the relative accuracy of the samples (relative to the largest).  A
    quantity is zero if at most the bound ``b`` that the sample noise propagates into
    it, nonzero if above ``b * noise^(-1/10)`` (a factor 1e9 at dps 100) for singular
    values -- the pole count -- and above ``1000 b`` (or that factor if smaller) for
    the derived weights and coefficients, whose bounds are first-order perturbation
    bounds; :class:`~exactlearn.errors.Undecided` in between.  With 12 heads at dps 100
    the smallest genuine Loewner singular values sit 1e40 above their noise bound, so
    the factor is no obstacle; a genuine zero sits at or below the bound.

    1. *Number of poles m.*  With support points ``S`` (even positions) and test points
       (odd), the Loewner matrix ``L[i][j] = (y_i - y_j) / (k_i - k_j)`` has rank m.
       Sample errors move its singular values by at most
       ``zeta = 2 n noise max|y| / min|k_i - k_j|`` (``n = 2H+1``); m counts those
       above the bound.
    2. *Weights.*  On ``m + 1`` spread support points the Loewner matrix has a
       one-dimensional null space: its smallest singular value must be zero and the
       unit null vector ``w`` is then accurate to ``werr = zeta / sigma_m``.
       ``r(k) = sum_j w_j y_j / (k - s_j) / sum_j w_j / (k - s_j)``; each ``w_j`` must
       be nonzero (else that sample is unattainable).
    3. *Monomials.*  ``Q = sum_j w_j prod_{i != j} (k - s_i)``, ``P`` likewise with
       ``w_j y_j``.  ``deg Q = m`` (a pole at infinity is not attention) and
       ``Q(0) != 0`` are required; ``P``'s top coefficient is dropped when zero.

    Runs at ``20 + 4n`` extra bits (mpmath ``svd_r``).  Failures raise
    :class:`~exactlearn.errors.InterpolationError` or
    :class:`~exactlearn.errors.Undecided`.
    """
    n = 2 * H + 1
    dps = ctx.dps
    one = ctx.mpf(1)
    ymax = max(abs(y) for y in ys)
    if ymax == 0:
        return [], [one]
    gap = min((b - a for a, b in zip(ks, ks[1:])), default=one)
    if gap == 0:
        raise ValueError("rational interpolation needs distinct points")
    with ctx.extraprec(20 + 4 * n):
        zeta = 2 * n * noise * ymax / min(gap, 1)
        sv_margin = noise ** ctx.mpf(-0.1)
        derived_margin = min(sv_margin, ctx.mpf(1000))

        decide = _decider(ctx, noise, dps, derived_margin)

        def svd(rows, cols):
            return ctx.svd_r(loewner_matrix(ctx, ks, ys, rows, cols), full_matrices=True)

        sv = (sorted((abs(x) for x in svd([i for i in range(n) if i % 2],
                                          list(range(0, n, 2)))[1]), reverse=True)
              if n > 1 else [])
        m = sum(1 for i, x in enumerate(sv)
                if not decide(x, zeta, f"Loewner singular value {i + 1}", sv_margin))
        if m == 0:
            _constant_fit(ys, decide, 2 * noise * ymax, H)
            return [+ys[0]], [one]
        sup = sorted({int(ctx.nint(ctx.mpf(j * (n - 1)) / m)) for j in range(m + 1)})
        _, S, V = svd([i for i in range(n) if i not in sup], sup)
        S = sorted((abs(x) for x in S), reverse=True)
        if len(S) == m + 1 and not decide(S[m], zeta, f"the residual of the {m}-pole fit",
                                          sv_margin):
            raise InterpolationError(f"samples are not those of a rational function with "
                                     f"{m} poles (type ({H},{H}))")
        werr = zeta / S[m - 1]
        w = [V[m, j] for j in range(m + 1)]
        for j, x in enumerate(w):
            if decide(abs(x), werr, f"the weight at k = {ctx.nstr(ks[sup[j]], 5)}"):
                raise InterpolationError(f"samples are not those of a rational function of "
                                         f"type ({H},{H}) (unattainable point at "
                                         f"k = {ctx.nstr(ks[sup[j]], 5)})")
        P, Q, at0 = _monomials(ctx, ks, ys, sup, w, m)
        if decide(abs(Q[m]), werr * (m + 1), "the leading coefficient of Q"):
            raise InterpolationError("deg Q < number of poles: a pole at infinity, not attention")
        if decide(abs(Q[0]), werr * at0, "Q(0)"):
            raise InterpolationError("Q(0) = 0: a pole at k = 0 cannot come from attention")
        drop = decide(abs(P[m]), werr * sum(abs(ys[i]) for i in sup),
                      "the leading coefficient of P")
        P = [x / Q[0] for x in P]
        Q = [x / Q[0] for x in Q]
        if drop:
            P.pop()
    return [+x for x in P], [+x for x in Q]
