"""Matching heads across configurations, and labelling every configuration by head
(the paper's plan, arXiv:2608.03294; docs: explanation/algorithm.md#how-it-works).

Poles come unlabelled.  A labelled configuration ``base`` (one (rho_h, c_h) per
head h) labels another configuration ``other`` through a *matching*
configuration ``joint`` whose rho-values are the products
``rho_base * rho_other``; its c-values either add (``mode="add"``: within a
final-token group, direction e_1 + e_j) or are equal (``mode="equal"``: across
groups, final token x_1 + x_i).  No logarithms are needed.

>>> from exactlearn.fields import QQ
>>> base  = [(QQ(2), QQ(1)), (QQ(8), QQ(5))]
>>> other = [(QQ(3), QQ(7)), (QQ("1/2"), QQ(-1))]
>>> joint = [(QQ(4), QQ(4)), (QQ(6), QQ(8))]               # 8*(1/2), 2*3 ; c adds
>>> match(base, other, joint, "add", QQ)
[0, 1]

The relations (:class:`~exactlearn.pipeline.relations.Exact`,
:class:`~exactlearn.pipeline.relations.WithinBounds`) and one tie
(:func:`~exactlearn.pipeline.relations.tie`) are in :mod:`~exactlearn.pipeline.relations`;
this module walks the plan.  Their public names stay importable from here.

One traversal, two kinds of relation
------------------------------------
:func:`label_heads` is the one walk over a plan's configurations: head h is the
h-th pole of (x_1, e_1); the group of x_1 is labelled first, through
(x_1, e_1 + e_j); group i >= 2 is tied to it through its across configuration
(x_1 + x_i, e_j(i)) (equal c), and (x_i, e_j) to (x_i, e_1) through
(x_i, e_1 + e_j) (c adds).  Every relation it needs -- a product of rho, a sum or
an equality of c -- is decided by a *relation* object:

* :class:`Exact` -- equality in the field (the exact fields decide it: True or
  False).  :func:`label_basis` (the paper's plan over an exact field) and the
  efficient plan use it.
* :class:`WithinBounds` -- equal within ``equal`` first-order error bounds,
  unequal beyond ``unequal`` of them, and *undecided* in between, which is a
  failure (:class:`~exactlearn.errors.Undecided`), never a guess.  The real field
  uses it (docs: explanation/real-field.md); its
  poles carry their bounds, ``(rho, c, bound of rho, bound of c)``.

The efficient plan (docs: explanation/efficient-plan.md) walks the same
way with ``by_c=True``: a configuration outside the group of x_1 whose heads'
c-values at e_j are decided pairwise distinct is labelled by them; only the others
are tied by products.

>>> from exactlearn.pipeline.plan import paper_plan
>>> plan = paper_plan([[1, 0], [0, 1]], [[1, 0], [0, 1]], H=2)
>>> heads = [([[1, 0], [0, 2]], (3, 5)), ([[3, 1], [2, 0]], (-1, 4))]       # (W_h, v_h)
>>> def poles(n):            # (rho_h, c_h) = (2^(e^T W_h x), -v_h.e), unlabelled (sorted)
...     c = plan.configs[n]
...     s = lambda W: sum(c.e[r] * W[r][q] * c.x[q] for r in range(2) for q in range(2))
...     return sorted((QQ(2) ** s(W), -QQ(sum(a * b for a, b in zip(v, c.e)))) for W, v in heads)
>>> [c for _, c in label_heads(plan, poles, Exact(QQ)).cells[(1, 1)]]   # -v_h.e_2, head by head
[mpq(-5,1), mpq(-4,1)]
"""

from __future__ import annotations

from exactlearn.errors import DegenerateDraw, MatchError, PoleCountMismatch
from exactlearn.pipeline.plan import across_direction
from exactlearn.pipeline.relations import as_relation, tie

# the names this module had before its split stay importable from here
from exactlearn.pipeline.relations import Exact, Relation, WithinBounds, match  # noqa: F401,E402


# -- the traversal -------------------------------------------------------------------------
def check_pole_counts(plan, poles_of) -> None:
    """Every configuration in ``poles_of`` has as many poles as (x_1, e_1)."""
    counts = PoleCounts(plan, len(poles_of[plan.index("basis", 0, 0)]))
    for n in range(len(plan.configs)):
        if n in poles_of:
            counts.check(n, poles_of[n])


class PoleCounts:
    """Checks a configuration's pole count against the ``m`` of (x_1, e_1)."""

    def __init__(self, plan, m):
        self.plan, self.m = plan, m

    def check(self, n, poles):
        if len(poles) != self.m:
            c = self.plan.configs[n]
            raise PoleCountMismatch(f"pole counts differ between configurations ({self.m} at "
                                    f"(x_1, e_1), {len(poles)} at {c.kind}{(c.i + 1, c.j + 1)})")
        return poles


class Labels:
    """What :func:`label_heads` found.

    ``index[n][h]``: the pole of head h in configuration n (every configuration it
    used); ``cells[(i, j)]``: the poles of basis configuration (x_i, e_j) head by head,
    in the order they were labelled; ``ties``: the ``(i, j, joint configuration)`` of
    every cell labelled by products."""

    def __init__(self):
        self.index: dict = {}
        self.cells: dict = {}
        self.ties: list = []


def _config(plan, kind, i, j):
    try:
        return plan.index(kind, i, j)
    except KeyError:
        return None


def label_heads(plan, poles, relation, cells=None, *, across=across_direction,
                by_c: bool = False) -> Labels:
    """Label the basis configurations ``cells`` (default: all (i, j)) of ``plan`` by head.

    ``poles(n)`` gives configuration n's poles (``(rho, c, ...)``, asked when first
    needed, in the order of the walk); ``relation`` decides every comparison (module
    doc); ``across(i, d)`` is the direction of group i's across configuration.  A tie
    for which the plan has no matching configuration (the efficient plan with H = 1)
    labels the single pole as is.

    c_h(x, e_j) = -v_h.e_j does not depend on x: with ``by_c`` (the efficient plan)
    a cell outside the group of x_1 is labelled by the heads' c-values at e_j when
    they are decided pairwise distinct, and a tied cell's c-values are checked at once
    against them (later cells are labelled by them); otherwise every cell's c-values
    are checked at the end.  Raises :class:`MatchError` (or ``relation``'s undecided
    failure)."""
    d = plan.d
    basis = lambda i, j: plan.index("basis", i, j)
    n00 = basis(0, 0)
    m = len(poles(n00))
    out = Labels()
    out.index[n00] = list(range(m))
    ref: dict = {}                    # by_c: j -> (the heads' poles at (x_1, e_j), distinct?)

    def labelled(n):
        pl = poles(n)
        return [pl[p] for p in out.index[n]]

    def done(i, j):
        out.cells[(i, j)] = labelled(basis(i, j))

    def label(i, j):
        n = basis(i, j)
        if n in out.index:
            return
        other = poles(n)
        if i > 0 and j in ref and ref[j][1]:
            out.index[n] = _by_c(other, ref[j][0], relation, plan.configs[n])
            return done(i, j)
        (bi, bj), nj, mode = _tie_of(plan, i, j, across(i, d))
        label(bi, bj)
        if nj is None:
            if m > 1:
                raise AssertionError(f"no matching configuration for (x_{i + 1}, e_{j + 1})")
            out.index[n] = list(range(m))
            return done(i, j)
        if mode == "equal" and getattr(plan, "bias", False):
            # biases (docs: explanation/biases.md): across (2 x_i - x_0, e_j) has rho(x_0) rho(2 x_i
            # - x_0) = rho(x_i)^2, equal c: tied to (x_0, e_j) through (x_i, e_j)'s rho squared
            sq = [(p[0] * p[0],) + tuple(p[1:]) for p in other]
            out.index[nj], out.index[n] = tie(labelled(basis(bi, bj)), poles(nj), sq, mode,
                                              relation, plan.configs[nj])
        else:
            out.index[n], out.index[nj] = tie(labelled(basis(bi, bj)), other, poles(nj), mode,
                                              relation, plan.configs[nj])
        out.ties.append((i, j, nj))
        done(i, j)
        if i > 0 and j in ref:
            c = out.cells[(i, j)]
            if any(relation.same_c(c[h], ref[j][0][h]) is not True for h in range(m)):
                raise MatchError(f"configuration (x_{i + 1}, e_{j + 1}): a head's c-value "
                                 f"depends on the final token")

    out.cells[(0, 0)] = labelled(n00)
    for j in range(1, d):
        label(0, j)
    if by_c:
        ref.update(_c_references(out, relation, d))
    rows = len(plan.X)                # d final tokens; d + 1 for the plan for biases
    for i, j in (cells if cells is not None else [(i, j) for i in range(rows) for j in range(d)]):
        label(i, j)
    if not by_c:                      # a free consistency check
        _check_c(out, relation)
    del label       # its cycle (label, its cell) held every pole until a collection (0.1 s)
    return out


def _tie_of(plan, i, j, j0):
    """The tie that labels the basis cell ``(i, j)`` (``j0``: group i's across direction):
    ``((i, j) of the labelled base cell, matching configuration, "add" or "equal")``."""
    if i == 0:
        return (0, 0), _config(plan, "within", 0, j), "add"
    if j == j0:
        return (0, j), _config(plan, "across", i, j), "equal"
    if j == 0:
        return (i, j0), _config(plan, "within", i, j0), "add"
    return (i, 0), _config(plan, "within", i, j), "add"


def _c_references(out, relation, d) -> dict:
    """``by_c``: per direction j, the heads' poles at (x_1, e_j) and whether their c-values are
    decided pairwise distinct."""
    ref = {}
    for j in range(d):
        cs = out.cells[(0, j)]
        m = len(cs)
        ref[j] = (cs, all(relation.same_c(cs[a], cs[b]) is False
                          for a in range(m) for b in range(a)))
    return ref


def _check_c(out, relation) -> None:
    """Each head's c-value at e_j is the same at every final token, or MatchError."""
    for (i, j), lab in out.cells.items():
        for h, p in enumerate(lab):
            if relation.same_c(p, out.cells[(0, j)][h]) is not True:
                raise MatchError(f"head {h + 1}: its c-value at e_{j + 1} depends on the final "
                                 f"token{relation.c_suffix}")


def by_c(poles, ref, relation):
    """``(labels, problem)``: for each head of ``ref`` (labelled poles) in turn, the index of
    the one pole of ``poles`` whose c-value is its own (``relation.same_c``).  ``problem`` is
    ``None``, ``"undecided"`` (a comparison undecided) or ``"not one"`` (no pole or several),
    for the first head that has one; ``labels`` then holds the heads before it.

    >>> from exactlearn.fields import QQ
    >>> by_c([(QQ(2), QQ(5)), (QQ(3), QQ(1))], [(QQ(7), QQ(1)), (QQ(9), QQ(5))], Exact(QQ))
    ([1, 0], None)
    >>> by_c([(QQ(2), QQ(5)), (QQ(3), QQ(5))], [(QQ(7), QQ(5))], Exact(QQ))
    ([], 'not one')
    """
    out = []
    for rp in ref:
        hits = []
        for r, p in enumerate(poles):
            state = relation.same_c(p, rp)
            if state is None:
                return out, "undecided"
            if state:
                hits.append(r)
        if len(hits) != 1:
            return out, "not one"
        out.append(hits[0])
    return out, None


def _by_c(other, ref, relation, config) -> list:
    """Pole indices of ``other`` (basis configuration ``config``) whose c-values are those
    of the heads (``ref``): :func:`by_c`, its problem raised."""
    out, problem = by_c(other, ref, relation)
    if problem == "undecided":
        raise relation.undecided(config)
    if problem is not None:
        i, j = config.i, config.j
        raise DegenerateDraw(
            f"configuration (x_{i + 1}, e_{j + 1}): the c-values are not those of the heads "
            f"at e_{j + 1} (c must not depend on the final token)")
    return out


def label_cells(plan, poles_of, K, cells) -> dict:
    """:func:`label_basis` for the basis cells ``cells`` only (the walk always labels the
    row of x_1 first): ``poles_of`` holds the group of x_1 and the groups of those cells
    (a cluster's chunk, :mod:`exactlearn.pipeline.distributed`).  Over every chunk the
    pole counts, ties and c-checks are those of :func:`label_basis`, and so are the cells.
    """
    counts = PoleCounts(plan, len(poles_of[plan.index("basis", 0, 0)]))
    for n in sorted(poles_of):
        counts.check(n, poles_of[n])
    return label_heads(plan, poles_of.__getitem__, as_relation(K), cells=cells).cells


def label_basis(plan, poles_of, K) -> dict:
    """Label the poles of every basis configuration (x_i, e_j) by head, with equality in
    the field K (:func:`label_heads`).

    ``poles_of[n]`` is the list of (rho, c) of configuration ``plan.configs[n]``.
    Returns ``{(i, j): [(rho_h, c_h) for h]}``.  Raises :class:`MatchError` on differing
    pole counts, a missing or ambiguous partner, or c-values that depend on the final
    token.
    """
    check_pole_counts(plan, poles_of)
    return label_heads(plan, poles_of.__getitem__, as_relation(K)).cells
