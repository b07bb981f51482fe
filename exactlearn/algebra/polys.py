"""Dense univariate polynomials over any field of :mod:`exactlearn.fields`.

A polynomial is a list of coefficients, lowest degree first, trimmed so that
the leading coefficient is nonzero (the zero polynomial is ``[]``).  Every
function takes the field ``K`` last, sympy ``dup_*`` style, and uses only
``+ - * /`` and ``K.is_zero``.

>>> from exactlearn.fields import QQ
>>> f = mul([QQ(1), QQ(1)], [QQ(2), QQ(1)], QQ)          # (1 + k)(2 + k)
>>> f, evaluate(f, QQ(-2), QQ), derivative(f, QQ)
([mpq(2,1), mpq(3,1), mpq(1,1)], mpq(0,1), [mpq(3,1), mpq(2,1)])
>>> divmod_(f, [QQ(1), QQ(1)], QQ)
([mpq(2,1), mpq(1,1)], [])
"""

from __future__ import annotations


def trim(f, K):
    f = list(f)
    while f and K.is_zero(f[-1]):
        f.pop()
    return f


def degree(f) -> int:
    """Degree of a trimmed polynomial; -1 for zero."""
    return len(f) - 1


def add(f, g, K):
    n = max(len(f), len(g))
    return trim([(f[i] if i < len(f) else K.zero) + (g[i] if i < len(g) else K.zero)
                 for i in range(n)], K)


def sub(f, g, K):
    n = max(len(f), len(g))
    return trim([(f[i] if i < len(f) else K.zero) - (g[i] if i < len(g) else K.zero)
                 for i in range(n)], K)


def scale(f, c, K):
    return trim([a * c for a in f], K)


def mul(f, g, K):
    if not f or not g:
        return []
    out = [K.zero] * (len(f) + len(g) - 1)
    for i, a in enumerate(f):
        for j, b in enumerate(g):
            out[i + j] = out[i + j] + a * b
    return trim(out, K)


def divmod_(f, g, K):
    """Quotient and remainder of f by a nonzero trimmed g."""
    g = trim(g, K)
    if not g:
        raise ZeroDivisionError("polynomial division by zero")
    r = list(trim(f, K))
    dg = len(g) - 1
    if len(r) - 1 < dg:
        return [], r
    q = [K.zero] * (len(r) - dg)
    inv = K.one / g[-1]
    for i in range(len(r) - 1 - dg, -1, -1):
        c = r[i + dg] * inv
        q[i] = c
        if not K.is_zero(c):
            for j in range(dg + 1):
                r[i + j] = r[i + j] - c * g[j]
        r[i + dg] = K.zero  # exact by construction (removes rounding in the real field)
    return trim(q, K), trim(r[:dg], K)


def evaluate(f, x, K):
    acc = K.zero
    for c in reversed(f):
        acc = acc * x + c
    return acc


def derivative(f, K):
    return trim([f[i] * i for i in range(1, len(f))], K)


def from_roots(xs, K):
    """prod (k - x) for x in xs."""
    out = [K.one]
    for x in xs:
        out = mul(out, [-x, K.one], K)
    return out


def newton_interpolate(xs, ys, K):
    """The polynomial of degree < len(xs) through (xs[i], ys[i]) (Newton form)."""
    n = len(xs)
    coef = list(ys)
    for j in range(1, n):
        for i in range(n - 1, j - 1, -1):
            coef[i] = (coef[i] - coef[i - 1]) / (xs[i] - xs[i - j])
    # expand the Newton form
    out = [coef[-1]]
    for i in range(n - 2, -1, -1):
        out = add(mul(out, [-xs[i], K.one], K), [coef[i]], K)
    return trim(out, K)
