"""From the cones' heads to a one-layer Transformer: neuron jumps, orientations, merging, the model.

The cones (:mod:`.cones`) give, for each piece of the path (:mod:`.path`), the
heads ``(W_h, w_h^S)`` with ``w_h^S = sum_{j in S} u_j gamma_{jh}`` over the
active neurons S (docs: howto/transformer.md; the paper,
arXiv:2608.03294, claims the one-layer Transformer "under additional
conditions": ours are :data:`.result.CONDITIONS`).

4. **Neurons.**  Across kink k the active set changes by one neuron, so
   ``Delta_k = w^{after} - w^{before} = +-u_j (gamma_{j1}, ..., gamma_{jH})``.
   Which sign is fixed by the one global constraint the bias-free model gives:
   the neurons active at the first cone are exactly those that switch *off*
   along the path, so ``sum_{k in Off} Delta_k = -w^{first}`` (two solutions
   differ by linear terms that cancel: the same function).  When no subset
   fits, what is left is a linear term ``L . (y_1, ..., y_H)`` -- two
   neurons on one hyperplane with opposite gammas leave one -- written as
   ``ReLU(L.y) - ReLU(-L.y)`` (:func:`_orientations`).  The sign of u_j is
   that of ``u_j beta_j . x`` on the active side.  Checked on the way: every
   sampled single-token output lies on its cone's linear map and every kink on
   its neuron's hyperplane (a failed check redraws the path).
5. **Model** (:func:`_build`).  Heads: the distinct W found.  Neurons with
   positively parallel gammas are merged (:func:`_merge_parallel`); then a rank
   factorisation ``[u_j gamma_{jh}]_{j,h} = B [O_1 ... O_H]`` (m = its rank,
   :func:`exactlearn.algebra.linalg.rref`) gives O and B, with u_j = +-1 (or the
   merged weight).
"""

from __future__ import annotations

from gmpy2 import mpq

from exactlearn.algebra.linalg import rref
from exactlearn.errors import TransformerFailure
from exactlearn.fields.rational import QQ
from exactlearn.strategies.transformer.path import to_mpq
from exactlearn.transformer_model import OneLayerTransformer, sign


def assemble(K, d, H, path, ts, centres, cone_heads) -> OneLayerTransformer:
    """The Transformer of the cones' heads (module doc, steps 4 and 5).

    ``path`` is the :class:`.path.Path` with its samples, ``ts`` its kinks in
    order, ``centres[k]`` the primitive direction of cone k (between kinks
    k - 1 and k) and ``cone_heads[k]`` its recovered heads.
    """
    # 4. the distinct W over all cones, and each cone's values w^S per head
    Ws = []
    for hs in cone_heads:
        for h in hs:
            if not any(_same_matrix(K, h.W, W) for W in Ws):
                Ws.append(h.W)
    if len(Ws) > H:
        raise TransformerFailure(f"{len(Ws)} distinct W over the cones exceed the head bound {H} "
                                 "(black box outside the model class)")
    G = len(Ws)

    def wvec(hs):
        out = [K.zero] * (G * d)
        for h in hs:
            g = next(i for i, W in enumerate(Ws) if _same_matrix(K, h.W, W))
            for c in range(d):
                out[g * d + c] = K(h.v[c])
        return out

    w = [wvec(hs) for hs in cone_heads]

    def beta(vec):                            # sum over heads: the single-token linear map
        return [sum((vec[g * d + c] for g in range(G)), K.zero) for c in range(d)]

    def dot(u, x):
        return sum((a * K(b) for a, b in zip(u, x)), K.zero)

    _check_cones(K, path, ts, [beta(wn) for wn in w], dot)
    # the jump across each kink is one neuron, on its hyperplane
    deltas = []
    for k, t in enumerate(ts):
        delta = [a - b for a, b in zip(w[k + 1], w[k])]
        if all(K.is_zero(a) for a in delta):
            raise TransformerFailure("a kink with no change of the cone values")
        if not K.is_zero(dot(beta(delta), path.x(t))):
            raise TransformerFailure("a kink off the hyperplane of its neuron (two neurons at once? C2)")
        deltas.append(delta)
    # which kinks switch a neuron off (sum over Off of Delta_k = -w^{first}), and the
    # linear term L.y left over when no subset fits (see _orientations), written as
    # L.y = ReLU(L.y) - ReLU(-L.y)
    off, linear = _orientations(K, deltas, w[0])
    neurons, u = [], []
    for k, delta in enumerate(deltas):
        U = [-a for a in delta] if k in off else delta
        active = centres[k] if k in off else centres[k + 1]
        s = sign(K, dot(beta(U), active))
        if not s:
            raise TransformerFailure("cannot decide on which side of its hyperplane a neuron is active")
        neurons.append([a * s for a in U])
        u.append(K(s))
    if not all(K.is_zero(a) for a in linear):
        neurons += [linear, [-a for a in linear]]
        u += [K.one, -K.one]
    # 5. the model
    neurons, u = _merge_parallel(K, neurons, u)
    return _build(K, d, Ws, neurons, u)


def _check_cones(K, path, ts, betas, dot) -> None:
    """Every sampled single-token output lies on its cone's linear map ``betas[k]`` (both
    cones' at a kink), or :class:`TransformerFailure`."""
    for t, y in path.samples.items():
        k = sum(1 for b in ts if b < t)
        cones = [k] + ([k + 1] if any(b == t for b in ts) else [])
        for n in cones:
            if not K.eq(dot(betas[n], path.x(t)), y):
                raise TransformerFailure("a single-token output is off its cone's linear map "
                                         "(an undetected kink, or a neuron with beta = 0 (C1))")


def _same_matrix(K, A, B) -> bool:
    return all(K.eq(K(a), K(b)) for ra, rb in zip(A, B) for a, b in zip(ra, rb))


def _orientations(K, deltas, w0):
    """Which kinks switch a neuron off, and the linear term left over.

    ``L = w0 + sum_{k in Off} Delta_k`` is what the kink neurons leave of the
    first cone's values.  Preferred: L = 0 (the usual case); else L parallel to
    one Delta_k (two neurons on that hyperplane with opposite gammas:
    ``a ReLU(z) + b ReLU(-z) = (a + b) ReLU(z) - b z``); else Off empty and
    L = w0 (e.g. an opposite pair whose kinks cancel leaves a pure linear term).
    Every choice is the same function *if* each kink is one neuron or a group of
    neurons with parallel gammas (C2); when it is not, the certificate fails.

    >>> _orientations(QQ, [[QQ(1), QQ(0)], [QQ(0), QQ(2)]], [QQ(0), QQ(-2)])
    ({1}, [mpq(0,1), mpq(0,1)])
    """
    n = len(deltas)
    if n > 16:
        raise TransformerFailure(f"{n} kinks: too many neurons for the sign resolution")
    fallback = None
    for mask in range(1 << n):
        L = list(w0)
        for k in range(n):
            if mask >> k & 1:
                L = [a + b for a, b in zip(L, deltas[k])]
        off = {k for k in range(n) if mask >> k & 1}
        if all(K.is_zero(a) for a in L):
            return off, L
        if fallback is None and any(_parallel(K, L, dl) for dl in deltas):
            fallback = (off, L)
    return fallback if fallback is not None else (set(), list(w0))


def _parallel(K, a, b) -> bool:
    """a = lambda b for some scalar lambda (b nonzero)."""
    i = next((i for i, x in enumerate(b) if not K.is_zero(x)), None)
    if i is None:
        return False
    lam = a[i] / b[i]
    return all(K.eq(x, lam * y) for x, y in zip(a, b))


def _merge_parallel(K, neurons, u):
    """Merge neurons with positively parallel gammas: s1 ReLU(G) + s2 ReLU(c G) = (s1 + c s2) ReLU(G).

    >>> _merge_parallel(QQ, [[QQ(1), QQ(2)], [QQ(2), QQ(4)], [QQ(-1), QQ(-2)]], [QQ(1)] * 3)
    ([[mpq(1,1), mpq(2,1)], [mpq(-1,1), mpq(-2,1)]], [mpq(3,1), mpq(1,1)])
    """
    out_n, out_u = [], []
    for n, s in zip(neurons, u):
        for idx, m in enumerate(out_n):
            if _parallel(K, n, m):
                i = next(i for i, x in enumerate(m) if not K.is_zero(x))
                c = n[i] / m[i]
                if sign(K, c) == 1:
                    out_u[idx] = out_u[idx] + c * s
                    break
        else:
            out_n.append(list(n))
            out_u.append(s)
    keep = [(n, s) for n, s in zip(out_n, out_u) if not K.is_zero(s)]
    return [n for n, _ in keep], [s for _, s in keep]


def _build(K, d, Ws, neurons, u) -> OneLayerTransformer:
    """Heads (W_g, O_g) and FFN (B, u) with O_g^T b_j = neuron j's block g.

    Exact fields: a rank factorisation ``N = B R`` of the neuron matrix N (rows
    ``(gamma'_{j1}, ..., gamma'_{jG})``), R its reduced row echelon form, so m is
    the rank of N.  Real field: one hidden unit per neuron (B = identity, no
    rank decision); the weights are stored as the exact dyadic values of the mpfs.
    """
    rows = [[to_mpq(K, a) for a in n] for n in neurons]
    if K.is_exact:
        R, pivots = rref(rows, QQ)
        B = [[row[p] for p in pivots] for row in rows]
    else:
        R = rows
        B = [[mpq(int(i == j)) for i in range(len(rows))] for j in range(len(rows))]
    if not R:                                 # no neuron: T = 0
        return OneLayerTransformer([], [], [], d=d, m=1)
    heads = [([[to_mpq(K, a) for a in row] for row in W],
              [[r[g * d + c] for c in range(d)] for r in R]) for g, W in enumerate(Ws)]
    return OneLayerTransformer(heads, B, [to_mpq(K, a) for a in u], d=d, m=len(R))
