"""Cauchy (rational) interpolation on python-flint polynomials (README, "How it works").

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
    r0 = make_poly([1])
    for x in xs:
        r0 = r0 * make_poly([-x, 1])
    for i in range(n - 2, -1, -1):
        L = L * make_poly([-xs[i], 1]) + make_poly([coef[i]])
    r1, t0, t1 = L, make_poly([]), make_poly([1])
    while r1.degree() > H:
        q, r = divmod(r0, r1)
        r0, r1 = r1, r
        t0, t1 = t1, t0 - q * t1
    if t1.degree() > H:
        raise InterpolationError(f"no rational function of type ({H},{H}) fits the samples")
    for x in xs:
        if t1(x) == 0:
            raise InterpolationError("samples are not those of a rational function of type "
                                     f"({H},{H}) (unattainable point at k = {x})")
    return r1, t1
