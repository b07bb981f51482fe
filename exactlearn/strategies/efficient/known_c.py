"""Families whose coefficients are known: fewer samples, still exact (docs: explanation/efficient-plan.md,
"Fewer samples once v is known").

Once every v_h is known, a configuration (x, e) has known, labelled coefficients
c_h = −v_h·e, and its family

    g(k) = f(q_k) − V·a = Σ_h c_h / (1 + k ρ_h)

has only its H poles ρ_h left to find.  Two exact tools use that:

* :func:`poles_known_c` -- the poles of a family from its values at k = 1..2H−2 (one
  fewer than :func:`~exactlearn.strategies.efficient.lean.poles_through_limit` needs),
  together with a *proof* that no other choice of poles with those labelled c-values
  reproduces them: in s = 1/k the family is s·N(s)/D(s) with D = Π(s + ρ_h) monic and
  N = Σ_h c_h Π_{g≠h}(s + ρ_g); the samples are linear equations on (N, D), whose
  solutions form a line (N_t, D_t) = (N_0, D_0) + t (N_1, D_1); the pole sets with the
  right residues are among the common roots of R_h(t) = Res_s(D_t, N_t − c_h D_t'),
  h = 1, 2; when gcd(R_1, R_2) is linear there is exactly one.  Otherwise it returns
  None and the caller asks the family's last sample (a counted fallback).
* :func:`pairings` -- which pairing of two labelled configurations (x_1, e_1) and
  (x_1, e_j) a matching configuration (x_1, e_1 + e_j) shows, from its value at
  k = 1 alone: each of the H! pairings predicts that value exactly.

Over every exact field, with ``+ − × ÷``, equality and ``K.roots`` only.

>>> from exactlearn.fields import Modular
>>> K = Modular(p=10007)
>>> rho, c = [K(3), K(5), K(11)], [K(2), K(-1), K(7)]
>>> g = lambda k: sum((ci / (1 + k * ri) for ri, ci in zip(rho, c)), K.zero)
>>> poles_known_c([g(K(k)) for k in range(1, 5)], c, K) == rho          # 2H - 2 = 4 samples
True
"""

from __future__ import annotations

import itertools

from exactlearn.algebra import linalg, polys
from exactlearn.errors import FieldError
from exactlearn.pipeline.interpolate import fmpz_mod_ring

__all__ = ["samples_basis", "samples_within", "MAX_PAIRING_HEADS", "poles_known_c", "pole_sets", "line_of_families",
           "resultant_monic", "pairings"]

#: The within configurations are asked at k = 1 alone when H! pairings are few enough
#: to try them all (720 for H = 6); above it they keep 2H − 1 samples.
MAX_PAIRING_HEADS = 6


def samples_basis(H: int) -> int:
    """Samples k = 1..n of a basis configuration (x_i, e_j), i ≥ 2, of the full efficient
    plan: 2H − 2 for H ≥ 3 (its c-values are known from the group of x_1:
    :func:`poles_known_c`); 2H − 1 for H ≤ 2, where 2H − 2 ≤ H samples leave the poles
    undetermined (docs/explanation/efficient-plan.md)."""
    return 2 * H - 2 if H >= 3 else 2 * H - 1


def samples_within(H: int) -> int:
    """Samples of a matching configuration (x_1, e_1 + e_j): 1 for 2 ≤ H ≤
    MAX_PAIRING_HEADS (:func:`pairings`), else 2H − 1."""
    return 1 if 2 <= H <= MAX_PAIRING_HEADS else 2 * H - 1


def line_of_families(gs, cs, K):
    """The (N, D) (coefficient lists in s = 1/k, lowest first; D monic of degree H, N of
    degree ≤ H − 1 with leading coefficient Σ c_h) whose s·N(s)/D(s) takes the values
    ``gs`` at k = 1..n, as ``(N_0, D_0, N_1, D_1)``: every solution is
    (N_0 + t N_1, D_0 + t D_1) for one t.  None when the solutions are not a line (the
    n equations have rank below 2H − 2, or none solves them)."""
    H = len(cs)
    m = 2 * H - 1                              # unknowns d_0..d_{H-1}, n_0..n_{H-2}
    lc = sum(cs, K.zero)
    rows = []
    for k, g in enumerate(gs, start=1):
        s = K.one / K(k)
        z = K(k) * g                           # N(s)/D(s) = k g(k)
        pw = [K.one]
        for _ in range(H):
            pw.append(pw[-1] * s)
        rows.append([z * pw[t] for t in range(H)] + [-pw[t] for t in range(H - 1)]
                    + [lc * pw[H - 1] - z * pw[H]])
    R, piv = linalg.rref(rows, K)
    if m in piv or len(piv) != m - 1:          # inconsistent, or not a line
        return None
    free = next(col for col in range(m) if col not in piv)
    part, dirn = [K.zero] * m, [K.zero] * m
    dirn[free] = K.one
    for row, p in zip(R, piv):
        part[p] = row[m]
        dirn[p] = -row[free]
    D0, D1 = part[:H] + [K.one], dirn[:H] + [K.zero]
    N0, N1 = part[H:] + [lc], dirn[H:] + [K.zero]
    return N0, D0, N1, D1


def resultant_monic(D, G, K):
    """Π G(r) over the roots r of the monic D (with multiplicity): Res(D, G), computed by
    Euclid's algorithm, a polynomial in the coefficients of D and G.

    >>> from exactlearn.fields import QQ
    >>> D = polys.from_roots([QQ(1), QQ(2)], QQ)                 # (s - 1)(s - 2)
    >>> resultant_monic(D, [QQ(0), QQ(0), QQ(1)], QQ)             # G = s^2: 1 * 4
    mpq(4,1)
    """
    A, B = polys.trim(D, K), polys.trim(G, K)
    if not B:
        return K.zero
    acc = K.one
    while True:                                # invariant: answer = acc * Res(A, B), A monic-free
        a, b = polys.degree(A), polys.degree(B)
        if b == 0:
            return acc * _power(B[0], a, K) if a > 0 else acc
        _, R = polys.divmod_(A, B, K)
        if not R:
            return K.zero
        r = polys.degree(R)
        # Res(A, B) = (-1)^(ab) Res(B, A) = (-1)^(ab) lc(B)^(a - r) Res(B, R)
        acc = acc * _power(B[-1], a - r, K)
        if (a * b) % 2:
            acc = -acc
        A, B = B, R


def _power(x, n, K):
    out = K.one
    for _ in range(n):
        out = out * x
    return out


def _gcd(f, g, K):
    rings = fmpz_mod_ring(K)
    if rings is not None:               # F_p on python-flint: the same monic-up-to-scale gcd, in C
        return polys.trim(list(rings[1](f).gcd(rings[1](g)).coeffs()), K)
    f, g = polys.trim(f, K), polys.trim(g, K)
    while g:
        f, g = g, polys.divmod_(f, g, K)[1]
    return f


def _in_t(N0, D0, N1, D1, c, H, K):
    """R(t) = Res_s(D_t, N_t − c D_t') as a polynomial in t (degree ≤ 2H − 1), from its
    values at t = 0..2H − 1."""
    ts, vals = [], []
    rings = fmpz_mod_ring(K)
    for t in range(2 * H):
        tt = K(t)
        D = [a + tt * b for a, b in zip(D0, D1)]
        N = [a + tt * b for a, b in zip(N0, N1)]
        dD = polys.derivative(D, K)
        G = [n - c * (dD[i] if i < len(dD) else K.zero) for i, n in enumerate(N)]
        ts.append(tt)
        if rings is not None:           # F_p on python-flint: Res(D, G) = prod G(r) (D monic), in C
            vals.append(rings[1](D).resultant(rings[1](G)))
        else:
            vals.append(resultant_monic(D, G, K))
    return polys.trim(polys.newton_interpolate(ts, vals, K), K)


def poles_known_c(gs, cs, K):
    """The labelled poles [ρ_h] of g(k) = Σ_h c_h/(1 + k ρ_h) from ``gs`` = g(1..2H−2)
    and the labelled, pairwise distinct, nonzero ``cs`` (H ≥ 2; for H = 2 generically None,
    since two pole lists pass through H = 2H − 2 samples -- see :func:`pole_sets` -- and an
    answer only where the second one is absent, still the only list), or None.

    Not None only when the answer is the *only* one: every list of H nonzero poles
    (distinct or not) whose family with the coefficients ``cs`` takes the values ``gs``
    is this list (docs/explanation/efficient-plan.md, "Fewer samples once v is known",
    has the proof) -- the unreduced (N, D) of any such family lies on
    :func:`line_of_families`' line and its t is a common root of R_1 and R_2, whose gcd
    is then linear; and the poles come out as H distinct roots of D_t whose residues are
    the c-values, one each.  None otherwise: the caller asks the family's last sample.
    """
    got = _common_roots(gs, cs, K)
    if got is None or polys.degree(got[1]) != 1:
        return None
    G = got[1]
    return _poles_at(got[0], -G[0] / G[1], cs, K)


def pole_sets(gs, cs, K) -> list:
    """Every labelled pole list [ρ_h] (distinct, nonzero, split over K) whose family with
    the coefficients ``cs`` takes the values ``gs`` at k = 1..2H−2 (H ≥ 2, c-values
    distinct), found among the common roots of R_1 and R_2; [] when the samples leave more
    than a line of (N, D).  For H ≥ 3 generically one; for H = 2 (2H − 2 = H samples)
    generically two -- why the plan keeps 2H − 1 samples there.

    >>> from exactlearn.fields import Modular
    >>> K = Modular(p=10007)
    >>> rho, c = [K(3), K(5)], [K(2), K(-1)]
    >>> g = lambda k: sum((ci / (1 + k * ri) for ri, ci in zip(rho, c)), K.zero)
    >>> sets = pole_sets([g(K(1)), g(K(2))], c, K)
    >>> len(sets), rho in sets
    (2, True)
    """
    got = _common_roots(gs, cs, K)
    if got is None:
        return []
    line, G = got
    try:
        ts = K.roots(G) if polys.degree(G) >= 1 else []
    except (FieldError, ArithmeticError, ValueError):
        return []
    out = []
    for t in ts:
        rho = _poles_at(line, t, cs, K)
        if rho is not None:
            out.append(rho)
    return out


def _common_roots(gs, cs, K):
    """(the line, gcd(R_1, R_2)) or None (not a line, or a resultant identically 0)."""
    H = len(cs)
    if H < 2 or len(gs) != 2 * H - 2:
        return None
    line = line_of_families(gs, cs, K)
    if line is None:
        return None
    N0, D0, N1, D1 = line
    R1 = _in_t(N0, D0, N1, D1, cs[0], H, K)
    R2 = _in_t(N0, D0, N1, D1, cs[1], H, K)
    if not R1 or not R2:
        return None
    return line, _gcd(R1, R2, K)


def _poles_at(line, t, cs, K):
    """The labelled poles of the point t of the line, or None when D_t does not split into
    H distinct nonzero roots whose residues are the c-values, one each."""
    H = len(cs)
    N0, D0, N1, D1 = line
    D = polys.trim([a + t * b for a, b in zip(D0, D1)], K)
    N = polys.trim([a + t * b for a, b in zip(N0, N1)], K)
    try:
        roots = K.roots(D)
    except (FieldError, ArithmeticError, ValueError):
        return None
    if len(roots) != H:
        return None
    dD = polys.derivative(D, K)
    rho = [None] * H
    for r in roots:
        res = polys.evaluate(N, r, K) / polys.evaluate(dD, r, K)
        h = [i for i, c in enumerate(cs) if K.eq(c, res)]
        if len(h) != 1 or rho[h[0]] is not None or K.is_zero(r):
            return None
        rho[h[0]] = -r
    return rho


def pairings(ref, other, y, limit, K, stop: int = 2) -> list:
    """The pairings π (tuples: head h of ``ref`` with pole π[h] of ``other``) whose
    matching family Σ_h (c_h + γ_π(h)) / (1 + k α_h β_π(h)) takes the value ``y − limit``
    at k = 1; ``ref`` = [(α_h, c_h)], ``other`` = [(β_g, γ_g)] (docs/explanation/efficient-plan.md).
    A pairing with 1 + α_h β_π(h) = 0 cannot give a value and is skipped.  At most
    ``stop`` are returned (the caller needs to know whether exactly one does).

    >>> from exactlearn.fields import QQ
    >>> ref, other = [(QQ(2), QQ(1)), (QQ(3), QQ(-2))], [(QQ(5), QQ(4)), (QQ(7), QQ(1))]
    >>> y = (QQ(1) + 1) / (1 + 2 * 7) + (QQ(-2) + 4) / (1 + 3 * 5)   # the pairing (1, 0)
    >>> pairings(ref, other, y, QQ(0), QQ)
    [(1, 0)]
    """
    H = len(ref)
    target = y - limit
    term = [[None if K.is_zero(K.one + a * b) else (c + g) / (K.one + a * b) for (b, g) in other]
            for (a, c) in ref]
    out = []
    for perm in itertools.permutations(range(H)):
        acc = K.zero
        for h, g in enumerate(perm):
            x = term[h][g]
            if x is None:
                break
            acc = acc + x
        else:
            if K.eq(acc, target):
                out.append(perm)
                if len(out) >= stop:
                    break
    return out
