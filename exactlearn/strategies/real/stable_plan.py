"""The stable plan's constants, its configurations and how it asks
(:mod:`~exactlearn.strategies.real.stable`, steps 1 and 3b; docs/explanation/real-field.md,
"The stable plan for float black boxes"): the query count (:func:`stable_count`), the dyadic
tokens (:func:`dyadic_basis`, of the Cayley matrices :func:`cayley`), the paper plan's nodes
(:func:`paper_nodes`), the plan for biases
(:func:`bias_tokens`, :func:`stable_bias_plan`) and the per-observation eta (:class:`Noise`,
every observation's: :meth:`Noise.extend`).
Every query is asked once, through :class:`~exactlearn.pipeline.ask.AskOnce`.
"""
from __future__ import annotations

import math

import numpy as np
from gmpy2 import mpq

from exactlearn.algebra.linalg import identity, inverse, is_invertible, matmul
from exactlearn.errors import DegenerateDraw
from exactlearn.fields.rational import QQ
from exactlearn.pipeline.plan import (Config, Plan, across_direction, final_token_configs,
                                      paper_plan, within_directions)
from exactlearn.strategies.real.ratio import dyadic, ratio_nodes
from exactlearn.strategies.real.sensitivity import rounding


#: first-order validity: a family's relative bounds at most this (second-order terms are
#: then below 1e-2 of the first-order ones, inside the certificate's SAFETY factor 2); the
#: same on the paper's nodes
STABLE_LINEAR_LIMIT = 1e-2
#: matching: equal within EQUAL_FACTOR first-order bounds, unequal beyond
#: STABLE_UNEQUAL_FACTOR (undecided between: a failure), on either plan's nodes
EQUAL_FACTOR = 10
STABLE_UNEQUAL_FACTOR = 10 ** 2
#: the paper plan's scale probe: rms log rho of about PAPER_TARGET (the stable plan's:
#: :data:`~exactlearn.strategies.real.stable_probe.STABLE_TARGET`, 3), from enough basis
#: families to see PROBE_SAMPLES exponents
#: (:func:`~exactlearn.strategies.real.stable_probe.probe_families`)
PAPER_TARGET = 1.0
PROBE_SAMPLES = 6
#: the run fails when more than this share of the configurations cannot be resolved
MAX_UNRESOLVED = 0.25
#: the same for a coarse box (module doc): its families only label and start the polish, which
#: alone certifies (a wrong label fails the run, it certifies nothing); four float32 heads left
#: 26 % to 30 % unresolved (d = 4, 8), the rest labelled, and a biased float32 torch layer
#: (d = 8, H = 4, seed 1 of benchmarks/bench_adapters.py) 57 % of its first 127 -- its
#: families' four log rho crowd or lie beyond the nodes at any scale -- yet the 40 % labelled
#: and 209 supplementary families certified it (error 3.2e-6 within a bound of 2.5e-3)
COARSE_MAX_UNRESOLVED = 0.75
ROOTS_TRIED = 4          # basis families of x_1 tried as the root of the labelling
SUPPLEMENT_ROUNDS = 5    # rounds of supplementary families for undetermined entries
SUPPLEMENT_PER_ENTRY = 3
PENCIL_MIN_HEADS = 2     # the pencil start (step 3b) when the families fail, from this many heads
PENCIL_SCALES = (mpq(1),)   # the plan's families after it, around sigma
#: a box whose declared eta exceeds this times its outputs is coarser than float64 (a float32
#: box declares ~1e-6, a float64 one ~1e-15): its families' bounds follow their scatter
COARSE = 2.0 ** -32
SCATTER_MARGIN = 4       # kappa = this x the rms of the weighted residuals per degree of freedom
SCATTER_MIN = 1e-3       # kappa at least this
#: a coarse box's families only label and start the polish (their solve's bounds are used
#: only within STABLE_LINEAR_LIMIT at the declared eta): first-order bounds within 10 %
COARSE_LINEAR_LIMIT = 1e-1


def stable_count(d: int, H: int, bias: bool = False, nodes=None) -> int:
    """Queries of the plan (probe excluded): every configuration at every node but ``(0, 1)``,
    one ``(x)`` per distinct final token.  The stable plan's ``nodes`` (None:
    :func:`~exactlearn.strategies.real.ratio.ratio_nodes`, ``n_t`` finite nodes, at most
    ``4H + 4``; its lean nodes, ``ratio_nodes(H, lean=True)``, ``3H + 1``) and one ``(a)`` per
    configuration: ``(2d^2 - 1)(n_t + 1) + 2d - 1``, and with ``bias``
    ``(2d^2 + 2d - 1)(n_t + 1) + 2d + 1``; the paper's (:func:`paper_nodes`)
    ``2H (2d^2 - 1) + 2d - 1``.

    >>> stable_count(2, 1), stable_count(4, 2), stable_count(2, 1, bias=True)
    (66, 410, 104)
    >>> stable_count(4, 2, nodes=ratio_nodes(2, lean=True))
    255
    >>> stable_count(4, 2, nodes=paper_nodes(2))
    131
    """
    n = len(ratio_nodes(H) if nodes is None else nodes) - 1    # but (0, 1)
    configs = 2 * d * d + 2 * d - 1 if bias else 2 * d * d - 1
    return configs * n + (2 * d + 1 if bias else 2 * d - 1)


def paper_nodes(H: int) -> list:
    """The paper plan's nodes: ``q_k = (a^k, x)``, ``k = 0 .. 2H``, the ratio family's
    ``(k, 1)`` (:func:`~exactlearn.strategies.real.ratio.family_tokens`).

    >>> paper_nodes(1)
    [(0, 1), (1, 1), (2, 1)]
    """
    return [(k, 1) for k in range(2 * H + 1)]


def cayley(A):
    """The exactly orthogonal rational matrix ``(I - S)(I + S)^-1`` of the normalised skew
    part ``S = (A - A^T) / max|A|`` of an integer matrix (``I + S`` is invertible: S has
    imaginary spectrum).  The normalisation keeps the rotation angles spread: a large skew
    part would give a rotation close to ``-I``, whatever the draw.

    >>> Q = cayley([[3, 1], [-2, 5]])
    >>> [[sum(Q[k][i] * Q[k][j] for k in range(2)) for j in range(2)] for i in range(2)]
    [[mpq(1,1), mpq(0,1)], [mpq(0,1), mpq(1,1)]]
    """
    d = len(A)
    top = max(1, max(abs(int(a)) for row in A for a in row))
    S = [[QQ(A[i][j] - A[j][i]) / top for j in range(d)] for i in range(d)]
    I = identity(d, QQ)
    minus = [[I[i][j] - S[i][j] for j in range(d)] for i in range(d)]
    plus = [[I[i][j] + S[i][j] for j in range(d)] for i in range(d)]
    return matmul(minus, inverse(plus, QQ), QQ)


BIAS_GRID = 19           # the plan for biases' final tokens: on 2^-19, so midpoints are on 2^-20


def bias_tokens(Q) -> list:
    """d + 1 final tokens x_0..x_d from d near-orthonormal dyadic columns ``Q``: with
    ``q_0 = beta (q_1 + ... + q_d)``, ``beta = (1 - sqrt(d + 1))/d``, the q's are the vertices
    of a regular simplex; centred at 0 (so that u is an interpolation, not an extrapolation)
    and rounded to the grid ``2^-BIAS_GRID``.  Raises
    :class:`~exactlearn.errors.DegenerateDraw` when they are not affinely independent.

    >>> from gmpy2 import mpq
    >>> pts = bias_tokens([(mpq(1), mpq(0)), (mpq(0), mpq(1))])
    >>> len(pts), [round(float(a), 4) for a in pts[0]]
    (3, [-0.5774, -0.5774])
    """
    d = len(Q)
    beta = (1 - math.sqrt(d + 1)) / d
    s = [sum(float(q[r]) for q in Q) for r in range(d)]
    pts = [[beta * s[r] for r in range(d)]] + [[float(q[r]) for r in range(d)] for q in Q]
    g = [sum(p[r] for p in pts) / (d + 1) for r in range(d)]
    scale = 2 ** BIAS_GRID
    out = [tuple(mpq(int(round((p[r] - g[r]) * scale)), scale) for r in range(d)) for p in pts]
    if not is_invertible([[QQ(p[r]) for p in out] for r in range(d)] + [[QQ(1)] * (d + 1)], QQ):
        raise DegenerateDraw("the d + 1 final tokens of the plan for biases are not affinely "
                             "independent")
    return out


def stable_bias_plan(X, E, H: int):
    """The stable plan for biases (module doc): ``X`` the d + 1 final tokens x_0..x_d, ``E``
    the d directions.

    >>> p = stable_bias_plan([(0, 0), (2, 0), (0, 2)], [(1, 0), (0, 1)], 1)
    >>> len(p.configs), p.configs[-1].kind, [str(a) for a in p.configs[-1].x]
    (11, 'across', ['0', '1'])
    """
    X = tuple(tuple(x) for x in X)
    E = tuple(tuple(e) for e in E)
    d = len(E)
    configs = []
    within = within_directions(E)          # one tuple per direction, shared
    for i in range(d + 1):
        configs.extend(final_token_configs(i, X[i], E, within))
    for i in range(1, d + 1):
        j = across_direction(i, d)
        mid = tuple((QQ(a) + QQ(b)) / 2 for a, b in zip(X[0], X[i]))
        configs.append(Config("across", i, j, mid, E[j]))
    return Plan(d, H, X, E, configs, name="stable", bias=True)


def scaled_plan(plan0, sigma, H: int):
    """The unit plan ``plan0``'s configurations on its tokens times ``sigma``."""
    X = [tuple(sigma * a for a in x) for x in plan0.X]
    E = [tuple(sigma * a for a in e) for e in plan0.E]
    return stable_bias_plan(X, E, H) if plan0.bias else paper_plan(X, E, H)


def dyadic_basis(cols):
    """The Cayley-orthogonal matrix of ``cols`` (a drawn integer matrix, columns), rounded
    to the grid ``2^-GRID`` (:func:`~exactlearn.strategies.real.ratio.dyadic`): columns of exact
    dyadic rationals."""
    d = len(cols)
    Q = cayley([[cols[j][i] for j in range(d)] for i in range(d)])
    return [dyadic(Q[i][j] for i in range(d)) for j in range(d)]


class Noise:
    """eta_q = eta + eta_rel |y_q| + rounding (floats: bounds need a few digits).

    ``table`` (``noise="auto"``, :meth:`by_scale`): eta measured at each token scale the plan
    asks, as ``(largest token norm at that scale, [(eta, eta_rel), ...])`` ascending, each row
    with the lines of every smaller scale too (rounding does not shrink with the scale: a
    row's few samples may show less): a query whose largest token norm is ``norm`` takes the
    largest line of the first row that reaches it (a query beyond every row the last row,
    times ``(norm / its norm)^3``: a float32 layer's rounding grows about as the cube of the
    scale); without ``norm``, the largest eta and eta_rel of any row.

    >>> from exactlearn.fields import Real
    >>> nz = Noise(Real(dps=30), 1e-6, 0.0)
    >>> nz.by_scale([(1.0, 1e-7, 2e-8), (2.0, 4e-7, 1e-8)])
    >>> nz.of(0.0, 0, 0.5) == 1e-7, nz.of(0.0, 0, 2.0) == 4e-7, nz.of(0.0, 0, 4.0) == 32e-7
    (True, True, True)
    >>> nz.of(100.0, 0, 2.0) == 1e-7 + 2e-8 * 100         # the smaller scale's line is higher
    True
    >>> nz.of(1.0, 0) == 4e-7 + 2e-8
    True
    """

    def __init__(self, K, eta, eta_rel):
        self.K, self.eta, self.rel = K, float(eta), float(eta_rel)
        self.unit = float(rounding(K, 1))       # a power of two: unit * size is exact
        self.table = None

    def by_scale(self, rows) -> None:
        """Take eta per scale (class doc) from ``(norm, eta, eta_rel)`` rows; ``eta`` and
        ``rel`` become the largest of any row."""
        table, lines = [], []
        for n, e, r in sorted((float(n), float(e), float(r)) for n, e, r in rows):
            lines = lines + [(e, r)]
            table.append((n, lines))
        self.table = table
        self.eta = max(e for e, _ in lines)
        self.rel = max(r for _, r in lines)

    def of(self, y, size, norm=None):
        if self.table is None or norm is None:
            return self.eta + self.rel * abs(float(y)) + self.unit * float(size)
        a = abs(float(y))
        for limit, lines in self.table:
            if norm <= limit:
                return max(e + r * a for e, r in lines) + self.unit * float(size)
        return (max(e + r * a for e, r in lines) * (norm / limit) ** 3
                + self.unit * float(size))

    def extend(self, rec, size, etas):
        """``etas`` (an array) extended to every observation of ``rec``: eta_q at ``size``, by
        each query's token scale when eta was measured per scale."""
        first = len(etas)
        out = np.concatenate([etas, np.zeros(len(rec.observations) - first)])
        norms: dict = {}
        for q in range(first, len(out)):
            toks, y = rec.observations[q]
            out[q] = self.of(y, size, query_norm(toks, norms) if self.table else None)
        return out


def token_norm(t) -> float:
    """The 2-norm of a token (exact entries), in float64, rounded up a little."""
    return math.sqrt(sum(float(a) ** 2 for a in t)) * (1 + 1e-12)


def query_norm(tokens, cache=None) -> float:
    """The largest 2-norm of a query's tokens (:func:`token_norm`); ``cache`` (a dict) keeps
    each token object's norm, so that a query of a few hundred copies of two tokens costs
    two norms."""
    cache = {} if cache is None else cache
    best = 0.0
    prev = None
    for t in tokens:
        if t is prev:
            continue
        prev = t
        n = cache.get(id(t))
        if n is None:
            n = cache[id(t)] = (token_norm(t), t)
        best = max(best, n[0])
    return best
