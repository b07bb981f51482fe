"""Cauchy (rational) interpolation and the poles of f(q_k) (arXiv:2608.03294; README, "How it works").

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

from exactlearn.algebra.cauchy import cauchy_flint  # noqa: F401  (re-exported)
from exactlearn.errors import InterpolationError
from dataclasses import dataclass

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
        """lim_{k->oo} P/Q (the V.a of README, "How it works"); 0 when deg P < deg Q."""
        if polys.degree(self.P) > polys.degree(self.Q):
            raise InterpolationError("deg P > deg Q: not a bounded rational function of k")
        if polys.degree(self.P) < polys.degree(self.Q):
            return K.zero
        return self.P[-1] / self.Q[-1]


def cauchy_interpolate(ks, ys, H, K) -> RationalFunction:
    """Minimal P/Q with deg P, deg Q <= H through the 2H+1 points (ks, ys).

    Uses only field operations (arXiv:2608.03294; README, "How it works").  Raises :class:`InterpolationError`
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


def _normalise(P, Q, K, trimmed=False) -> RationalFunction:
    if not trimmed:
        P, Q = polys.trim(P, K), polys.trim(Q, K)
    if not Q or K.is_zero(Q[0]):
        raise InterpolationError("Q(0) = 0: a pole at k = 0 cannot come from attention")
    inv = K.one / Q[0]
    if trimmed:
        return RationalFunction([c * inv for c in P], [c * inv for c in Q])
    return RationalFunction(polys.scale(P, inv, K), polys.scale(Q, inv, K))


def poles(rf: RationalFunction, K):
    """[(rho_h, c_h)] for the poles p_h = -1/rho_h of P/Q (arXiv:2608.03294; README, "How it works").

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
    return _with_coefficients(rf, [-K.one / p for p in roots], K)


def _with_coefficients(rf: RationalFunction, rhos, K) -> list:
    """[(rho, c)] with c = rho P(p)/Q'(p) at p = -1/rho (arXiv:2608.03294; README, "How it works"); c = 0 is an error."""
    dQ = polys.derivative(rf.Q, K)
    out = []
    for rho in rhos:
        p = -K.one / rho
        c = rho * polys.evaluate(rf.P, p, K) / polys.evaluate(dQ, p, K)
        if K.is_zero(c):
            raise InterpolationError("a pole with zero coefficient: P and Q share a root")
        out.append((rho, c))
    return out


def poles_among(rf: RationalFunction, candidates, K):
    """:func:`poles`, trying the candidate rho values before any root finding.

    If exactly ``deg Q`` distinct candidates are roots -1/rho of Q, they are all
    its roots (a polynomial has no more roots than its degree) and the result
    equals :func:`poles`; otherwise, and over an inexact field, it *is*
    :func:`poles`.  Used for matching configurations, whose rho are products of
    basis rho (arXiv:2608.03294; README, "How it works").

    >>> from exactlearn.fields import QQ
    >>> rf = cauchy_interpolate([QQ(k) for k in range(3)],
    ...                         [QQ(3) / (1 + 6 * k) for k in range(3)], 1, QQ)
    >>> poles_among(rf, [QQ(2) * QQ(3), QQ(5)], QQ) == poles(rf, QQ)
    True
    """
    m = rf.n_poles
    if m <= 0 or not K.is_exact:
        return poles(rf, K)
    found = []
    seen = set()
    for rho in candidates:
        if K.is_zero(rho) or rho in seen:
            continue
        seen.add(rho)
        if K.is_zero(polys.evaluate(rf.Q, -K.one / rho, K)):
            found.append(rho)
    if len(found) != m:
        return poles(rf, K)
    return _with_coefficients(rf, found, K)
