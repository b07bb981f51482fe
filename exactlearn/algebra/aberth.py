"""All complex roots of a polynomial in an mpmath context: Aberth--Ehrlich (docs: explanation/real-field.md).

The real field's ``roots`` decides which roots are real and distinct; the
numbers come from here.  Every function takes the mpmath context ``ctx`` first
(``mpmath.mp``, or a field's own ``MPContext``) and works at its current
precision, mpmath style; coefficients are listed lowest degree first.
(``ctx.polyroots`` is not used: its stopping test is absolute,
``|correction| < eps``, which a root of size ``>> 1`` cannot meet, so it fails on
e.g. degree 12 with roots spread over 1e-1 .. 1e7.)

>>> import mpmath
>>> ctx = mpmath.MPContext()
>>> sorted(mpmath.nstr(r.real, 8) for r in aberth(ctx, [ctx.mpf(2), 3, 1], 50))   # (k+1)(k+2)
['-1.0', '-2.0']
>>> root_size(ctx, [ctx.mpf(0), 4, 0, 1])                   # roots 0, +-2i: sqrt(4/1)
mpf('2.0')
"""

from __future__ import annotations


def root_size(ctx, cs):
    """Geometric mean of the root sizes, ``|c_lo / c_n|^(1/(n - lo))`` (1 if all roots are 0)."""
    n = len(cs) - 1
    lo = next(i for i, c in enumerate(cs) if c != 0)
    if lo == n:
        return ctx.mpf(1)
    return abs(cs[lo] / cs[n]) ** (ctx.mpf(1) / (n - lo))


def initial_roots(ctx, cs):
    """Starting points for Aberth: circles whose radii are read off the Newton polygon
    (upper convex hull of ``(i, log|c_i|)``), as in Bini's MPSolve."""
    n = len(cs) - 1
    pts = [(i, ctx.log(abs(c))) for i, c in enumerate(cs) if c != 0]
    hull = []
    for p in pts:
        while len(hull) >= 2:
            (i0, y0), (i1, y1) = hull[-2], hull[-1]
            if (y1 - y0) * (p[0] - i0) <= (p[1] - y0) * (i1 - i0):
                hull.pop()
            else:
                break
        hull.append(p)
    zs = []
    for (i0, y0), (i1, y1) in zip(hull, hull[1:]):
        m = i1 - i0
        r = ctx.exp((y0 - y1) / m)
        for j in range(m):
            zs.append(r * ctx.expjpi(ctx.mpf(2 * j) / m + ctx.mpf(len(zs) + 1) / (n + 1) + 0.1))
    return zs


def aberth(ctx, cs, maxsteps):
    """All roots of ``sum(cs[i] k^i)`` (``cs[0] != 0``, degree >= 1) by the Aberth-Ehrlich
    iteration at the current precision; None if it does not settle in ``maxsteps`` sweeps.

    A root is frozen once it is as good as the precision allows: either its correction
    is relatively tiny, ``|w| <= 2^(8-prec) |z|``, or ``|p(z)|`` is within the rounding
    error of Horner's rule, ``|p(z)| <= 4 n 2^-prec sum |c_i| |z|^i`` (MPSolve's test:
    then z is an exact root of a polynomial within that relative distance).  Its error
    is then ``2^-prec`` times its condition number, which the caller's extra bits absorb.
    """
    n = len(cs) - 1
    zs = initial_roots(ctx, cs)
    eps = ctx.ldexp(1, 8 - ctx.prec)
    horner_eps = ctx.ldexp(4 * n, -ctx.prec)
    abs_cs = [abs(c) for c in cs]
    frozen = [False] * n
    for _ in range(maxsteps):
        for i in range(n):
            if frozen[i]:
                continue
            z = zs[i]
            p, dp, bound, az = cs[n], ctx.mpc(0), abs_cs[n], abs(z)
            for c, ac in zip(reversed(cs[:n]), reversed(abs_cs[:n])):
                dp = dp * z + p
                p = p * z + c
                bound = bound * az + ac
            if abs(p) <= horner_eps * bound:
                frozen[i] = True
                continue
            s = ctx.mpc(0)
            for j in range(n):
                if j != i and z != zs[j]:
                    s += 1 / (z - zs[j])
            if dp == 0:
                w = p * eps                      # nudge off a critical point
            else:
                N = p / dp
                w = N / (1 - N * s)
            zs[i] = z - w
            if abs(w) <= eps * abs(zs[i]):
                frozen[i] = True
        if all(frozen):
            return zs
    return None
