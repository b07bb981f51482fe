"""Many discrete logs at once: the small-log path of :class:`~exactlearn.algebra.dlog.DiscreteLog`
over a list, node by node (docs: explanation/performance.md#scale).

:meth:`DiscreteLog.symmetric_checked <exactlearn.algebra.dlog.DiscreteLog.symmetric_checked>`
first tries a log from the low digits of the 2-power part of p - 1 (a divide and conquer of
about 15 python calls per log).  :func:`symmetric_small` runs that path for a whole list: each
node of the divide and conquer once over the list, its powers in gmpy2's list calls
(``powmod_base_list``, ``powmod_exp_list``), and the one candidate per value tested by
``omega^n == x`` as there -- a tested n in the symmetric range *is* the log.  The values it
cannot settle come back as None, for :meth:`~exactlearn.algebra.dlog.DiscreteLog.symmetric_checked`.

>>> from exactlearn.algebra.dlog import DiscreteLog
>>> dl = DiscreteLog(97, 5, {2: 5, 3: 1}, table_bits=1)
>>> symmetric_small(dl, [pow(5, n % 96, 97) for n in (3, -2, 5, 40)], 5)
[3, -2, 5, None]
"""

from __future__ import annotations

import gmpy2

from .dlog import strip_windows


def symmetric_small(dl, xs, omega) -> list:
    """Per residue x of ``xs`` (ints in [1, p)): the log n of ``dl.symmetric_checked(x, omega)``
    when its early path finds it (|n| < q^k / 2, k = ``small_bits``, and ``omega^n == x``),
    else None."""
    part = dl.small_part(omega)
    if part is None or not xs:
        return [None] * len(xs)
    m, solve, inv = part
    P, qk = dl.p, solve.q ** solve.small_bits
    hs = gmpy2.powmod_base_list(xs, m * solve.q ** (solve.e - solve.small_bits), P)
    ns = [low if 2 * low < qk else low - qk for low in low_many(solve, hs, solve.small_bits)]
    up = gmpy2.powmod_exp_list(omega, [n if n > 0 else 0 for n in ns], P)
    down = gmpy2.powmod_exp_list(inv, [-n if n < 0 else 0 for n in ns], P)
    return [int(n) if (u if n >= 0 else v) == x else None for n, u, v, x in zip(ns, up, down, xs)]


def low_many(solve, hs, k) -> list:
    """``[solve.low(h, k) for h in hs]`` for a :class:`~exactlearn.algebra.dlog._SplitPrimePowerLog`
    ``solve``: the same logs, node by node over the list.

    >>> from gmpy2 import mpz
    >>> from exactlearn.algebra.dlog import DiscreteLog
    >>> solve = DiscreteLog(97, 5, {2: 5, 3: 1}, table_bits=2).small_part(5)[1]
    >>> hs = [gmpy2.powmod(solve.g, x, mpz(97)) for x in range(32)]
    >>> low_many(solve, hs, 5) == [solve.low(h, 5) for h in hs] == list(range(32))
    True
    """
    split, lookup = solve.nodes[k]
    if split is None:
        ds = list(map(lookup, hs))
        if None in ds:
            raise ArithmeticError("discrete log failed: omega is not a primitive root")
        return ds
    k1, k2, qk2, qk1, qw, tables = split
    P = solve.P
    lows = low_many(solve, gmpy2.powmod_base_list(hs, qk2, P), k1)
    rest = [strip_windows(h, x, tables, qw, P) for h, x in zip(hs, lows)]
    return [lo + qk1 * hi for lo, hi in zip(lows, low_many(solve, rest, k2))]


def field_logs(K, elements, discrete_log, cache) -> list:
    """``[K.log(a) for a in elements]`` for a modular field K (``Modular.logs``): the small logs
    of a list of nonzero elements found at once (:func:`symmetric_small`), each remembered in
    ``cache`` as ``K.power(n)`` (``K.log`` remembers a tested log so); the others, and any list
    without ``discrete_log`` (a field whose log differs: False), element by element by
    ``K.log``, which raises as it raises."""
    if not discrete_log or len(elements) < 2 or K.expected_exponents:
        return [K.log(a) for a in elements]
    try:
        els = [K(a) for a in elements]
    except Exception:               # noqa: BLE001 -- K.log converts again and raises in order
        return [K.log(a) for a in elements]
    xs = [int(el) for el in els]
    if 0 in xs:
        return [K.log(a) for a in elements]
    out, D = [], K.D
    for el, n in zip(els, symmetric_small(discrete_log(K.p, K.omega), xs, K.omega)):
        if n is None:
            out.append(K.log(el))
            continue
        if len(cache) < 1 << 16:
            cache[n] = el
        out.append(gmpy2.mpq(n, D))
    return out
