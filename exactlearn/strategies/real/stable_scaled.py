"""The Jacobi-scaled solve of the polish's normal equations
(:mod:`~exactlearn.strategies.real.stable_normal`; docs/explanation/real-field.md, step 5): one
factor of ``As = A / s s^T`` (``s = sqrt diag A``) shared by a Gauss--Newton step, the inverse
and the weakly determined directions (:class:`Scaled`, :func:`solve_scaled`), decided by
Cholesky factors of shifted copies before any eigenvalue is formed, and its thresholds.
"""

from __future__ import annotations

import numpy as np

from exactlearn.strategies.real.stable_blocks import inf_norm, mirror_lower

COND_LIMIT = 1e12        # the Jacobi-scaled normal matrix's condition at most this
WEAK_COND = 1e8          # directions with eigenvalues below the largest over this are weak
LANCZOS_MIN = 64         # solve_scaled tries Lanczos' bound on the largest eigenvalue from here
TOP_MARGIN = 1 + 1e-4    # Lanczos' estimate of the largest eigenvalue, raised by this


def solve_scaled(A, b, inverse=True):
    """``(A^-1 b, A^-1 or None unless inverse, [])`` by :class:`Scaled`'s factor of ``A``, or
    ``(None, None, weak directions)`` when A is too ill-conditioned."""
    return Scaled(A).solved(b, inverse)


class Scaled:
    """The Jacobi-scaled ``As`` of a symmetric ``A`` factored once, so that a solve, the
    inverse and the weak directions at one point share it (the polish's last Gauss--Newton
    step, its bounds and its hat).  The eigenvalues decide: when ``As - tau I`` has a
    Cholesky factor, ``tau = ||As||_inf / WEAK_COND`` (at least the largest eigenvalue over
    WEAK_COND), no direction is weak and the solve is Cholesky's with no eigenvalue formed (a
    fifth of eigvalsh's time at a thousand unknowns), or when the same test passes at a
    proved upper bound of the largest eigenvalue (:func:`_above`: the row sums overstate it,
    1.8 times at d = 16, H = 6); otherwise the eigenpairs (one ``eigh``) decide: Cholesky's
    solve still when no eigenvalue is below the largest over WEAK_COND, else the weak
    directions are their eigenvectors.  With ``name_weak=False`` (a Gauss--Newton step after
    the first, the polish's bounds, its hat: weak directions nobody reads) only COND_LIMIT
    matters: the same Cholesky test at ``||As||_inf / COND_LIMIT`` shows it solvable, or else
    the eigenvalues alone decide (``eigvalsh``, half of ``eigh``'s time at a thousand
    unknowns); a matrix that solves is solved by Cholesky's factor, weak directions or not,
    and only when that factor fails are the eigenvectors formed (2 Cholesky factors instead
    of up to 4, Lanczos and ``eigvalsh``: 0.4 s at d = 16, H = 6)."""

    def __init__(self, A, name_weak=True, solve=True, overwrite_a=False):
        s = self.s = np.sqrt(np.maximum(np.diag(A), 1e-300))
        inplace = overwrite_a and A.dtype == np.float64 and A.flags.writeable
        As = A if inplace else A / s[:, None]   # overwrite_a: A (float64) is scaled in place,
        if inplace:                              # one array of its size the fewer (143 MB at
            As /= s[:, None]                     # d = 32, H = 4), the same values
        As /= s[None, :]
        self.fac = self.ev = self.U = None
        self.weak = []
        rows = inf_norm(As)                      # ||As||_inf: at least the largest eigenvalue
        tau = rows / WEAK_COND
        ev = None
        if not name_weak and self._decided(As, rows):
            return
        M = _shifted(As, tau) if np.isfinite(tau) else None
        if not (M is not None and (_definite(M) or _above(As, tau))):
            if not solve and self._weak_only(As):
                return
            ev, U = np.linalg.eigh(As)
            if ev[-1] <= 0:
                self.ev = ev                # nothing solves, no direction named
                return
        if ev is None or ev[0] > ev[-1] / WEAK_COND:
            try:
                self.fac = _factor(As, M)
                return
            except np.linalg.LinAlgError:
                pass
        if ev is None:                  # As - tau I definite, yet Cholesky of As failed
            ev, U = np.linalg.eigh(As)
        self.ev, self.U = ev, U
        self.weak = [U[:, k] / s for k in np.flatnonzero(ev <= ev[-1] / WEAK_COND)]

    def _weak_only(self, As) -> bool:
        """``solve=False`` (the polish's deferred first step: its weak directions are asked for
        before any solve): the weak directions alone, the eigenpairs of ``As`` up to its largest
        eigenvalue (Lanczos) over WEAK_COND, by LAPACK's MRRR on that range -- no solve, and a
        third of ``eigh``'s time (9.5 s at 4,224 unknowns, d = 32, H = 4).  False, for ``eigh``
        to decide, when none is that small, the matrix is small or Lanczos fails."""
        from scipy.linalg import eigh
        top = _lanczos_top(As, 0)
        if top is None or not (np.isfinite(top) and top > 0):
            return False
        ev, U = eigh(As, subset_by_value=(-np.inf, top / WEAK_COND), driver="evr",
                     check_finite=False)
        self.weak = [U[:, k] / self.s for k in range(len(ev))]
        return bool(self.weak)

    def _decided(self, As, rows) -> bool:
        """``name_weak=False``: whether it is settled without eigenvectors -- solvable when
        ``As - sigma I`` has a Cholesky factor, ``sigma = ||As||_inf / COND_LIMIT`` (``rows``
        the norm; at least the largest eigenvalue over COND_LIMIT), else by the eigenvalues
        (``eigvalsh``); then nothing solves, or Cholesky's factor of ``As`` solves."""
        sigma = rows / COND_LIMIT
        M = _shifted(As, sigma) if np.isfinite(sigma) else None
        if not (M is not None and _definite(M)):
            ev = np.linalg.eigvalsh(As)
            if not (ev[-1] > 0 and ev[0] > ev[-1] / COND_LIMIT):
                self.ev = ev                # nothing solves, no direction named
                return True
        try:
            self.fac = _factor(As, M)
        except np.linalg.LinAlgError:
            return False
        return True

    @property
    def solvable(self) -> bool:
        return self.fac is not None or (self.ev is not None and self.ev[-1] > 0 and
                                        self.ev[0] > self.ev[-1] / COND_LIMIT)

    def solved(self, b, inverse=True) -> tuple:
        """``(A^-1 b, A^-1 or None, weak directions)``; ``(None, None, weak)`` when A does
        not solve."""
        from scipy.linalg import cho_solve
        s = self.s
        if not self.solvable:
            return None, None, self.weak
        if self.fac is not None:
            x = cho_solve(self.fac, b / s, check_finite=False) / s
            if not inverse:
                return x, None, []
            return x, self.inverse(), []
        if not inverse:                 # by the eigenpairs, no inverse formed
            U, ev = self.U, self.ev
            return U @ ((U.T @ (b / s)) / ev) / s, None, self.weak
        inv = self.inverse()
        return inv @ b, inv, self.weak

    def inverse(self):
        """``A^-1`` (the factor's; only when :attr:`solvable`)."""
        from scipy.linalg import cho_solve
        from scipy.linalg.lapack import dpotri as potri
        s = self.s
        if self.fac is not None:        # LAPACK's potri: a third of cho_solve(I)'s time
            low, info = potri(self.fac[0], lower=1)
            if info == 0:                # its lower triangle, mirrored in place
                inv = mirror_lower(low)
            else:
                inv = cho_solve(self.fac, np.eye(len(s)), check_finite=False)
            inv /= s[:, None]
            inv /= s[None, :]
            return inv
        U, ev = self.U, self.ev
        return (U / ev[None, :]) @ U.T / s[:, None] / s[None, :]


def _above(As, tau) -> bool:
    """Whether every eigenvalue of ``As`` is above its largest over ``WEAK_COND``, shown with
    an upper bound of the largest tighter than ``tau * WEAK_COND`` (the row sums'): Lanczos'
    estimate of it (``eigsh``, a fixed start) raised by ``TOP_MARGIN``, proved an upper bound
    by a Cholesky factor of ``mu I - As``, then the pre-test of :func:`solve_scaled` at
    ``mu / WEAK_COND``.  False (then one ``eigh`` decides) when the matrix is small, Lanczos
    does not converge or either factor fails: two Cholesky factors and a few dozen products
    instead of ``eigh``'s tridiagonal reduction (a twelfth of its time at 1,632 unknowns)."""
    top = _lanczos_top(As, 1e-6)
    if top is None:
        return False
    mu = top * TOP_MARGIN
    if not (np.isfinite(mu) and 0 < mu < tau * WEAK_COND):
        return False
    return _definite(_shifted(As, mu, below=True)) and _definite(_shifted(As, mu / WEAK_COND))


def _lanczos_top(As, tol):
    """Lanczos' estimate of the largest eigenvalue of ``As`` (``eigsh``, a fixed start, to
    ``tol``), or None when the matrix is small (``LANCZOS_MIN``) or Lanczos fails."""
    from scipy.sparse.linalg import ArpackError, eigsh
    if len(As) < LANCZOS_MIN:
        return None
    try:
        return float(eigsh(As, k=1, which="LA", tol=tol, v0=np.ones(len(As)),
                           return_eigenvectors=False)[0])
    except (ArpackError, ValueError):
        return None


def _shifted(As, shift, below=False):
    """``As - shift I``, or ``shift I - As`` when ``below``: a copy with its diagonal moved
    (no identity matrix formed), in Fortran order, so that :func:`_definite`'s factor
    overwrites it instead of copying it again."""
    M = np.negative(As, order="F") if below else np.array(As, order="F")
    M.flat[::len(As) + 1] += shift if below else -shift
    return M


def _factor(As, buf=None):
    """Cholesky's factor of ``As`` (scipy's ``cho_factor``, lower; LinAlgError when there is
    none), formed in ``buf`` when given -- a Fortran-order array of As' shape that
    :func:`_shifted` made, overwritten: the same factor without another array of As' size."""
    from scipy.linalg import cho_factor
    if buf is None:
        return cho_factor(As, lower=True, check_finite=False)
    buf[...] = As
    return cho_factor(buf, lower=True, check_finite=False, overwrite_a=True)


def _definite(M) -> bool:
    """Whether the symmetric ``M`` has a Cholesky factor (every eigenvalue positive, up to
    rounding)."""
    from scipy.linalg import cho_factor
    try:
        cho_factor(M, lower=True, check_finite=False, overwrite_a=True)
    except np.linalg.LinAlgError:
        return False
    return True
