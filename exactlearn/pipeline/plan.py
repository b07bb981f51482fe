"""The query plan as a value (arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works): configurations and queries, before any is asked.

Given invertible X = [x_1 ... x_d] and E = [e_1 ... e_d] (columns), the paper
plan has 2d^2 - 1 configurations (x, e):

* ``basis``  (x_i, e_j)             for all i, j           -- d^2
* ``within`` (x_i, e_1 + e_j)       for all i, j >= 2      -- d(d - 1)
* ``across`` (x_1 + x_i, e_j(i))    for i >= 2              -- d - 1

where j(i) = (i - 2) mod d cycles through the directions (the paper uses e_1
throughout; cycling keeps the count and the matching, and makes an affine term
b.x_i in the scores -- a key bias, outside the model class -- visible unless b
is orthogonal to every direction used, instead of to e_1 alone).

Each configuration is sampled at k = 0, 1, ..., 2H on q_k = (a^k, x), a = x + e.
The 2d - 1 configurations with final token x_1 share the single query (x_1);
all other k = 0 values are *computed* from V, so the plan asks

    1 + 2H (2d^2 - 1) = 4 H d^2 - 2H + 1

queries, the longest of 2H + 1 tokens.  With a bound H0, H0 replaces H.

>>> p = paper_plan([[1, 0], [0, 1]], [[1, 1], [0, 1]], H=2)
>>> len(p.configs), p.count, p.max_length, p.count == 4 * 2 * 2**2 - 2 * 2 + 1
(7, 29, 5, True)
"""

from __future__ import annotations

import functools
import operator
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from exactlearn.fields.rational import QQ
from exactlearn.algebra.linalg import is_invertible
from exactlearn.limits import check_plan_size


@dataclass(frozen=True)
class Config:
    """One query family (x, e); ``i``/``j`` are 0-based indices into X/E columns."""

    kind: str          # "basis" | "within" | "across"
    i: int
    j: int
    x: tuple
    e: tuple

    @functools.cached_property
    def a(self) -> tuple:
        return self._sum()

    def _sum(self, pool=None) -> tuple:
        """x + e, not cached; with ``pool`` (a dict) equal int entries as one object."""
        if pool is None:
            return tuple(map(operator.add, self.x, self.e))
        return tuple([pool.setdefault(v, v) if type(v) is int else v
                      for v in map(operator.add, self.x, self.e)])

    def tokens(self, k: int) -> list:
        """q_k = (a, ..., a [k times], x), with a from :meth:`summed` (not kept)."""
        return [self.summed()] * k + [self.x] if k else [self.x]

    def summed(self) -> tuple:
        """a = x + e without keeping it on the configuration: the cached :attr:`a` when some
        step cached it (:func:`share_tokens`), else a fresh tuple.  A paper plan at d = 384
        has 294,913 configurations, and a cached a on each would hold about 4 GB
        (docs/explanation/performance.md, "Memory at full width").

        >>> c = Config("basis", 0, 0, (1, 2), (3, 4))
        >>> c.summed(), "a" in c.__dict__
        ((4, 6), False)
        """
        return self.__dict__.get("a") or self._sum()

    def asked_in(self, values, n: int) -> bool:
        """Whether q_1, ..., q_n are all ``in values`` (an
        :class:`~exactlearn.pipeline.ask.AskOnce`), without keeping a = x + e for a
        configuration never asked: a plan's check of which of its configurations were asked
        (hundreds of thousands at d = 384, most never asked) would otherwise hold every
        cached a (about 3 GB there; docs/explanation/performance.md).

        >>> from exactlearn.oracle import Recorder
        >>> from exactlearn.pipeline.ask import AskOnce
        >>> values = AskOnce(Recorder(lambda tokens: 0, QQ, convert=True))
        >>> c = Config("basis", 0, 0, (1, 2), (3, 4))
        >>> c.asked_in(values, 1), "a" in c.__dict__
        (False, False)
        >>> _ = values(c.tokens(1)); c.asked_in(values, 1)
        True
        """
        a = self.summed()
        return all([a] * k + [self.x] in values for k in range(1, n + 1))

    @property
    def shares_k0(self) -> bool:
        """Final token x_1: its k = 0 value is the one shared query (x_1)."""
        return self.kind in ("basis", "within") and self.i == 0


def share_tokens(configs) -> None:
    """Cache a = x + e of ``configs`` (the ones a plan asks) now, with equal entries as one
    int object: a's entries past 256 are each an int of their own (28 to 32 bytes against
    a pointer's 8), and at d = 384 the efficient plan's 23,599 asked tokens held about
    290 MB of such ints (docs/explanation/performance.md, "A MiniLM layer at full width").
    The same tuples, by value; only ints are pooled (1 and 1.0 stay what they are).

    >>> c = Config("basis", 0, 0, (1000, 5), (0, 995))
    >>> share_tokens([c]); c.a, c.a[0] is c.a[1]
    ((1000, 1000), True)
    """
    pool: dict = {}
    for c in configs:
        if "a" not in c.__dict__:
            c.__dict__["a"] = c._sum(pool)


@dataclass(frozen=True, slots=True)
class Query:
    config: int        # index into Plan.configs (the first that uses it)
    k: int


class FamilyQueries(Sequence):
    """The queries of a plan that asks the one shared k = 0 query, then every configuration
    n at k = 1..``per`` in turn (the paper's plan and the plan for biases): a sequence
    computed on demand.  A list of :class:`Query` objects would hold 7,077,865 of them at
    d = 384, H = 12 (about 400 MB, on the driver and on every Dask worker's copy of the plan;
    docs/explanation/performance.md, "The paper plan on two Dask workers, D = 384").

    >>> qs = FamilyQueries(2, 3)
    >>> len(qs), qs[0], qs[4], qs[-1], list(qs) == [qs[t] for t in range(len(qs))]
    (7, Query(config=0, k=0), Query(config=1, k=1), Query(config=1, k=3), True)
    >>> qs == list(qs), qs[1:3] == list(qs)[1:3], qs.max_k
    (True, True, 3)

    Read-only, as a tuple: no ``append``, no ``+``.
    """

    __slots__ = ("configs", "per")

    def __init__(self, configs: int, per: int):
        self.configs, self.per = configs, per

    def __len__(self) -> int:
        return 1 + self.configs * self.per

    def __getitem__(self, t):
        if isinstance(t, slice):
            return [self[u] for u in range(*t.indices(len(self)))]
        t = operator.index(t)
        t = t + len(self) if t < 0 else t
        if not 0 <= t < len(self):
            raise IndexError("plan query index out of range")
        if t == 0:
            return Query(0, 0)
        n, k = divmod(t - 1, self.per)
        return Query(n, k + 1)

    def __iter__(self):
        yield Query(0, 0)
        for n in range(self.configs):
            for k in range(1, self.per + 1):
                yield Query(n, k)

    def __eq__(self, other) -> bool:
        if isinstance(other, FamilyQueries):
            return (self.configs, self.per) == (other.configs, other.per)
        return isinstance(other, Sequence) and len(self) == len(other) and all(
            a == b for a, b in zip(self, other))

    __hash__ = None

    def __repr__(self) -> str:
        return f"FamilyQueries(configs={self.configs}, per={self.per})"

    @property
    def max_k(self) -> int:
        """The largest k asked."""
        return self.per if self.configs else 0


@dataclass
class Plan:
    """Configurations and the queries actually asked, in order (group of x_1 first)."""

    d: int
    H: int
    X: tuple           # columns x_1..x_d, each a tuple
    E: tuple           # columns e_1..e_d
    configs: list
    queries: list = field(default_factory=list)
    name: str = "paper"
    #: the plan for biases (docs: explanation/biases.md): X holds d + 1 affinely independent
    #: final tokens x_0..x_d, the across configurations are (2 x_i - x_0, e_j(i))
    bias: bool = False

    @property
    def count(self) -> int:
        return len(self.queries)

    @property
    def max_length(self) -> int:
        if isinstance(self.queries, FamilyQueries):
            return self.queries.max_k + 1
        return max((q.k + 1 for q in self.queries), default=0)

    def tokens(self, q: Query) -> list:
        return self.configs[q.config].tokens(q.k)

    def tokens_of(self, queries):
        """The tokens of ``queries`` in turn, as :meth:`tokens` gives them, but with each
        configuration's a = x + e computed once per run of its consecutive queries and not
        kept (:meth:`Config.summed`): asking a plan leaves no token cached on it.

        >>> plan = paper_plan([[1, 0], [0, 1]], [[1, 1], [0, 1]], 1)
        >>> asked = list(plan.tokens_of(plan.queries))
        >>> any("a" in c.__dict__ for c in plan.configs)
        False
        >>> asked == [plan.tokens(q) for q in plan.queries]
        True
        """
        if type(queries) is FamilyQueries and queries.configs <= len(self.configs):
            yield [self.configs[0].x]               # the plan's own: no Query object per query
            for c in self.configs[:queries.configs]:
                a, x = c.summed(), [c.x]
                yield from ([a] * k + x for k in range(1, queries.per + 1))
            return
        last, a = None, None
        for q in queries:
            c = self.configs[q.config]
            if q.config != last:
                last, a = q.config, c.summed()
            yield [a] * q.k + [c.x]

    def index(self, kind, i, j) -> int:
        return self._index[(kind, i, j)]

    def __post_init__(self):
        self._index = {(c.kind, c.i, c.j): n for n, c in enumerate(self.configs)}


def vector_sum(u, v):
    return tuple(a + b for a, b in zip(u, v))


def within_directions(E) -> tuple:
    """``(E[0], e_1 + e_2, ..., e_1 + e_d)``: the within configurations' directions, one tuple
    each, shared by every final token (at d = 384 a tuple per configuration held 2 GB)."""
    return (E[0],) + tuple(vector_sum(E[0], e) for e in E[1:])


def final_token_configs(i: int, x, E, within=None) -> list:
    """The basis and within configurations of final token ``x`` (index i) in the plans for
    biases: ``(x, e_j)`` for every j, then ``(x, e_1 + e_j)`` for j >= 2.  ``within``: the
    plan's :func:`within_directions` (E), to share one tuple per direction over every final
    token (drawn anew per call, the plan for biases at d = 384 held 385 copies, about 4 GB).

    >>> E = ((1, 0), (0, 1))
    >>> w = within_directions(E)
    >>> all(c.e is w[c.j] for c in final_token_configs(0, (3, 4), E, w) if c.kind == "within")
    True
    """
    d = len(E)
    within = within_directions(E) if within is None else within
    return ([Config("basis", i, j, x, E[j]) for j in range(d)]
            + [Config("within", i, j, x, within[j]) for j in range(1, d)])


def across_direction(i: int, d: int) -> int:
    """0-based direction index j(i) of the across configuration of group i >= 1."""
    return (i - 1) % d


def paper_count(d: int, H: int) -> int:
    """4 H d^2 - 2H + 1 (the paper's count)."""
    return 4 * H * d * d - 2 * H + 1


def paper_plan(X, E, H: int) -> Plan:
    """The paper's plan (docs: explanation/algorithm.md#how-it-works) for columns X, E (given as lists of column vectors)."""
    X = tuple(tuple(x) for x in X)
    E = tuple(tuple(e) for e in E)
    d = len(X)
    if H < 1:
        raise ValueError("the head bound H must be at least 1")
    group1, rest = [], []
    within = within_directions(E)
    for i in range(d):
        target = group1 if i == 0 else rest
        for j in range(d):
            target.append(Config("basis", i, j, X[i], E[j]))
        for j in range(1, d):
            target.append(Config("within", i, j, X[i], within[j]))
    for i in range(1, d):
        j = across_direction(i, d)
        rest.append(Config("across", i, j, vector_sum(X[0], X[i]), E[j]))
    configs = group1 + rest
    queries = FamilyQueries(len(configs), 2 * H)
    return Plan(d, H, X, E, configs, queries)


def bias_count(d: int, H: int) -> int:
    """1 + 2H (2d^2 + 2d - 1) = 4 H d^2 + 4 H d - 2H + 1: the count of the plan for biases
    (docs: explanation/biases.md).

    >>> bias_count(2, 1), bias_count(3, 2)
    (23, 93)
    """
    return 4 * H * d * d + 4 * H * d - 2 * H + 1


def bias_plan(X, E, H: int) -> Plan:
    """The plan for biases (docs: explanation/biases.md): X the d + 1 final tokens
    x_0..x_d (affinely independent), E the d directions (invertible).

    * ``basis``  (x_i, e_j)              i = 0..d, j = 1..d        -- (d + 1) d
    * ``within`` (x_i, e_1 + e_j)        i = 0..d, j = 2..d        -- (d + 1)(d - 1)
    * ``across`` (2 x_i - x_0, e_j(i))   i = 1..d                  -- d

    2d^2 + 2d - 1 configurations, sampled at k = 1..2H, and the one shared query
    (x_0): :func:`bias_count` queries, the longest of 2H + 1 tokens.

    >>> p = bias_plan([[0, 0], [1, 0], [0, 1]], [[1, 0], [0, 1]], H=1)
    >>> len(p.configs), p.count == bias_count(2, 1), p.max_length, p.configs[-1].x
    (11, True, 3, (0, 2))
    """
    X = tuple(tuple(x) for x in X)
    E = tuple(tuple(e) for e in E)
    d = len(E)
    if len(X) != d + 1:
        raise ValueError(f"the plan for biases needs d + 1 = {d + 1} final tokens, got {len(X)}")
    if H < 1:
        raise ValueError("the head bound H must be at least 1")
    group0, rest = [], []
    within = within_directions(E)          # one tuple per direction, shared
    for i in range(d + 1):
        (group0 if i == 0 else rest).extend(final_token_configs(i, X[i], E, within))
    for i in range(1, d + 1):
        j = across_direction(i, d)
        y = tuple(2 * a - b for a, b in zip(X[i], X[0]))
        rest.append(Config("across", i, j, y, E[j]))
    configs = group0 + rest
    queries = FamilyQueries(len(configs), 2 * H)
    return Plan(d, H, X, E, configs, queries, bias=True)


def draw_affine(d: int, rng: random.Random, R: int) -> tuple:
    """d + 1 random integer points in [-R, R]^d, affinely independent
    (``[[x_0 .. x_d], [1 .. 1]]`` invertible)."""
    for _ in range(1000):
        pts = tuple(tuple(rng.randint(-R, R) for _ in range(d)) for _ in range(d + 1))
        if is_invertible([[QQ(p[r]) for p in pts] for r in range(d)] + [[QQ(1)] * (d + 1)], QQ):
            return pts
    raise ValueError(f"could not draw {d + 1} affinely independent points from [-{R}, {R}]^{d}")


def draw_bias_plan(d: int, H: int, rng: random.Random, x_range: int, e_range: int | None = None) -> Plan:
    """Random affinely independent x_0..x_d (entries in [-x_range, x_range]) and invertible E,
    then :func:`bias_plan`."""
    X = draw_affine(d, rng, x_range)
    E = draw_matrix(d, rng, e_range if e_range is not None else x_range)
    return bias_plan(X, E, H)


def draw_matrix(d: int, rng: random.Random, R: int) -> tuple:
    """d random integer columns in [-R, R]^d forming an invertible matrix."""
    for _ in range(1000):
        cols = tuple(tuple(rng.randint(-R, R) for _ in range(d)) for _ in range(d))
        if is_invertible([[QQ(c[r]) for c in cols] for r in range(d)], QQ):
            return cols
    raise ValueError(f"could not draw an invertible {d}x{d} matrix from [-{R}, {R}]")


def draw_paper_plan(d: int, H: int, rng: random.Random, x_range: int, e_range: int | None = None) -> Plan:
    """Random X (entries in [-x_range, x_range]) and E, then :func:`paper_plan`."""
    X = draw_matrix(d, rng, x_range)
    E = draw_matrix(d, rng, e_range if e_range is not None else x_range)
    return paper_plan(X, E, H)


def head_bound(d, heads, max_heads) -> int:
    """Validate d and the head count H or bound H0; return the bound the plan uses.

    A plan beyond :mod:`exactlearn.limits` (its queries, tokens or memory) is refused here,
    in one line (a ValueError), before anything is drawn."""
    if heads is not None and max_heads is not None:
        raise ValueError("give heads= or max_heads=, not both")
    H = heads if heads is not None else max_heads
    if H is None:
        raise ValueError("give heads= (the number of heads) or max_heads= (a bound on it)")
    if isinstance(H, bool) or not isinstance(H, int) or H < 1:
        raise ValueError(f"the head count/bound must be a positive integer, got {H!r}")
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}")
    check_plan_size(d, H)        # the plan's cost, before anything is drawn (exactlearn.limits)
    return H
