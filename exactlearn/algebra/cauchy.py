"""Cauchy (rational) interpolation on python-flint polynomials (docs: explanation/algorithm.md#how-it-works).

The exact fields' fast path of :func:`exactlearn.pipeline.interpolate.cauchy_interpolate`:
the same algorithm (Newton interpolation, then the extended Euclidean algorithm
stopped at degree <= H), run in C on the field's own polynomial ring, its
``poly_ring`` -- ``fmpq_poly`` for Q, an ``fmpz_mod_poly`` context for F_p.
:func:`exactlearn.fields.base.flint_rational_interpolate` converts the elements
and calls it for every field that has one.

>>> import flint
>>> xs = [flint.fmpq(k) for k in range(3)]
>>> ys = [flint.fmpq(2) + flint.fmpq(1) / (1 + 3 * x) for x in xs]     # H = 1
>>> P, Q = cauchy_flint(xs, ys, 1, flint.fmpq_poly)
>>> [P(x) / Q(x) == y for x, y in zip(xs, ys)]
[True, True, True]
"""

from __future__ import annotations

import functools

import flint

from exactlearn.errors import InterpolationError


def cauchy_flint(xs, ys, H, make_poly) -> tuple:
    """:func:`~exactlearn.pipeline.interpolate.cauchy_interpolate`'s algorithm on python-flint polynomials.

    ``make_poly(coeffs)`` builds a flint polynomial (``fmpq_poly``, or an
    ``fmpz_mod_poly`` context) and ``xs``, ``ys`` are matching flint scalars.
    Newton interpolation, then the extended Euclidean algorithm stopped at
    degree <= H, in C.  Returns flint polynomials (P, Q), Q not normalised.
    Fields with a ``poly_ring`` reach it through
    :func:`exactlearn.fields.base.flint_rational_interpolate`.
    """
    if len(xs) != 2 * H + 1 or len(ys) != len(xs):
        raise ValueError(f"need 2H+1 = {2 * H + 1} samples, got {len(xs)}")
    coef = list(ys)
    n = len(xs)
    for j in range(1, n):
        for i in range(n - 1, j - 1, -1):
            coef[i] = (coef[i] - coef[i - 1]) / (xs[i] - xs[i - j])
    L = make_poly([coef[-1]])
    for i in range(n - 2, -1, -1):
        L = L * make_poly([-xs[i], 1]) + make_poly([coef[i]])
    return cauchy_from_interpolant(L, node_polynomial(xs, make_poly), xs, H, make_poly)


def node_polynomial(xs, make_poly):
    """prod (k - x) over the nodes ``xs``."""
    r0 = make_poly([1])
    for x in xs:
        r0 = r0 * make_poly([-x, 1])
    return r0


def cauchy_from_interpolant(L, r0, xs, H, make_poly) -> tuple:
    """The second half of :func:`cauchy_flint`: from the interpolating polynomial ``L``
    of the samples and ``r0 = prod (k - x_i)``, the extended Euclidean algorithm stopped
    at degree <= H, and the check that the result interpolates every node."""
    r1, t1 = euclid_stopped(L, r0, H, make_poly)
    if t1.degree() > H:
        raise InterpolationError(f"no rational function of type ({H},{H}) fits the samples")
    values = (t1.multipoint_evaluate(list(xs)) if isinstance(t1, flint.fmpz_mod_poly)
              else [t1(x) for x in xs])
    check_nodes(xs, values, H)
    return r1, t1


def euclid_stopped(L, r0, H, make_poly) -> tuple:
    """``(r, t)``: the extended Euclidean algorithm on ``r0`` and ``L`` stopped at the first
    remainder ``r`` of degree <= H, with its cofactor ``t`` (``r = t L mod r0``)."""
    r1, t0, t1 = L, make_poly([]), make_poly([1])
    while r1.degree() > H:
        q, r = divmod(r0, r1)
        r0, r1 = r1, r
        t0, t1 = t1, t0 - q * t1
    return r1, t1


def check_nodes(xs, values, H) -> None:
    """InterpolationError at the first node whose value of Q (``values``) is 0: there
    P/Q does not interpolate the samples."""
    for x, v in zip(xs, values):
        if v == 0:
            raise InterpolationError("samples are not those of a rational function of type "
                                     f"({H},{H}) (unattainable point at k = {x})")


POLE_AT_ZERO = "Q(0) = 0: a pole at k = 0 cannot come from attention"

#: Families per batched node check of :func:`normalised_fits` (bounds its memory).
NODE_CHUNK = 256


def normalised_fits(Ls, r0, xs, H, ring, ctx) -> list:
    """``[(P, Q)]`` (coefficient lists, Q(0) = 1) of :func:`cauchy_from_interpolant` for the
    interpolants ``Ls`` over F_p (nodes ``xs`` = 0..2H, ``r0`` their product), the first
    failure raised as it raises, then Q(0) = 0 (:data:`POLE_AT_ZERO`).  The node checks of
    :data:`NODE_CHUNK` families come from one ``fmpz_mod_mat`` product with the nodes'
    powers (the normalised Q has the cofactor's zeros); a family with a zero is checked by
    :func:`check_nodes` as before, so the failure and its message are the same."""
    w, n = H + 1, len(xs)
    V = flint.fmpz_mod_mat(w, n, [ctx(k) ** i for i in range(w) for k in range(n)], ctx)
    out = []
    for t in range(0, len(Ls), NODE_CHUNK):
        fits = []               # (P, Q) normalised, or (None, the cofactor): too tall, or Q(0) = 0
        for L in Ls[t:t + NODE_CHUNK]:
            P, Q = euclid_stopped(L, r0, H, ring)
            c0 = Q.constant_coefficient()
            if Q.degree() > H or c0 == 0:
                fits.append((None, Q))
            else:
                inv = 1 / c0            # the normalisation, in C
                fits.append(((P * inv).coeffs(), (Q * inv).coeffs()))
        good = [Q for P, Q in fits if P is not None]
        values = [] if not good else (flint.fmpz_mod_mat(
            len(good), w, [c for Q in good for c in Q + [0] * (w - len(Q))], ctx) * V).entries()
        at = 0
        for P, Q in fits:
            if P is None:
                if Q.degree() > H:
                    raise InterpolationError(f"no rational function of type ({H},{H}) fits "
                                             f"the samples")
                check_nodes(xs, Q.multipoint_evaluate(xs), H)      # Q(0) = 0: raises at k = 0
                raise InterpolationError(POLE_AT_ZERO)
            if 0 in values[at:at + n]:
                check_nodes(xs, values[at:at + n], H)
            at += n
            out.append((P, Q))
    return out


@functools.lru_cache(maxsize=16)
def _inverse_vandermonde(p: int, n: int):
    ctx = flint.fmpz_mod_ctx(p)
    V = flint.fmpz_mod_mat(n, n, [ctx(k) ** j for k in range(n) for j in range(n)], ctx)
    return V.inv().transpose()              # transposed: one family's coefficients per row


def interpolants_mod_p(ys_list, ctx, polyctx) -> list:
    """The interpolating polynomials (degree < n) through ``(k, ys[k])``, k = 0..n-1, of
    every sample list in ``ys_list``, over F_p: one product of the inverse Vandermonde
    matrix of the nodes 0..n-1 (cached per p and n, transposed) with the samples, in C.

    The interpolating polynomial is unique, so each equals Newton's of :func:`cauchy_flint`.

    >>> import flint
    >>> ctx, R = flint.fmpz_mod_ctx(97), flint.fmpz_mod_poly_ctx(97)
    >>> [L.coeffs() for L in interpolants_mod_p([[ctx(1), ctx(3), ctx(7)]], ctx, R)]   # 1 + k + k^2
    [[fmpz_mod(1, 97), fmpz_mod(1, 97), fmpz_mod(1, 97)]]
    """
    if not ys_list:
        return []
    n, m = len(ys_list[0]), len(ys_list)
    VinvT = _inverse_vandermonde(int(ctx.modulus()), n)
    C = (flint.fmpz_mod_mat(m, n, [y for ys in ys_list for y in ys], ctx) * VinvT).entries()
    return [polyctx(C[c * n:(c + 1) * n]) for c in range(m)]     # (Vinv Y)^T, row by row


def sum_of_fractions(fracs, one):
    """``(N, D)`` with ``N / D = sum_h n_h / d_h`` and ``D = prod_h d_h``, for python-flint
    polynomials ``fracs = [(n_h, d_h)]``, by halves (products of balanced degrees, in C);
    ``one`` is the ring's 1.  The certificate of a plan evaluates a query family through it
    (:func:`exactlearn.pipeline.certify.certify_plan`).

    >>> import flint
    >>> x = flint.fmpq_poly([0, 1])
    >>> N, D = sum_of_fractions([(x, 1 + x), (2 + 0 * x, 1 + 3 * x)], flint.fmpq_poly([1]))
    >>> N(2) / D(2) == flint.fmpq(2, 3) + flint.fmpq(2, 7)
    True
    """
    if not fracs:
        return 0 * one, one
    while len(fracs) > 1:
        nxt = []
        for t in range(0, len(fracs) - 1, 2):
            (n1, d1), (n2, d2) = fracs[t], fracs[t + 1]
            nxt.append((n1 * d2 + n2 * d1, d1 * d2))
        if len(fracs) % 2:
            nxt.append(fracs[-1])
        fracs = nxt
    return fracs[0]
