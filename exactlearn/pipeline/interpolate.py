"""Cauchy (rational) interpolation and the poles of f(q_k) (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works).

Along the query family q_k = (a, ..., a [k times], x), a = x + e,

    f(q_k) = V.a + sum_h c_h / (1 + k rho_h),  rho_h = exp(e^T W_h x),  c_h = -v_h.e ,

a rational function of k of type (H, H).  :func:`cauchy_interpolate` finds the
minimal-degree P/Q through 2H+1 samples with the extended Euclidean algorithm
applied to the interpolating polynomial L and prod(k - k_i), stopped at the
first remainder of degree <= H; :func:`poles` then reads off each canonical
head's ``rho_h = -1/p_h`` and ``c_h = rho_h * P(p_h) / Q'(p_h)``.

>>> from exactlearn.fields import QQ
>>> ks = [QQ(k) for k in range(5)]                        # H = 2: k = 0..4
>>> f = lambda k: QQ(7) + QQ(3) / (1 + 2 * k) + QQ(-1) / (1 + QQ("1/4") * k)
>>> rf = cauchy_interpolate(ks, [f(k) for k in ks], 2, QQ)
>>> sorted(poles(rf, QQ))
[(mpq(1,4), mpq(-1,1)), (mpq(2,1), mpq(3,1))]
>>> rf.limit(QQ)
mpq(7,1)
"""

from __future__ import annotations

from dataclasses import dataclass

import flint

from exactlearn.algebra.cauchy import (cauchy_flint, cauchy_from_interpolant,  # noqa: F401
                                       POLE_AT_ZERO, interpolants_mod_p, node_polynomial,
                                       normalised_fits)
from exactlearn.errors import InterpolationError

from exactlearn.algebra import polys
from exactlearn.fields.base import FieldError


@dataclass
class RationalFunction:
    """P/Q in lowest terms with Q(0) = 1."""

    P: list
    Q: list

    @property
    def n_poles(self) -> int:
        return polys.degree(self.Q)

    def __call__(self, k, K):
        return polys.evaluate(self.P, k, K) / polys.evaluate(self.Q, k, K)

    def limit(self, K):
        """lim_{k->oo} P/Q (the V.a of docs: explanation/algorithm.md#how-it-works); 0 when deg P < deg Q."""
        if polys.degree(self.P) > polys.degree(self.Q):
            raise InterpolationError("deg P > deg Q: not a bounded rational function of k")
        if polys.degree(self.P) < polys.degree(self.Q):
            return K.zero
        return self.P[-1] / self.Q[-1]


def cauchy_interpolate(ks, ys, H, K) -> RationalFunction:
    """Minimal P/Q with deg P, deg Q <= H through the 2H+1 points (ks, ys).

    Uses only field operations (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works).  Raises :class:`InterpolationError`
    when no P/Q of that type in lowest terms interpolates the data, or when
    Q(0) = 0 (a pole at k = 0 is impossible for attention).
    """
    hook = getattr(K, "rational_interpolate", None)
    if hook is not None:
        P, Q = hook(ks, ys, H)          # exact degrees: the hook decides them itself
        return _normalise(P, Q, K, trimmed=True)
    if len(ks) != 2 * H + 1 or len(ys) != len(ks):
        raise ValueError(f"need 2H+1 = {2 * H + 1} samples, got {len(ks)}")
    L = polys.newton_interpolate(ks, ys, K)
    r0, r1 = polys.from_roots(ks, K), L
    t0, t1 = [], [K.one]
    while polys.degree(r1) > H:
        q, r = polys.divmod_(r0, r1, K)
        r0, r1 = r1, r
        t0, t1 = t1, polys.sub(t0, polys.mul(q, t1, K), K)
    P, Q = r1, t1
    if polys.degree(Q) > H:
        raise InterpolationError(f"no rational function of type ({H},{H}) fits the samples")
    # the EEA solution solves P = Q*L mod prod(k - k_i); it interpolates iff Q(k_i) != 0
    for k in ks:
        if K.is_zero(polys.evaluate(Q, k, K)):
            raise InterpolationError("samples are not those of a rational function of type "
                                     f"({H},{H}) (unattainable point at k = {k})")
    return _normalise(P, Q, K)


def fmpz_mod_ring(K):
    """``(scalar context, polynomial ring)`` when K is F_p on python-flint ``fmpz_mod``
    (the modular fields), else None: the batched steps below run in C there."""
    ring = getattr(K, "poly_ring", None)
    if isinstance(ring, flint.fmpz_mod_poly_ctx) and getattr(K, "rational_interpolate", None):
        return K.scalar_ctx, ring
    return None


def interpolate_many(ks, ys_list, H, K) -> list:
    """``[cauchy_interpolate(ks, ys, H, K) for ys in ys_list]``, the first failure raised.

    Over F_p with the nodes k = 0..2H (the plan's) the interpolating polynomials of
    all families come from one matrix product (:func:`~exactlearn.algebra.cauchy.interpolants_mod_p`),
    then the same extended Euclidean algorithm runs per family: the same P/Q.

    >>> from exactlearn.fields import Modular
    >>> K = Modular(p=97)
    >>> ks = [K(k) for k in range(3)]
    >>> yss = [[K(2) + K(1) / (1 + 3 * k) for k in ks], [K(5) - K(4) / (1 + 7 * k) for k in ks]]
    >>> interpolate_many(ks, yss, 1, K) == [cauchy_interpolate(ks, ys, 1, K) for ys in yss]
    True
    """
    rings = fmpz_mod_ring(K)
    n = 2 * H + 1
    if (rings is None or len(ks) != n or any(int(k) != i for i, k in enumerate(ks))
            or any(len(ys) != n for ys in ys_list)):
        return [cauchy_interpolate(ks, ys, H, K) for ys in ys_list]
    ctx, ring = rings
    xs = [ctx(k) for k in ks]
    r0 = node_polynomial(xs, ring)
    if not all(type(y) is flint.fmpz_mod for ys in ys_list for y in ys):   # else as they are
        ys_list = [[ctx(y) for y in ys] for ys in ys_list]
    Ls = interpolants_mod_p(ys_list, ctx, ring)
    return [RationalFunction(P, Q) for P, Q in normalised_fits(Ls, r0, xs, H, ring, ctx)]


_POLE_AT_ZERO = POLE_AT_ZERO


def _normalise(P, Q, K, trimmed=False) -> RationalFunction:
    if not trimmed:
        P, Q = polys.trim(P, K), polys.trim(Q, K)
    if not Q or K.is_zero(Q[0]):
        raise InterpolationError(_POLE_AT_ZERO)
    inv = K.one / Q[0]
    if trimmed:
        return RationalFunction([c * inv for c in P], [c * inv for c in Q])
    return RationalFunction(polys.scale(P, inv, K), polys.scale(Q, inv, K))


def poles(rf: RationalFunction, K):
    """[(rho_h, c_h)] for the poles p_h = -1/rho_h of P/Q (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works).

    Raises :class:`~exactlearn.errors.NotSplit` when Q does not split into
    distinct linear factors over K, and :class:`InterpolationError` when a
    coefficient vanishes (P and Q not coprime).
    """
    if rf.n_poles <= 0:
        return []
    roots = K.roots(rf.Q)
    for p in roots:
        if K.is_zero(p):
            raise InterpolationError("pole at k = 0")
    return _with_coefficients(rf, [-K.one / p for p in roots], K, ps=roots)


def _with_coefficients(rf: RationalFunction, rhos, K, ps=None) -> list:
    """[(rho, c)] with c = rho P(p)/Q'(p) at p = -1/rho (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works); c = 0 is an error.

    ``ps``: the p = -1/rho when the caller has them (the roots themselves).  Over F_p the
    polynomials are evaluated by python-flint and the inversions batched (one inversion
    for all the poles, Montgomery's trick): the same values."""
    rings = fmpz_mod_ring(K)
    if rings is not None:
        Pf, dQf = rings[1](rf.P), rings[1](rf.Q).derivative()
        try:
            if ps is None:
                ps = [-x for x in batch_inverse(rhos, K)]
            inv_dq = batch_inverse(_at(dQf, ps), K)
        except ZeroDivisionError:
            inv_dq = None                  # a zero: the element-wise path raises as before
        if inv_dq is not None:
            out = []
            for rho, Pp, idq in zip(rhos, _at(Pf, ps), inv_dq):
                c = rho * Pp * idq
                if K.is_zero(c):
                    raise InterpolationError("a pole with zero coefficient: P and Q share a root")
                out.append((rho, c))
            return out
        ev_P, ev_dQ = Pf, dQf
    else:
        dQ = polys.derivative(rf.Q, K)
        ev_P = lambda p: polys.evaluate(rf.P, p, K)      # noqa: E731
        ev_dQ = lambda p: polys.evaluate(dQ, p, K)       # noqa: E731
    out = []
    for rho in rhos:
        p = -K.one / rho
        c = rho * ev_P(p) / ev_dQ(p)
        if K.is_zero(c):
            raise InterpolationError("a pole with zero coefficient: P and Q share a root")
        out.append((rho, c))
    return out


def _at(f, points) -> list:
    """``[f(x) for x in points]`` (python-flint's multipoint evaluation for several points)."""
    if len(points) > 2:
        return f.multipoint_evaluate(list(points))
    return [f(x) for x in points]


def batch_inverse(xs, K) -> list:
    """``[1/x for x in xs]`` with one inversion (Montgomery's trick); ZeroDivisionError
    when some x is 0.

    >>> from exactlearn.fields import Modular
    >>> K = Modular(p=97)
    >>> batch_inverse([K(2), K(5), K(96)], K) == [1 / K(2), 1 / K(5), 1 / K(96)]
    True
    """
    if not xs:
        return []
    pre = [xs[0]]
    for x in xs[1:]:
        pre.append(pre[-1] * x)
    inv = K.one / pre[-1]
    out = [None] * len(xs)
    for t in range(len(xs) - 1, 0, -1):
        out[t] = inv * pre[t - 1]
        inv = inv * xs[t]
    out[0] = inv
    return out


def poles_expected(rf: RationalFunction, rhos, K, ordered: bool = True):
    """:func:`poles` from candidate rho values (another prime's heads,
    :meth:`~exactlearn.fields.modular.Modular.know_exponents`), or None.

    Over F_p the distinct nonzero candidates' p = -1/rho are evaluated in Q at once
    (python-flint's multipoint evaluation); when exactly ``deg Q`` of them are roots they
    are all the roots (no more roots than the degree: Q splits into distinct linear
    factors), and the result is :func:`poles`' list -- sorted by the residue of p as
    :func:`poles` sorts (``ordered``), else in the candidates' order.  Otherwise None,
    and the caller goes the usual way.

    >>> from exactlearn.fields import Modular
    >>> K = Modular(p=97)
    >>> ks = [K(k) for k in range(5)]
    >>> rf = cauchy_interpolate(ks, [K(1) + K(2) / (1 + 3 * k) + K(5) / (1 + 10 * k) for k in ks], 2, K)
    >>> poles_expected(rf, [K(10), K(4), K(3)], K) == poles(rf, K), poles_expected(rf, [K(3)], K)
    (True, None)
    """
    rings = fmpz_mod_ring(K)
    m = rf.n_poles
    if rings is None or m <= 0:
        return None
    cands = []
    for rho in rhos:
        if not K.is_zero(rho) and rho not in cands:
            cands.append(rho)
    if len(cands) < m:
        return None
    ps = [-x for x in batch_inverse(cands, K)]
    found = [(p, rho) for p, rho, v in zip(ps, cands, _at(rings[1](rf.Q), ps)) if v == 0]
    if len(found) != m:
        return None
    if ordered:
        found.sort(key=lambda t: int(t[0]))
    return _with_coefficients(rf, [rho for _, rho in found], K, ps=[p for p, _ in found])


def poles_among(rf: RationalFunction, candidates, K, roots=None):
    """:func:`poles`, trying the candidate rho values before any root finding.

    If exactly ``deg Q`` distinct candidates are roots -1/rho of Q, they are all
    its roots (a polynomial has no more roots than its degree) and the result
    equals :func:`poles`; otherwise, and over an inexact field, it *is*
    :func:`poles`.  Used for matching configurations, whose rho are products of
    basis rho (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works).  Over F_p a candidate is
    tested as a root of the reversed Q (``z^n Q(-1/z)``, evaluated in C, no inversion);
    ``roots``, a set of rho already known to be poles (:func:`poles_paired`), replaces
    the test (and ``candidates`` may then be just those).

    >>> from exactlearn.fields import QQ
    >>> rf = cauchy_interpolate([QQ(k) for k in range(3)],
    ...                         [QQ(3) / (1 + 6 * k) for k in range(3)], 1, QQ)
    >>> poles_among(rf, [QQ(2) * QQ(3), QQ(5)], QQ) == poles(rf, QQ)
    True
    """
    m = rf.n_poles
    if m <= 0 or not K.is_exact:
        return poles(rf, K)
    if roots is not None:
        is_root = set(roots).__contains__
    else:
        rings = fmpz_mod_ring(K)
        if rings is not None:
            n = len(rf.Q) - 1
            rev = rings[1]([c if (n - i) % 2 == 0 else -c for i, c in enumerate(reversed(rf.Q))])
            is_root = lambda rho: rev(rho) == 0           # noqa: E731
        else:
            is_root = lambda rho: K.is_zero(polys.evaluate(rf.Q, -K.one / rho, K))  # noqa: E731
    found = []
    seen = set()
    for rho in candidates:
        if K.is_zero(rho) or rho in seen:
            continue
        seen.add(rho)
        if is_root(rho):
            found.append(rho)
    if len(found) != m:
        return poles(rf, K)
    return _with_coefficients(rf, found, K)


def poles_paired(rf_b: RationalFunction, rf_w: RationalFunction, alphas, K):
    """The poles of a basis configuration (x_i, e_j) as :func:`poles` returns them, found
    without root finding from its matching configuration (x_i, e_1 + e_j), whose rho are
    ``alpha_g * gamma_g`` (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works): for each rho
    ``alpha_g`` of (x_i, e_1), the pole -1/gamma_g of Q_b is the common root of
    ``Q_b(k)`` and ``Q_w(k / alpha_g)`` (a gcd over F_p, in C); each root found is divided
    out of Q_b (and its partner out of Q_w), so the later gcds have lower degrees.

    Returns ``(poles of rf_b, the rho of rf_w)``, or None -- then nothing is
    claimed and the caller finds the roots (:func:`poles`) -- unless every gcd is
    linear and the deg Q_b roots found are distinct: then they are all the roots of
    Q_b, which splits, so :func:`poles` would return the same list; the products
    ``alpha_g gamma_g`` are roots of Q_w, all of them when they are deg Q_w distinct.
    They come in the order in which :func:`poles_among` meets them among the products
    (alpha index, then gamma index) -- unless a product of two *other* poles equals one
    of them, when only that order may differ: the labels follow the basis
    configurations, so no result reads it.

    >>> from exactlearn.fields import Modular
    >>> K = Modular(p=97)
    >>> ks = [K(k) for k in range(5)]
    >>> f = lambda k, r, c: K(1) + sum(ci / (1 + k * ri) for ri, ci in zip(r, c))
    >>> al, ga = [K(3), K(10)], [K(5), K(7)]
    >>> rf_b = cauchy_interpolate(ks, [f(k, ga, [K(2), K(9)]) for k in ks], 2, K)
    >>> rf_w = cauchy_interpolate(ks, [f(k, [a * g for a, g in zip(al, ga)], [K(4), K(6)]) for k in ks], 2, K)
    >>> got, w = poles_paired(rf_b, rf_w, al, K)
    >>> got == poles(rf_b, K), w == [K(15), K(70)]
    (True, True)
    """
    rings = fmpz_mod_ring(K)
    m = rf_b.n_poles
    if rings is None or m <= 0 or len(alphas) != m or rf_w.n_poles != m:
        return None
    ring = rings[1]
    Qb, Qw = ring(rf_b.Q), ring(rf_w.Q)
    if any(K.is_zero(alpha) for alpha in alphas):
        return None
    ks = []
    for inv in batch_inverse(alphas, K):
        if Qb.degree() == 1:         # its root k, common with Q_w(k / alpha) (a linear gcd) or not
            c0, c1 = Qb.coeffs()
            k = -c0 / c1
            if Qw(k * inv) != 0:
                return None
        else:
            G = Qb.gcd(Qw.compose(ring([0, inv])))   # Q_w(k / alpha); monic (python-flint)
            if G.degree() != 1:
                return None
            g0, g1 = G.coeffs()
            k = -g0 if g1 == 1 else -g0 / g1
            Qb = Qb.exact_division(ring([-k, 1]))   # deflate both: the later gcds have lower degrees
            Qw = Qw.exact_division(ring([-k * inv, 1]))
        ks.append(k)
    if len(set(ks)) != m or any(K.is_zero(k) for k in ks):
        return None
    rhos = [-x for x in batch_inverse(ks, K)]                 # rho_g = -1/k_g
    order = sorted(range(m), key=lambda g: int(ks[g]))          # poles() sorts by residue
    basis = _with_coefficients(rf_b, [rhos[g] for g in order], K, ps=[ks[g] for g in order])
    # alpha_g * gamma_g, in the order of the candidates (alpha index, then gamma index)
    joint = [alphas[g] * rhos[g] for g in range(m)]
    return basis, (joint if len(set(joint)) == m else None)
