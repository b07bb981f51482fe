"""The start for many heads: a matrix pencil per final token
(docs: explanation/real-field.md#the-stable-plan-for-float-black-boxes, step 3b).

For a final token ``x``, ``q_h = W_h x`` (``+ u_h`` with biases), one copy of ``a = x + e``
then ``m`` copies of ``x`` give ``f_m = A + sum_h (v_h . e) rho_h / (rho_h + m)``, whose
coefficient of ``1/m``, ``N(e) = sum_h (v_h . e) exp(q_h . e)``, is extrapolated from the
``m`` in ``COPIES`` (the extrapolation's error ``sum_h (v_h . e) g(rho_h)`` modelled exactly
by :func:`_refine`).  On the sums ``e = alpha_i + alpha_j + g`` of ``2H + ALPHA_MARGIN``
lattice points (:func:`lattice`),

    N(alpha_i + alpha_j + g) = sum_h rho_h(g) Phi_h(alpha_i)^T C_h(g) Phi_h(alpha_j),
    Phi_h(alpha) = (rho_h(alpha), (v_h . alpha) rho_h(alpha)),  C_h(g) = [[v_h . g, 1], [1, 0]],

of rank ``2H`` for every shift ``g``: reduced to ``N_0``'s ``2H`` leading singular vectors,
``T_g = U^T N_g V S^-1`` has ``rho_h(g)`` twice on head h's invariant subspace; a random
combination of the shifts ``g_k = delta e_k`` separates the subspaces and
``trace(T_{g_k}) / 2 = exp(delta q_h[k])`` gives ``q_h`` (multidimensional ESPRIT).  Over the
final tokens the heads are matched by ``v_h`` and ``W_h`` (``[W_h | u_h]``) solves
``W_h x = q_h(x)`` by least squares; the retries of a token (``TRIES`` scales of ``e``) and
when it is dropped are the docs page's.  The start is only a start: the polish, its noise test
and the certificate decide.  Tokens are on the grid ``2^-GRID`` (exact in float32 and float64).

>>> np.round(_extrapolate_weights((256, 512)), 6).tolist()
[-256.0, 1024.0]
"""

from __future__ import annotations

import itertools

import numpy as np
from gmpy2 import mpq

from exactlearn.errors import DegenerateDraw
from exactlearn.strategies.real.lsq import last, solve
from exactlearn.strategies.real.ratio import GRID, dyadic

COPIES = (256, 512, 1024)             # m of the extrapolation (its error modelled); 1025 tokens at most
FINE_COPIES = (256, 384, 512, 768, 1024)   # m with the random vectors (the lattice failed)
ALPHA_MARGIN = 2                      # vectors alpha beyond 2H (the rank of each matrix)
LATTICE_STEP = 0.7                    # delta, the lattice's step, over the norm of e asked for
SPARE_TOKENS = 0                      # final tokens used beyond d (d, or d + 1 with biases)
EXTRA_TOKENS = 4                      # final tokens asked at most beyond d
FIRST_TOKENS = 2                      # when none of the first this many resolves, stop
SHRINK = 1.6                          # e scaled down by this when a token fails
TRIES = 3                             # scales of e tried per final token
MIXES = 6                             # random combinations of the shifts tried
SMALL_SINGULAR = 1e-9                 # value 2H below this times the largest: e too small
RANK_GAP = 1e-3                       # value 2H + 1 below this times value 2H: e small enough
FIT_LIMIT = 1e-7                      # refined fit: max residual / max |N| at most this
MATCH_LIMIT = 1e-3                    # v_h of two tokens agree within this (relative)


def _extrapolate_weights(copies) -> np.ndarray:
    """Weights ``w`` with ``N ~ sum_m w_m (f_m - A)``: the value at ``u = 0`` of the
    polynomial through ``(1/m, m (f_m - A))``."""
    us = np.array([1.0 / m for m in copies])
    V = np.vander(us, len(us), increasing=True)
    return np.linalg.inv(V)[0] / us


def _refine(pts, vals, Q, v, copies, steps=100):
    """Levenberg--Marquardt (:func:`~exactlearn.strategies.real.lsq.solve`, at most ``steps``
    evaluations) on the extrapolated values themselves, ``sum_h (v_h . e) g(rho_h)`` with
    ``g(rho) = sum_m w_m rho / (rho + m)`` (``w``: :func:`_extrapolate_weights` of ``copies``;
    ``g(rho) = rho`` up to ``rho^(len(copies) + 1)`` times the product of the ``1/m``), so the
    extrapolation's error is modelled, not fitted away: ``(Q, v, max relative residual)``."""
    H, d = Q.shape
    scale = float(np.abs(vals).max()) or 1.0
    w, ms = _extrapolate_weights(copies), np.array(copies, dtype=float)

    @last
    def parts(theta):
        rho = np.exp(pts @ theta[:H * d].reshape(H, d).T)[:, :, None]   # n x H x 1
        c = pts @ theta[H * d:].reshape(H, d).T                         # n x H
        return (rho / (rho + ms)) @ w, (rho * ms / (rho + ms) ** 2) @ w, c

    def residual(theta):
        g, _, c = parts(theta)
        return ((g * c).sum(axis=1) - vals) / scale

    def jacobian(theta):
        g, dg, c = parts(theta)
        return np.concatenate([((dg * c)[:, :, None] * pts[:, None, :]).reshape(len(pts), -1),
                               (g[:, :, None] * pts[:, None, :]).reshape(len(pts), -1)],
                              axis=1) / scale

    theta = solve(residual, jacobian, np.concatenate([Q.ravel(), v.ravel()]), max_nfev=steps).x
    return (theta[:H * d].reshape(H, d), theta[H * d:].reshape(H, d),
            float(np.abs(residual(theta)).max()))


def _pairs(lam):
    """``(pairs, clear)``: the eigenvalues paired (each head's Jordan block), closest first,
    and whether every pair is clearly closer than its members are to any other eigenvalue."""
    n = len(lam)
    dist = np.abs(lam[:, None] - lam[None, :]) + np.diag(np.full(n, np.inf))
    left, pairs = list(range(n)), []
    while left:
        sub = dist[np.ix_(left, left)]
        i, j = np.unravel_index(int(np.argmin(sub)), sub.shape)
        a, b = left[i], left[j]
        pairs.append((a, b))
        left = [k for k in left if k not in (a, b)]
    for a, b in pairs:
        others = [k for k in range(n) if k not in (a, b)]
        if others and dist[a, b] > 0.5 * min(dist[a, others].min(), dist[b, others].min()):
            return pairs, False
    return pairs, True


class _Token:
    """One final token's queries and heads."""

    def __init__(self, x):
        self.x = x
        self.Q = self.v = None
        self.residual = np.inf
        self.refitted = False           # its heads came from a resolved token's v (_fit)
        self.retries = []               # fits of failed pencils to try from a resolved v


def lattice(d: int, n: int) -> np.ndarray:
    """The first ``n`` points ``alpha / delta`` (integer vectors): ``0``, the ``e_k``, then
    ``e_k + e_(k+s mod d)`` for ``s = 1, 2, ..., d - 1, 0``, then sums of three, ... (module
    doc).  Their sums and the shifted sums ``alpha_i + alpha_j + delta e_k`` coincide often,
    and each distinct point is asked once: 976 of the 3,159 at d = 8 with 26 vectors.

    >>> lattice(3, 6).tolist()
    [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 1, 1]]
    """
    pts = [(0,) * d] + [tuple(np.eye(d, dtype=int)[k]) for k in range(d)]
    pairs = [tuple(np.eye(d, dtype=int)[k] + np.eye(d, dtype=int)[(k + s) % d])
             for s in [*range(1, d), 0] for k in range(d)]
    degree = 3
    while len(pts) < n:             # then degree 3, 4, ... (small d, many heads)
        for v in pairs:
            if len(pts) < n and v not in pts:
                pts.append(v)
        pairs = [tuple(np.bincount(c, minlength=d))
                 for c in itertools.combinations_with_replacement(range(d), degree)]
        degree += 1
    return np.array(pts[:n])


def _per_token(ask, x, alphas, step: int, H, rng, copies=COPIES, v_ref=None):
    """``(Q, v, residual, refitted)`` from the pencil at the final token ``x`` (module doc; the
    last item: whether the fit came from ``v_ref``, :func:`_fit`), or
    ``("shrink" | "grow" | "drop", why not)``: the scale of ``e`` to try next, or another
    final token (two heads' ``q_h`` nearly alike at this one).  ``alphas`` (``n x d``) and the
    shift ``step`` are integers in units of ``2^-GRID``, so the sums ``alpha_i + alpha_j + g``
    are exact and each distinct one is asked once; ``e = 0`` is not asked (``N(0) = 0``)."""
    n, d = alphas.shape
    iu = np.triu_indices(n)
    shifts = np.vstack([np.zeros(d, dtype=np.int64), step * np.eye(d, dtype=np.int64)])
    keys = ((alphas[iu[0]] + alphas[iu[1]])[None] + shifts[:, None]).reshape(-1, d)
    points, where = np.unique(keys, axis=0, return_inverse=True)
    asked = np.flatnonzero(np.any(points != 0, axis=1))
    unit = mpq(1, 2 ** GRID)
    queries = []
    for key in points[asked]:
        a = tuple(p + int(c) * unit for p, c in zip(x, key))
        queries.extend([a] + [x] * m for m in copies)
    ys = ask([[x]] + queries)
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            f = np.array(ys[1:]).reshape(-1, len(copies))
            vals = np.zeros(len(points))
            vals[asked] = (f - ys[0]) @ _extrapolate_weights(copies)    # one per point
            return _pencil(vals, points / 2.0 ** GRID, vals[where.ravel()], n, iu, copies,
                           step / 2.0 ** GRID, H, rng, v_ref)
    except (np.linalg.LinAlgError, ValueError) as exc:
        return "drop", f"the pencil's linear algebra failed ({exc})"


def _pencil(vals, pts, full, n, iu, copies, delta, H, rng, v_ref=None):
    """:func:`_per_token` once its queries are answered: ``vals`` at the distinct points
    ``pts``, ``full`` per shift and per pair ``i <= j``.  A failure without ``v_ref`` (no
    token resolved yet) carries a third item: its fit from a ``v`` (:func:`_fit`), which
    :func:`pencil_heads` tries once the first token has resolved."""
    d = pts.shape[1]
    per = len(iu[0])
    Ms = []
    for s in range(d + 1):
        M = np.zeros((n, n))
        M[iu] = full[s * per:(s + 1) * per]
        Ms.append(M + np.triu(M, 1).T)
    U, S, Vt = np.linalg.svd(Ms[0])
    r = 2 * H
    if not S[r - 1] > SMALL_SINGULAR * S[0]:
        return "grow", f"no clear rank {r} (singular values {S[r - 1] / S[0]:.2g}, {S[r] / S[0]:.2g})"
    Ur, Vr, Sr = U[:, :r], Vt[:r].T, S[:r]
    T = [Ur.T @ M @ Vr / Sr for M in Ms[1:]]
    for _ in range(MIXES):             # the random combination: another when two pairs crowd
        lam, Y = np.linalg.eig(sum(c * Tk for c, Tk in zip(rng.normal(size=d), T)))
        pairs, clear = _pairs(lam)
        if clear:
            break
    got = _fit(T, Y, pairs, pts, vals, copies, delta, H, v_ref)
    if not isinstance(got[0], str):
        return got
    kind, why = got
    if not S[r] < RANK_GAP * S[r - 1]:     # e too large
        kind, why = "shrink", (f"no clear rank {r} (singular values {S[r - 1] / S[0]:.2g}, "
                               f"{S[r] / S[0]:.2g}) and {why}")
    elif not clear:                        # crowded pairs: another final token
        kind, why = "drop", "two heads' eigenvalues crowd in every combination tried, " + why
    if v_ref is not None:
        return kind, why
    return kind, why, lambda v: _fit(T, Y, pairs, pts, vals, copies, delta, H, v)


def _fit(T, Y, pairs, pts, vals, copies, delta, H, v_ref=None):
    """The heads of :func:`_pencil` from the eigenvalue ``pairs`` of ``T``'s combination
    (eigenvectors ``Y``), refined on ``vals``: ``(Q, v, residual, refitted)`` or
    ``("shrink", why)``.
    Only the refined residual decides: the pairs may be ambiguous, the rank gap unclear.
    When it fails, ``v_ref`` (a resolved token's ``v``, the same at every final token) is a
    second start, with the exponents of the heads whose least-squares ``v`` lie nearest."""
    d = pts.shape[1]
    Yi = np.linalg.inv(Y)
    Q = np.zeros((H, d))
    for h, (a, b) in enumerate(pairs):
        P, Pi = Y[:, [a, b]], Yi[[a, b]]
        for k in range(d):
            val = (np.trace(Pi @ T[k] @ P) / 2).real
            if not val > 0:
                return "shrink", "an eigenvalue is not positive"
            Q[h, k] = np.log(val) / delta
    rho = np.exp(pts @ Q.T)
    Phi = (rho[:, :, None] * pts[:, None, :]).reshape(len(pts), -1)
    v = np.linalg.lstsq(Phi, vals, rcond=None)[0].reshape(H, d)
    got = _refine(pts, vals, Q, v, copies)
    if _fits(*got):
        return (*got, False)
    if v_ref is not None:                         # from the first token's v, matched by v
        got = _refine(pts, vals, Q[_nearest(v_ref, v)[0]], v_ref, copies)
        if _fits(*got):
            return (*got, True)
    return "shrink", f"the refined fit leaves a relative residual {got[2]:.2g}"


def _fits(Q, v, res) -> bool:
    """A refined fit (:func:`_refine`) is a token's heads: finite, residual within FIT_LIMIT."""
    return bool(np.all(np.isfinite(Q)) and np.all(np.isfinite(v)) and res <= FIT_LIMIT)


def _nearest(v_ref, v):
    """``(order, C)``: for each head of ``v_ref`` the head of ``v`` nearest it, each used once,
    closest first, and the distances ``C[i, j]`` of ``v_ref[i]`` and ``v[j]`` relative to
    ``|v_ref[i]|``.  When no two heads of ``v_ref`` have the same nearest
    (``C.argmin(axis=1)``), ``order`` is those nearest."""
    C = np.linalg.norm(v_ref[:, None, :] - v[None, :, :], axis=2)
    C = C / np.maximum(np.linalg.norm(v_ref, axis=1), 1e-300)[:, None]
    C[~np.isfinite(C)] = np.inf
    order = [-1] * len(v_ref)
    for flat in np.argsort(C, axis=None, kind="stable"):
        i, j = divmod(int(flat), C.shape[1])
        if order[i] < 0 and j not in order:
            order[i] = j
    return order, C


class _Design:
    """The vectors ``alpha`` of each final token's pencil: the lattice (:func:`lattice`) and
    ``COPIES`` first; random vectors (``2H + ALPHA_MARGIN`` of norm about ``e_norm``, no
    coinciding sums, so about three times the points) and the five ``FINE_COPIES`` for a final
    token where the lattice failed at every scale tried, and, once they resolve a token, for
    every token after it; a token where both kinds fail leaves the next one starting on the
    lattice again (docs/howto/float-black-box.md, "The pencil start on a lattice")."""

    def __init__(self, d: int, H: int, seed: int):
        self.H = H
        self.grid = lattice(d, 2 * H + ALPHA_MARGIN)
        unit = np.random.default_rng([seed, 1]).normal(size=self.grid.shape)
        self.unit = unit / np.sqrt(d)
        self.kinds = ["lattice", "random"]

    def alphas(self, kind: str, ra: float):
        """``(alphas, step)`` in units of ``2^-GRID`` at the scale ``ra`` (:func:`_per_token`)."""
        g = 2 ** GRID
        if kind == "lattice":
            step = max(1, int(round(ra * LATTICE_STEP * g)))
            return self.grid.astype(np.int64) * step, step
        step = max(1, int(round(ra / np.sqrt(self.grid.shape[1]) * g)))
        return np.rint(self.unit * ra * g).astype(np.int64), step

    def resolve(self, ask, tok, name: str, ra: float, rng, notes: dict, v_ref=None) -> float:
        """Sets ``tok.Q, tok.v, tok.residual, tok.refitted`` when a pencil at ``tok.x``
        resolves, at up to ``TRIES`` scales of ``e`` per kind of ``alpha``; returns the scale
        to start the next token at.  Eigenvalue pairs that crowd drop the token (two heads'
        ``q_h`` nearly alike at ``x``: another ``x``).  (Trying the random vectors after pairs crowd at a
        smaller scale rescued one of the 90 forced-pencil bias cases at d <= 4 but cost
        MiniLM layer 0 two random batches, 120,093 queries instead of 68,856.)"""
        for kind in list(self.kinds):
            r = ra
            for _ in range(TRIES):
                got = _per_token(ask, tok.x, *self.alphas(kind, r), self.H, rng,
                                 COPIES if kind == "lattice" else FINE_COPIES, v_ref)
                if not isinstance(got[0], str):
                    tok.Q, tok.v, tok.residual, tok.refitted = got
                    self.kinds = self.kinds[self.kinds.index(kind):]
                    return r
                notes[f"{name} {kind} at {r:.3g}"] = got[1]
                tok.retries.extend(got[2:])     # its fit from a v resolved later
                if got[0] == "drop":    # two heads nearly alike at this x: another x
                    return ra
                r = r / SHRINK if got[0] == "shrink" else r * SHRINK
        return ra


def _match(tok, used, tokens, notes) -> None:
    """Appends ``tok`` to ``used`` with its heads in the order of ``used[0]``'s, matched by
    ``v`` (the same at every final token, :func:`_nearest`) within ``MATCH_LIMIT``, no two heads
    nearest the same one; else a note."""
    ref = used[0]
    order, C = _nearest(ref.v, tok.v)
    best = C.min(axis=1)
    if order != C.argmin(axis=1).tolist() or best.max() > MATCH_LIMIT:
        notes[f"x{tokens.index(tok) + 1} match"] = (f"its v differ from x{tokens.index(ref) + 1}'s "
                                                    f"by {best.max():.2g}")
        return
    tok.Q, tok.v = tok.Q[order], tok.v[order]
    used.append(tok)


def pencil_heads(ask, d: int, H: int, x_norm: float, e_norm: float, seed: int = 0,
                 bias: bool = False):
    """Float64 heads ``[(W_h, v_h)]`` from the pencils of ``d + SPARE_TOKENS`` final tokens
    (module doc), and a dict of what was done.  ``ask(queries)`` returns the outputs (floats)
    of a list of token lists; ``x_norm`` is the final tokens' norm, ``e_norm`` that of the
    vectors ``alpha`` (their sums keep ``|q_h . e|`` small against ``m``).  With ``bias``
    the heads are ``(W_h, v_h, u_h)`` from ``d + 1`` tokens at least (module doc)."""
    need = d + 1 if bias else d
    rng = np.random.default_rng(seed)
    design = _Design(d, H, seed)
    notes: dict = {}
    tokens, used, good_ra = [], [], e_norm
    while len(used) < need + SPARE_TOKENS and len(tokens) < need + EXTRA_TOKENS:
        if len(tokens) >= FIRST_TOKENS and not any(t.Q is not None for t in tokens):
            break                       # the first tokens all failed: not a matter of luck
        n = len(tokens)
        tok = _Token(dyadic(rng.normal(size=d) * x_norm / np.sqrt(d)))
        tokens.append(tok)
        good_ra = design.resolve(ask, tok, f"x{n + 1}", good_ra, rng, notes,
                                 used[0].v if used else None)
        if tok.Q is None:
            continue
        if used:
            _match(tok, used, tokens, notes)
            continue
        used.append(tok)                # the first resolved: the tokens before it again
        for early in tokens[:-1]:       # from its v (their answers kept: no query)
            for retry in early.retries:
                got = retry(tok.v)
                if not isinstance(got[0], str):
                    early.Q, early.v, early.residual, early.refitted = got
                    notes[f"x{tokens.index(early) + 1} again"] = "resolved from the v of the first"
                    _match(early, used, tokens, notes)
                    break
    if len(used) < need:
        raise DegenerateDraw(f"the pencil start resolved and matched the heads of {len(used)} of "
                             f"{len(tokens)} final tokens (at least {need} needed): {notes}")
    Xm = np.array([[float(t) for t in tok.x] for tok in used]).T        # d x n
    if bias:                            # columns (x; 1): [W | u] (x; 1) = q
        Xm = np.concatenate([Xm, np.ones((1, Xm.shape[1]))])
    if np.linalg.cond(Xm) > 1e6:
        raise DegenerateDraw("the pencil start's final tokens are nearly dependent")
    Xp = np.linalg.pinv(Xm)
    heads = [(np.stack([tok.Q[h] for tok in used], axis=1) @ Xp,
              np.mean([tok.v[h] for tok in used], axis=0)) for h in range(H)]
    if bias:
        heads = [(Wt[:, :d], v, Wt[:, d]) for Wt, v in heads]
    detail = {"final_tokens": len(tokens), "used": len(used),
              "worst_residual": f"{max(t.residual for t in used):.3g}",
              "refitted": sum(t.refitted for t in used), "dropped": notes}
    return heads, detail
