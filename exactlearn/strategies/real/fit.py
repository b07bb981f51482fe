"""A query family's fit, :class:`RatioFit` (what every step after the fit reads), and the
paper's nodes ``t = 0, 1, ..., n - 1`` fitted in the field's precision
(docs: explanation/real-field.md#the-paper-plans-nodes; arXiv:2608.03294).

:func:`fit_paper_family`: a Loewner start through the first ``2m + 1`` samples
(:func:`~exactlearn.pipeline.interpolate.cauchy_interpolate`, exactly ``m`` poles at the
field's rounding, else the family fails), then Newton / Gauss--Newton on every sample at
``60 + 8n`` extra bits (:func:`~exactlearn.strategies.real.lsq.refine`, mpmath's ``lu_solve``),
a singular Jacobian an :class:`~exactlearn.errors.InterpolationError`.  Its sensitivity
``G = J^+`` (rows ``A, log rho, c``), rounded to float64 once computed, gives the bounds
``|G| eta``; with more samples than unknowns every residual is checked against
``|J G - I| eta`` (:func:`~exactlearn.strategies.real.sensitivity.check_residuals`).  With
``2m + 1`` samples a family interpolates: the noise test is across the families
(:func:`~exactlearn.strategies.real.stable_routes.limits_test`).

>>> from exactlearn.fields.real import Real
>>> K = Real(dps=40)
>>> ys = [K(3) + K(2) / (1 + k * K("1.5")) for k in range(3)]
>>> fit = fit_paper_family(K, ys, [1e-30] * 3, 1)
>>> K.format(K.ctx.exp(fit.logs[0])), K.format(fit.cs[0]), K.format(fit.A)
('1.5', '2.0', '3.0')
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from exactlearn.errors import DegenerateDraw, FieldError, InterpolationError
from exactlearn.pipeline.interpolate import cauchy_interpolate, poles
from exactlearn.strategies.real.lsq import refine
from exactlearn.strategies.real.sensitivity import LO, check_residuals


@dataclass
class RatioFit:
    """A fitted family: values in the field's context, sensitivities in float64."""

    A: object
    logs: list                 # log rho_h
    cs: list                   # c_h
    G: np.ndarray              # (2m + 1) x n: d theta = G d y (rows A, log rho, c)
    bounds: np.ndarray         # first-order bounds of theta
    worst_residual: float      # largest |residual| / its bound
    kappa: float = 1.0         # bounds at kappa x the etas given (stable_families._scatter_fit)


def fit_paper_family(K, ys, etas, m, what="a family") -> RatioFit:
    """Fit ``m`` heads to ``ys`` sampled at ``t = 0 .. n - 1`` with bounds ``etas`` (floats;
    module doc).  Raises :class:`~exactlearn.errors.InterpolationError` when the samples show
    no ``m`` real positive poles or the refinement does not converge,
    :class:`~exactlearn.errors.NoisierThanDeclared` when a residual exceeds its bound."""
    ctx, n = K.ctx, len(ys)
    eta = np.asarray(etas, dtype=float)
    if n < 2 * m + 1:
        raise InterpolationError(f"{what}: {n} samples cannot fit {m} heads")
    ymax = max(abs(y) for y in ys)
    if ymax == 0:
        raise DegenerateDraw("a query family returned only zeros")
    theta = _start(K, ys, m, what)
    goal = ctx.ldexp(1, -(K.prec + 8))          # K.prec is the context's: read it before extraprec
    with ctx.extraprec(60 + 8 * n):
        yv = [ctx.mpf(y) for y in ys]

        def step(th):                   # Newton / Gauss-Newton (normal equations): J x = r
            J, r = _jacobian(ctx, th, m, n, yv)
            return list(ctx.lu_solve(J, r))

        try:                            # a singular Jacobian (c_h -> 0, rho_h -> rho_g)
            out = refine(ctx, step, theta, goal=goal, steps=12)
            theta = out.theta
            if not out.converged or any(not t > 0 for t in theta[1:m + 1]):
                raise InterpolationError(f"{what}: the refinement of its fit with {m} heads did "
                                         f"not converge to positive rho")
            J, res = _jacobian(ctx, theta, m, n, yv)
            Jp = _pinv(ctx, J, m, n)
        except (ZeroDivisionError, ValueError):     # LU's, or Cholesky's not positive-definite
            raise InterpolationError(f"{what}: the samples do not determine {m} heads (a "
                                     f"singular Jacobian: two heads' rho meet, or a c_h is 0)") \
                from None
        G = np.array([[float(Jp[i, k] / (theta[i] if 0 < i <= m else 1)) for k in range(n)]
                      for i in range(2 * m + 1)])         # rows A, log rho (d rho / rho), c
        R = (np.array([[float(x) for x in (J * Jp)[k, :]] for k in range(n)]) - np.eye(n)
             if n > 2 * m + 1 else None)
        resid = [float(res[k]) for k in range(n)]
        logs = [ctx.log(t) for t in theta[1:m + 1]]
    worst = 0.0                         # least squares: the residual (J J^+ - I) eps is seen
    if R is not None:
        worst = check_residuals(K, resid, np.abs(R) @ eta, ys, theta[m + 1:],
                                f"{what} fitted with {m} heads")
    bounds = np.abs(G) @ eta + 2 * float(out.size)        # + the refinement's last step
    return RatioFit(+theta[0], [+x for x in logs], [+c for c in theta[m + 1:]], G, bounds, worst)


def _start(K, ys, m, what) -> list:
    """``(A, rho_1..m, c_1..m)`` of the rational function through the first ``2m + 1``
    samples (pole count decided at the field's rounding), or InterpolationError."""
    Kf = K.with_tolerance(K.tol, K.sep, noise=K(LO.ldexp(1, -K.prec)))
    try:
        rf = cauchy_interpolate([Kf(k) for k in range(2 * m + 1)], ys[:2 * m + 1], m, Kf)
        if rf.n_poles != m:
            raise InterpolationError(f"{what}: its samples show {rf.n_poles} poles, not {m}")
        pl = poles(rf, Kf)
        return [rf.limit(Kf)] + [r for r, _ in pl] + [c for _, c in pl]
    except (FieldError, ArithmeticError, ValueError, ZeroDivisionError) as exc:
        if isinstance(exc, InterpolationError):
            raise
        raise InterpolationError(f"{what}: no {m} real poles through its samples ({exc})") \
            from None


def _jacobian(ctx, theta, m, n, ys):
    """The Jacobian in ``(A, rho, c)`` and the residuals ``f(k) - y_k``, ``k = 0 .. n - 1``."""
    A, rhos, cs = theta[0], theta[1:m + 1], theta[m + 1:]
    J = ctx.matrix(n, 2 * m + 1)
    r = ctx.matrix(n, 1)
    for k in range(n):
        f = A
        J[k, 0] = 1
        for h in range(m):
            den = 1 + k * rhos[h]
            f += cs[h] / den
            J[k, 1 + h] = -cs[h] * k / den ** 2
            J[k, 1 + m + h] = 1 / den
        r[k] = f - ys[k]
    return J, r


def _pinv(ctx, J, m, n):
    """``J^-1`` (square) or ``J^+ = (J^T J)^-1 J^T`` (more samples than unknowns: the squared
    condition costs bits that the refinement's extra precision holds and the bounds, a few
    digits, never miss)."""
    return ctx.inverse(J) if n == 2 * m + 1 else ctx.inverse(J.T * J) * J.T
