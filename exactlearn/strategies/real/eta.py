"""eta measured from the box (docs: explanation/real-field.md#eta-measured-from-the-box;
docs: howto/float-black-box.md#measure-eta-from-the-box).

Attention without positions is invariant under permutations of the non-final tokens, so a
float box that answers ``f(X)`` and ``f(pi X)`` differently shows its own rounding.
:func:`measure_noise` asks the plan's query shapes (``k`` copies of ``a = x + e``, ``m`` of
``x``, every node of :func:`~exactlearn.strategies.real.ratio.ratio_nodes` with two or more
non-final tokens) at several token scales, each in its own order and ``permutations`` random
ones; with ``steps=True`` (``tokens="float32"``) also at ``a +- delta`` (one grid step, random
signs), whose second difference ``|y(a + delta) + y(a - delta) - 2 y(a)| / 2`` is the scores'
rounding.  Each group's spread (``max y - min y``) lies under the envelope ``abs + rel |y|`` of
least mean height (over the vertices of the upper hull), and the declared eta is ``SAFETY``
times it; with float tokens each term is at least the type's unit roundoff (``FLOOR``).
:func:`measure_plan_noise` measures again on the plan's own tokens, one envelope per scale
(:class:`~exactlearn.strategies.real.stable_plan.Noise`).  Rounding that every order shares is
invisible here: the safety multiple and the learner's own noise tests cover it.

>>> from exactlearn.fields import Real
>>> from exactlearn.oracle import Recorder
>>> box = lambda X: sum(float(t[0]) for t in X[:-1]) * 0 + 1.0   # order-blind, exact
>>> est = measure_noise(Recorder(box, Real(dps=30), True), 2, 1, seed=0)
>>> est.noise, est.noise_rel, est.queries == est.groups * 4
(0.0, 0.0, True)
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gmpy2 import mpq

from exactlearn.strategies.real.eta_shapes import (envelope, measurement_size_problem,  # noqa: F401
                                                    shape_lengths)
from exactlearn.strategies.real.ratio import GRID, dyadic, family_tokens
from exactlearn.strategies.real.stable_plan import token_norm

#: the declared eta is this multiple of the measured envelope of the spreads
SAFETY = 30
#: token scales measured (tokens of norm about 1 times these): the stable plan's sigma for
#: weights of order one, and 1/4 and 4 times it (where the polish's targeted families often ask)
SCALES = (mpq(1, 2), mpq(2), mpq(8))
DRAWS = 2            # random (x, e) per scale and length
#: at most this many scales measured again once the stable plan's scale is chosen
#: (:func:`measure_plan_noise`): the probe's five and the plan's sigma x 1, 1/2, 2, 1/4, 4
PLAN_SCALES = 10
#: random (x, e) of the plan per scale and length there: each scale's envelope rests on its own
#: samples alone (a float32 12 x 4 layer erred by up to 0.69 times the eta of 2 draws)
PLAN_DRAWS = 3
PERMUTATIONS = 3     # random orders of the non-final tokens per query, besides its own
#: with float tokens, the least envelope (abs and rel) before the safety multiple: the unit
#: roundoff of the tokens' type (an answer computed in it carries at least its rounding)
FLOOR = {"float": 2.0 ** -53, "float64": 2.0 ** -53, "float32": 2.0 ** -24}
#: token kinds whose measurement adds grid steps (module doc, "Grid steps"): a float32 box's
#: scores carry a rounding (about 2^-24 |s|) that no reordering shows
STEPPED = ("float32",)
#: largest safety multiple: an integer exact as a float64 (a larger one overflowed after the
#: box had answered every measuring query)
MAX_SAFETY = 2 ** 53
CLIP = 3.0           # |entries| of x and e at most this before scaling: a = x + e stays
                     # below 8, 23 significant bits on the grid 2^-20


@dataclass
class NoiseEstimate:
    """The measured output error of a float box
    ([`estimate_noise`][exactlearn.strategies.real.eta.estimate_noise]); ``to_json()`` is the
    JSON's ``noise_estimated``."""

    noise: float            # declared absolute eta: SAFETY * envelope_abs
    noise_rel: float        # declared relative eta: SAFETY * envelope_rel
    safety: int
    envelope_abs: float     # the envelope of the spreads, before the safety multiple
    envelope_rel: float
    max_spread: float       # the largest spread of a group
    groups: int             # queries measured with their reorderings
    queries: int            # every query the box answered while measuring
    max_length: int
    lengths: list
    scales: list
    permutations: int
    draws: int
    method: str
    floor: float = 0.0      # least envelope term with float tokens (FLOOR), before safety

    def to_json(self) -> dict:
        return {"noise": repr(self.noise), "noise_rel": repr(self.noise_rel),
                "safety": self.safety, "envelope_abs": repr(self.envelope_abs),
                "envelope_rel": repr(self.envelope_rel), "max_spread": repr(self.max_spread),
                "groups": self.groups, "queries": self.queries, "max_length": self.max_length,
                "lengths": list(self.lengths), "scales": [str(s) for s in self.scales],
                "permutations": self.permutations, "draws": self.draws, "method": self.method,
                "floor": repr(self.floor)}


def _token(rnd, d, scale):
    """A random token of norm about ``scale``: Gaussian entries / sqrt(d), clipped to CLIP,
    rounded to the grid 2^-20, times ``scale`` (a power of two keeps them dyadic)."""
    raw = [max(-CLIP, min(CLIP, rnd.gauss(0.0, 1.0) / d ** 0.5)) for _ in range(d)]
    return tuple(scale * a for a in dyadic(raw))


def _build(rnd, d, H, scales, draws, permutations, steps, pairs=None) -> tuple:
    """The measuring queries: per scale, shape and draw one query (``k`` copies of ``a = x +
    e``, ``m`` copies of ``x``) in its own order and ``permutations`` random orders of its
    non-final tokens, and with ``steps`` ``a`` moved one grid step either way.  ``(x, e)`` are
    random tokens of norm about the scale, or with ``pairs`` (``{scale: [(x, e), ...]}``, the
    plan's own tokens at that scale) one of those drawn at random.  Returns ``(queries,
    groups, stepped)``: ``groups`` ``(first query, orders, scale index)``, ``stepped`` ``(base
    query, first stepped query, scale index)``."""
    shapes = shape_lengths(H)
    queries, groups, stepped = [], [], []
    for s, f in enumerate(scales):
        for k, m in shapes:
            for _ in range(draws):
                if pairs is None:
                    x, e = _token(rnd, d, f), _token(rnd, d, f)
                else:
                    x, e = pairs[f][rnd.randrange(len(pairs[f]))]
                a = tuple(p + q for p, q in zip(x, e))
                base = family_tokens(x, a, k, m)
                rest = base[:-1]
                orders = [rest]
                for _ in range(permutations):
                    p = list(rest)
                    rnd.shuffle(p)
                    orders.append(p)
                groups.append((len(queries), len(orders), s))
                queries += [o + [x] for o in orders]
                if steps:                   # a +- one grid step: the second difference
                    delta = [f * mpq(rnd.choice((-1, 1)), 2 ** GRID) for _ in range(d)]
                    up = tuple(p + q for p, q in zip(a, delta))
                    down = tuple(p - q for p, q in zip(a, delta))
                    stepped.append((len(queries) - len(orders), len(queries), s))
                    queries += [family_tokens(x, up, k, m), family_tokens(x, down, k, m)]
    return queries, groups, stepped


def _spreads(rec, queries, groups, stepped, view, n_scales) -> tuple:
    """Ask ``queries`` (one batch) and return per scale index ``(sizes, spreads)`` (every
    output its own with ``view``), and the number of outputs."""
    r0 = len(view.records) if view is not None else 0
    ys = rec.ask_many(queries)
    # the m answers of each query, in the field (differences taken before rounding to float)
    Y = [row for _, row in view.records[r0:]] if view is not None else [[y] for y in ys]
    m = len(Y[0]) if Y else 1
    out = [([], []) for _ in range(n_scales)]
    for start, n, s in groups:
        for j in range(m):
            g = [Y[q][j] for q in range(start, start + n)]
            out[s][1].append(abs(float(max(g) - min(g))))
            out[s][0].append(max(abs(float(y)) for y in g))
    for base, at, s in stepped:         # |y(a + delta) + y(a - delta) - 2 y(a)| / 2
        for j in range(m):
            y0, yu, yd = Y[base][j], Y[at][j], Y[at + 1][j]
            out[s][1].append(abs(float(yu + yd - 2 * y0)) / 2)
            out[s][0].append(max(abs(float(y)) for y in (y0, yu, yd)))
    return out, m


def _method(groups, permutations, steps, m, view, floor, safety, plan=False) -> str:
    floored = (f"; each term at least {floor!r} (the float tokens' unit roundoff)"
               if floor > 0 else "")
    return (f"permutation spread: {groups} queries of the stable plan's shapes (k copies "
            f"of a = x + e, m copies of x"
            + ("; x and e the plan's own tokens at each scale it asks" if plan else "")
            + f") each asked in its own order and {permutations} "
            f"random orders of its non-final tokens"
            + (f", and with a moved one grid step 2^-{GRID} (times the scale) either way "
               f"(the second difference |y(a + delta) + y(a - delta) - 2 y(a)| / 2: the "
               f"rounding of the scores, which no reordering changes)" if steps else "")
            + (f"; every one of the {m} outputs a spread and size of its own"
               if view is not None else "")
            + f"; envelope abs + rel |y| of least mean height over the spreads (max - min "
            f"per query){' at each scale apart' if plan else ''}{floored}, times {safety}")


def measure_noise(rec, d: int, H: int, *, seed=None, scales=None, draws: int = DRAWS,
                  permutations: int = PERMUTATIONS, safety: int = SAFETY,
                  floor: float = 0.0, steps: bool = False, view=None) -> NoiseEstimate:
    """Ask ``rec`` (a :class:`~exactlearn.oracle.Recorder`: every answer counted) the
    stable plan's query shapes for ``H`` heads in ``d`` dimensions, each in its own order and
    ``permutations`` random orders of its non-final tokens, and fit the envelope of the
    spreads (module doc), each of its two terms at least ``floor``.  ``steps`` (float32
    tokens): each query also with ``a`` moved one grid step either way (``a +- delta``,
    module doc "Grid steps"), its second difference a spread too.  One batch: a box with
    ``batch`` is asked once.

    ``view``: the :class:`~exactlearn.oracle.OutputsView` that ``rec`` asks (``learn(...,
    outputs=m)``): each query's m answers are read from its ``records`` and every output
    gives its own spread and size, one envelope over all of them (each output's error within
    ``noise + noise_rel |y_j|``); the queries and their count are the same."""
    rnd = random.Random(seed)
    scales = list(SCALES if scales is None else scales)
    shapes = shape_lengths(H)
    queries, groups, stepped = _build(rnd, d, H, scales, draws, permutations, steps)
    n0 = rec.queries
    per, m = _spreads(rec, queries, groups, stepped, view, len(scales))
    sizes = [x for s, _ in per for x in s]
    spreads = [x for _, s in per for x in s]
    ea, er = envelope(sizes, spreads)
    return NoiseEstimate(
        noise=safety * max(ea, floor), noise_rel=safety * max(er, floor), safety=safety, envelope_abs=ea,
        envelope_rel=er, max_spread=max(spreads, default=0.0), groups=len(groups),
        queries=rec.queries - n0, max_length=max(len(q) for q in queries),
        lengths=sorted({k + m for k, m in shapes}), scales=scales, permutations=permutations,
        draws=draws, method=_method(len(groups), permutations, steps, m, view, floor, safety),
        floor=floor)


@dataclass
class ScaledNoise:
    """eta measured at each scale the stable plan asks
    ([`measure_plan_noise`][exactlearn.strategies.real.eta.measure_plan_noise]): per scale
    (ascending) a [`NoiseEstimate`][exactlearn.strategies.real.eta.NoiseEstimate] of the
    plan's own tokens at that scale; ``queries`` counts every answer."""

    scales: list            # the token scales, ascending (exact rationals)
    estimates: list         # one NoiseEstimate per scale
    queries: int
    norms: list             # per scale the largest norm of its tokens x and a = x + e

    def at(self, scale) -> "NoiseEstimate":
        return self.estimates[self.scales.index(scale)]

    def to_json(self) -> list:
        return [{"scale": str(s), "max_token_norm": repr(n), "noise": repr(e.noise),
                 "noise_rel": repr(e.noise_rel),
                 "envelope_abs": repr(e.envelope_abs), "envelope_rel": repr(e.envelope_rel),
                 "max_spread": repr(e.max_spread), "groups": e.groups}
                for s, n, e in zip(self.scales, self.norms, self.estimates)]


def measure_plan_noise(rec, H: int, pairs: dict, *, seed=None, draws: int = PLAN_DRAWS,
                       permutations: int = PERMUTATIONS, safety: int = SAFETY,
                       floor: float = 0.0, steps: bool = False, view=None) -> ScaledNoise:
    """eta on the stable plan's own scales (docs/explanation/real-field.md#eta-measured-from-the-box):
    ``pairs`` maps each token scale the plan asks (the probe's, and the plan's sigma times 1,
    1/2, 2, 1/4, 4) to the plan's own ``(x, e)`` at that scale; at every shape of
    :func:`shape_lengths` ``draws`` of them are asked as :func:`measure_noise` asks its
    random tokens (one batch), and each scale gets its own envelope of the spreads, times
    ``safety`` (each term at least ``floor``).  A float32 layer's rounding grows with the
    scale (its scores ``x_i^T W_h x_n`` grow with its square): one envelope over every
    scale would charge the largest scale's rounding to every query.

    >>> from exactlearn.fields import Real
    >>> from exactlearn.oracle import Recorder
    >>> from gmpy2 import mpq
    >>> box = lambda X: float(len(X) % 3) * 2.0 ** -30 + 1.0     # order-blind
    >>> pairs = {mpq(s): [((mpq(s), mpq(0)), (mpq(0), mpq(s)))] for s in (1, 2)}
    >>> got = measure_plan_noise(Recorder(box, Real(dps=30), True), 1, pairs, seed=0)
    >>> [e.noise for e in got.estimates], got.queries == sum(e.queries for e in got.estimates)
    ([0.0, 0.0], True)
    >>> [round(n, 6) for n in got.norms]            # the largest |x|, |x + e| per scale
    [1.414214, 2.828427]
    """
    rnd = random.Random(seed)
    scales = sorted(pairs)
    d = len(pairs[scales[0]][0][0])
    shapes = shape_lengths(H)
    queries, groups, stepped = _build(rnd, d, H, scales, draws, permutations, steps, pairs)
    n0 = rec.queries
    per, m = _spreads(rec, queries, groups, stepped, view, len(scales))
    n_q = rec.queries - n0
    per_group = len(queries) // max(len(groups), 1)
    ests = []
    for s, (sizes, spreads) in enumerate(per):
        ea, er = envelope(sizes, spreads)
        ng = sum(1 for g in groups if g[2] == s)
        ests.append(NoiseEstimate(
            noise=safety * max(ea, floor), noise_rel=safety * max(er, floor), safety=safety,
            envelope_abs=ea, envelope_rel=er, max_spread=max(spreads, default=0.0), groups=ng,
            queries=ng * per_group, max_length=max(len(q) for q in queries),
            lengths=sorted({k + mm for k, mm in shapes}), scales=[scales[s]],
            permutations=permutations, draws=draws,
            method=_method(ng, permutations, steps, m, view, floor, safety, plan=True),
            floor=floor))
    ests[-1].queries += n_q - sum(e.queries for e in ests)     # every answer counted once
    norms = [max(max(token_norm(x), token_norm(tuple(p + q for p, q in zip(x, e))))
                 for x, e in pairs[s]) for s in scales]
    return ScaledNoise(scales, ests, n_q, norms)


def estimate_noise(box, d: int, heads: int = 1, *, field=None, tokens: str = "exact", seed=None,
                   scales=None, draws: int = DRAWS, permutations: int = PERMUTATIONS,
                   safety: int = SAFETY, outputs: int | None = None) -> NoiseEstimate:
    """A float box's output error from its answers' spread under permutations of the
    non-final tokens (docs: howto/float-black-box.md#measure-eta-from-the-box).

    Parameters
    ----------
    box, d
        The float black box, as in [`learn`][exactlearn.api.learn]; the token dimension.
    field, seed, scales, outputs : optional
        ``field`` as in ``learn`` (default ``box.field``, else ``Real(dps=30)``; real only);
        the tokens' seed; their norms, powers of two (default ``SCALES``: 1/2, 2, 8); with
        ``outputs=m``, m values per query (as in ``learn``), all entering the one envelope.
    tokens : str, default "exact"
        As in ``learn``.
    heads, draws, permutations, safety : int, default 1, 2, 3, 30
        Plan nodes (lengths to 257); queries per shape, scale; random orders of each; the multiple.

    Returns
    -------
    NoiseEstimate
        ``noise`` and ``noise_rel`` are ``safety`` times the envelope of the spreads (each
        term at least ``FLOOR[tokens]`` with float tokens), for ``learn(noise=...,
        noise_rel=...)``; ``queries`` counts every answer (``noise="auto"``: in the run).

    Examples
    --------
    >>> import numpy as np
    >>> from exactlearn import estimate_noise
    >>> def box(X):                      # one head, W = I / 2, v = (1, -1), in float64
    ...     s = X @ X[-1] / 2
    ...     p = np.exp(s - s.max())
    ...     return float((p / p.sum()) @ (X @ np.array([1.0, -1.0])))
    >>> est = estimate_noise(box, d=2, tokens="float64", seed=0)
    >>> 0 < est.noise + est.noise_rel < 1e-13, est.queries, est.max_length, est.lengths
    (True, 192, 257, [3, 12, 54, 257])
    """
    from exactlearn.fields import Real
    from exactlearn.oracle import Recorder, TokenAdapter, resolve_field
    for name, val, low in (("d", d, 1), ("heads", heads, 1), ("draws", draws, 1),
                           ("permutations", permutations, 1), ("safety", safety, 1),
                           ("outputs", 1 if outputs is None else outputs, 1)):
        if isinstance(val, bool) or not isinstance(val, int) or val < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {val!r}")
    if safety > MAX_SAFETY:
        raise ValueError(f"safety must be at most 2^53 (MAX_SAFETY), got one of {safety.bit_length()} bits")
    if scales is not None and not isinstance(scales, (list, tuple)):
        try:
            scales = list(scales)
        except TypeError:
            raise ValueError(f"scales must be positive powers of two, got {scales!r}") from None
    problem = measurement_size_problem(d, heads, len(SCALES if scales is None else scales),
                                       draws, permutations, steps=tokens in STEPPED,
                                       outputs=1 if outputs is None else outputs)
    if problem is not None:                 # from the sizes alone, before anything is built
        raise ValueError(problem)
    if scales is not None:
        try:
            scales = [mpq(s) for s in scales]
        except (TypeError, ValueError):
            raise ValueError(f"scales must be positive powers of two, got {scales!r}") from None
        if not scales or any(s <= 0 or (s.numerator & (s.numerator - 1)) or
                             (s.denominator & (s.denominator - 1)) for s in scales):
            raise ValueError(f"scales must be positive powers of two (the tokens stay dyadic), "
                             f"got {[str(s) for s in scales]}")
    if tokens != "exact":
        box = TokenAdapter(box, tokens)
    if field is None and getattr(box, "field", None) is None:
        field = Real(dps=30)
    K, convert = resolve_field(box, field)
    if K.is_exact:
        raise ValueError(f"estimate_noise measures a float box over the real field, not the "
                         f"{K.name} field (an exact box has no noise)")
    view = None
    if outputs is not None:                 # the m answers kept per query, one asked each
        from exactlearn.oracle import OutputsView
        box = view = OutputsView(box, outputs, K, convert, [1] + [0] * (outputs - 1))
        convert = False
    return measure_noise(Recorder(box, K, convert), d, heads, seed=seed, scales=scales,
                         draws=draws, permutations=permutations, safety=safety,
                         floor=FLOOR.get(tokens, 0.0), steps=tokens in STEPPED, view=view)
