"""The polish's model of every observation at once
(:mod:`~exactlearn.strategies.real.stable_polish`; docs/explanation/real-field.md, step 5): the
observations grouped by family (:class:`Families`), the model's values and derivatives per family
(:func:`family_values`), the normal equations (:func:`normal_equations`), their Jacobi-scaled
solve or the weakly determined directions (:func:`solve_scaled`, :class:`Weak`), the heads as
float64 arrays (:func:`head_arrays`) and the polish's constants.
"""

from __future__ import annotations

import weakref

import numpy as np

from exactlearn.strategies.real import lsq
from exactlearn.strategies.real.stable_blocks import inf_norm, mirror_lower, vv_block, w_blocks
from exactlearn.strategies.real.stable_certificate import family_keys

COND_LIMIT = 1e12        # the Jacobi-scaled normal matrix's condition at most this
WEAK_COND = 1e8          # directions with eigenvalues below the largest over this are weak
MAX_PARAMETERS = 4400    # H (d^2 + d) (+ H d + 1 with biases) at most this: d = 32, H = 4 with
#                          biases (4,353); the normal matrix 155 MB, the polish ~2.4 GB at its peak
MAX_STEPS = 8            # Gauss--Newton steps
LAWSON_STEPS = 60        # reweightings of stable_minimax.minimax_bound
MAX_DENSE = 2 * 10 ** 7  # N P at most this for the dense Jacobian of stable_minimax.minimax_bound
LM_STEPS = 100           # Levenberg--Marquardt steps from a far start
LANCZOS_MIN = 64         # solve_scaled tries Lanczos' bound on the largest eigenvalue from here
TOP_MARGIN = 1 + 1e-4    # Lanczos' estimate of the largest eigenvalue, raised by this
LD_EPS = float(np.finfo(np.longdouble).eps)   # 2^-63 where long double is x87's, else EPS


class Families:
    """The observations grouped by their token pair ``(a, x)``, as float64 arrays; with
    ``bias`` ``D`` is formed with ``(x; 1)`` (module doc)."""

    def __init__(self, rec, start, etas, bias=False):
        self.bias = bool(bias)
        groups = _grouped(rec, start)
        self.pairs = list(groups)
        self.a = np.array([[float(t) for t in a] for a, _ in self.pairs])
        self.x = np.array([[float(t) for t in x] for _, x in self.pairs])
        self.diff = self.a - self.x
        xt = np.concatenate([self.x, np.ones((len(self.pairs), 1))], axis=1) if bias else self.x
        self.D = np.einsum("fr,fc->frc", self.diff, xt).reshape(len(self.pairs), -1)
        # the families that see W (a != x): a single token repeated has a zero row of D
        self.live = np.flatnonzero(np.any(self.diff != 0, axis=1))
        self.q, self.k, self.m, self.y, self.eta = [], [], [], [], []
        for key in self.pairs:
            rows = groups[key]
            idx = np.array([r[0] for r in rows])
            self.q.append(idx)
            self.k.append(np.array([r[1] for r in rows], dtype=float))
            self.m.append(np.array([r[2] for r in rows], dtype=float))
            self.y.append(np.array([r[3] for r in rows]))
            self.eta.append(np.asarray(etas)[idx])
        # the same, flat: every observation in family order, ``starts`` where each begins
        sizes = np.array([len(q) for q in self.q], dtype=np.intp)
        self.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
        self.fi = np.repeat(np.arange(len(self.pairs)), sizes)
        flat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0))
        self.k_all, self.m_all = flat(self.k), flat(self.m)
        self.y_all, self.eta_all = flat(self.y), flat(self.eta)
        with np.errstate(divide="ignore"):
            self.logkm = np.log(self.k_all) - np.log(self.m_all)
        self._outer = self._ends = None

    def ends(self):
        """``(xt, diff, groups)``: the distinct final tokens ``xt`` (``(x; 1)`` with biases) of the
        live families, their ``a - x``, and each token's live families (indices into
        :attr:`live`), formed once: ``D_f = vec((a - x) xt^T)`` is read through them."""
        if self._ends is None:
            x = self.x[self.live]
            xt = np.concatenate([x, np.ones((len(x), 1))], axis=1) if self.bias else x
            ends, back = np.unique(xt, axis=0, return_inverse=True)
            self._ends = (ends, self.diff[self.live],
                          [np.flatnonzero(back.ravel() == j) for j in range(len(ends))])
        return self._ends

    def outer(self):
        """``x x^T``, ``x a^T``, ``a x^T``, ``a a^T`` of every family, stacked (4F x d^2),
        formed once (the v-v block of :func:`normal_equations`)."""
        if self._outer is None:
            xs, as_ = self.x, self.a
            self._outer = np.concatenate([np.einsum("fi,fj->fij", u, w) for u, w in
                                          ((xs, xs), (xs, as_), (as_, xs), (as_, as_))]
                                         ).reshape(4 * len(xs), -1)
        return self._outer


_GROUPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _grouped(rec, start) -> dict:
    """The observations since ``start`` grouped by their token pair: ``{(a, x): [(q, k, m,
    y)]}``.  A recorder's observations are only ever appended, so the grouping of its first
    ``n`` is kept (per recorder, while it lives) for the polish, its hat and its tests, which
    group the same observations again."""
    n = len(rec.observations)
    try:
        memo = _GROUPED.setdefault(rec, {})
    except TypeError:                   # a recorder without weak references: not kept
        memo = {}
    got = memo.get((start, n))
    if got is None:
        got = {}
        obs = rec.observations
        for q, (a, x, k, m) in enumerate(family_keys(rec, start, n), start):
            got.setdefault((a, x), []).append((q, k, m, float(obs[q][1])))
        memo.clear()                    # the latest grouping only
        memo[(start, n)] = got
    return got


def family_values(fam, f, W, V, dt=np.float64, c=0.0):
    """Per query of family ``f``: the model's value, ``df/dz`` (n x H), ``df/dv`` (n x H x d)
    and the size of its terms (for the rounding of the residual); computed in the float type
    ``dt`` (``np.longdouble``: the residuals of
    :func:`~exactlearn.strategies.real.stable_split.split_gain`).  ``W`` is ``[W | u]`` (H x d x
    (d + 1)) and ``c`` the constant for a biased family set (module doc)."""
    W, V = np.asarray(W, dtype=dt), np.asarray(V, dtype=dt)
    z = W.reshape(len(W), -1) @ np.asarray(fam.D[f], dtype=dt)    # H
    ua, ux = V @ np.asarray(fam.a[f], dtype=dt), V @ np.asarray(fam.x[f], dtype=dt)
    k, m = np.asarray(fam.k[f], dtype=dt), np.asarray(fam.m[f], dtype=dt)
    with np.errstate(divide="ignore", over="ignore"):
        s = np.log(k)[:, None] - np.log(m)[:, None] + z[None, :]     # n x H
        p = np.where(k[:, None] == 0, 0.0, 1 / (1 + np.exp(-s)))
    du = ua - ux
    val = (ux[None, :] + p * du[None, :]).sum(axis=1)
    gz = p * (1 - p) * du[None, :]
    gv = (1 - p)[:, :, None] * fam.x[f][None, None, :] + p[:, :, None] * fam.a[f][None, None, :]
    size = (np.abs(ux)[None, :] + p * np.abs(du)[None, :]).sum(axis=1)
    if fam.bias:
        val = val + dt(c)
        size = size + abs(float(c))
    return val, gz, gv, size


def v_jacobian(fam, gv, n):
    """The v block of the Jacobian (n x H d), and with biases the constant's column of ones."""
    Jv = gv.reshape(n, -1)
    return np.concatenate([Jv, np.ones((n, 1))], axis=1) if fam.bias else Jv


def normal_equations(fam, W, V, c=0.0):
    """``A``, ``b`` (module doc), the per-family reduced Jacobians and weights, and ``(cost,
    beyond)``: the weighted cost, and the same with each residual reduced by its rounding ``8 EPS
    (size_q + |y_q|)`` (0: float64's floor).  Every observation at once (:func:`family_values`'
    values), summed per family by ``np.add.reduceat``; a query's v block is ``(1 - p_h) x + p_h
    a`` per head: per-family sums of ``w p_h p_g``-type weights times ``x x^T, x a^T, a a^T``."""
    H, d = V.shape
    dd = fam.D.shape[1]
    nv = H * d + fam.bias
    P = H * dd + nv
    F = len(fam.pairs)
    fi = fam.fi
    Z = fam.D @ W.reshape(H, -1).T                   # F x H: z_h of each family
    UA, UX = fam.a @ V.T, fam.x @ V.T
    with np.errstate(divide="ignore", over="ignore"):
        s = fam.logkm[:, None] + Z[fi]                # N x H
        p = np.where(fam.k_all[:, None] == 0, 0.0, 1 / (1 + np.exp(-s)))
    du, ux = (UA - UX)[fi], UX[fi]
    val = (ux + p * du).sum(axis=1)
    gz = p * (1 - p) * du
    size = (np.abs(ux) + p * np.abs(du)).sum(axis=1)
    if fam.bias:
        val = val + c
        size = size + abs(float(c))
    q = 1 - p
    w = 1 / fam.eta_all ** 2
    r = fam.y_all - val
    cost = float(w @ r ** 2)
    beyond = float(w @ np.maximum(np.abs(r) - 8 * lsq.EPS * (size + np.abs(fam.y_all)), 0.0) ** 2)

    def per_family(X):
        return np.add.reduceat(X, fam.starts, axis=0)

    wg, wq, wp, wr = w[:, None] * gz, w[:, None] * q, w[:, None] * p, w * r
    Nzz = per_family(wg[:, :, None] * gz[:, None, :])                    # F x H x H
    Sx = per_family(wg[:, :, None] * q[:, None, :])                      # sum w gz_h (1 - p_g)
    Sa = per_family(wg[:, :, None] * p[:, None, :])                      # sum w gz_h p_g
    xs, as_ = fam.x, fam.a
    Nzv = np.zeros((F, H, nv))
    Nzv[:, :, :H * d] = (np.einsum("fhg,fi->fhgi", Sx, xs)
                         + np.einsum("fhg,fi->fhgi", Sa, as_)).reshape(F, H, H * d)
    bz = per_family(wr[:, None] * gz)                                     # F x H
    Rx, Ra = per_family(wr[:, None] * q), per_family(wr[:, None] * p)     # F x H
    bv = np.zeros(nv)
    bv[:H * d] = (np.einsum("fh,fi->hi", Rx, xs) + np.einsum("fh,fi->hi", Ra, as_)).reshape(-1)
    A = np.zeros((P, P))
    A[H * dd:H * dd + H * d, H * dd:H * dd + H * d] = vv_block(fam, per_family, wq, wp, q, p)
    if fam.bias:                                     # the constant's column of ones
        Nzv[:, :, -1] = per_family(wg)
        col = (np.einsum("fh,fi->hi", per_family(wq), xs)
               + np.einsum("fh,fi->hi", per_family(wp), as_)).reshape(-1)
        A[H * dd:-1, -1] = col
        A[-1, H * dd:-1] = col
        A[-1, -1] = float(w.sum())
        bv[-1] = float(wr.sum())
    Dm = fam.D
    w_blocks(A, fam, Nzz[fam.live], Nzv[fam.live])
    b = np.concatenate([Dm.T @ bz[:, h] for h in range(H)] + [bv])
    gv = q[:, :, None] * xs[fi][:, None, :] + p[:, :, None] * as_[fi][:, None, :]
    Jv = gv.reshape(len(r), H * d)
    if fam.bias:
        Jv = np.concatenate([Jv, np.ones((len(r), 1))], axis=1)
    ends = list(fam.starts[1:]) + [len(r)]
    parts = [(gz[i:j], Jv[i:j], w[i:j], size[i:j], r[i:j]) for i, j in zip(fam.starts, ends)]
    return A, b, parts, (cost, beyond)


class Weak:
    """Directions of the parameters the observations determine weakly (the Jacobi-scaled
    normal matrix's eigenvalues below its largest over ``WEAK_COND``): ``directions``,
    ``(head, W direction as a d x d array)`` each.
    :func:`~exactlearn.strategies.real.stable_polish.polish` returns one alone when some
    eigenvalue is below the largest over ``COND_LIMIT`` (float64 cannot solve), and as the last
    item of its result otherwise; the plan can ask families that see those directions and polish
    again."""

    def __init__(self, directions):
        self.directions = directions


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

    def __init__(self, A, name_weak=True):
        s = self.s = np.sqrt(np.maximum(np.diag(A), 1e-300))
        As = A / s[:, None]
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
    from scipy.sparse.linalg import ArpackError, eigsh
    n = len(As)
    if n < LANCZOS_MIN:
        return False
    try:
        top = eigsh(As, k=1, which="LA", tol=1e-6, v0=np.ones(n), return_eigenvectors=False)
    except (ArpackError, ValueError):
        return False
    mu = float(top[0]) * TOP_MARGIN
    if not (np.isfinite(mu) and 0 < mu < tau * WEAK_COND):
        return False
    return _definite(_shifted(As, mu, below=True)) and _definite(_shifted(As, mu / WEAK_COND))


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


def head_arrays(heads, bias):
    """``(W, V, c)`` as float64 arrays: W is ``[W | u]`` with biases (module doc)."""
    if bias:
        W = np.array([[[float(a) for a in row] + [float(b)] for row, b in zip(h.W, h.u)]
                      for h in heads])
    else:
        W = np.array([[[float(a) for a in row] for row in h.W] for h in heads])
    V = np.array([[float(a) for a in h.v] for h in heads])
    return W, V, float(getattr(heads, "constant", 0)) if bias else 0.0
