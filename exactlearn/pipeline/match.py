"""Matching heads across configurations by products in the field (SPEC §3).

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
"""

from __future__ import annotations

from exactlearn.errors import MatchError, PoleCountMismatch
from exactlearn.fields.base import FieldError


class _Finder:
    """Find an element equal (in the field) to a target among a list."""

    def __init__(self, items, K):
        self.items = items
        self.K = K
        self.table = None
        if K.is_exact:
            try:
                table: dict = {}
                for idx, x in enumerate(items):
                    table.setdefault(x, []).append(idx)
                self.table = table
            except TypeError:  # unhashable elements: fall back to a scan
                self.table = None

    def find(self, target) -> list:
        if self.table is not None:
            return self.table.get(target, [])
        return [idx for idx, x in enumerate(self.items) if self.K.eq(x, target)]


def match(base, other, joint, mode: str, K) -> list:
    """Permutation ``perm`` with ``other[perm[h]]`` the same head as ``base[h]``.

    Every head of ``base`` needs exactly one partner r in ``other`` and one
    s in ``joint`` with rho_s == rho_h * rho_r and the c-relation of ``mode``;
    the pairing must be a bijection.  Otherwise :class:`MatchError`.
    """
    if not (len(base) == len(other) == len(joint)):
        raise PoleCountMismatch(f"pole counts differ between configurations "
                         f"({len(base)}, {len(other)}, {len(joint)})")
    finder = _Finder([rho for rho, _ in joint], K)
    perm = []
    used_r, used_s = set(), set()
    for h, (rho_h, c_h) in enumerate(base):
        cands = []
        for r, (rho_r, c_r) in enumerate(other):
            for s in finder.find(rho_h * rho_r):
                c_s = joint[s][1]
                if mode == "add":
                    ok = K.eq(c_s, c_h + c_r)
                else:
                    ok = K.eq(c_r, c_h) and K.eq(c_s, c_h)
                if ok:
                    cands.append((r, s))
        if len(cands) != 1:
            what = "no" if not cands else "more than one"
            raise MatchError(f"head {h}: {what} consistent partner in the matching "
                             f"configuration (products of rho{' and sums' if mode == 'add' else ''} of c)")
        r, s = cands[0]
        if r in used_r or s in used_s:
            raise MatchError("the pairing of heads across configurations is not one-to-one")
        used_r.add(r)
        used_s.add(s)
        perm.append(r)
    return perm


def label_basis(plan, poles_of, K) -> dict:
    """Label the poles of every basis configuration (x_i, e_j) by head (SPEC §3).

    ``poles_of[n]`` is the list of (rho, c) of configuration ``plan.configs[n]``.
    Head h is the h-th pole of (x_1, e_1); the group of x_1 is labelled first.
    Group i >= 2 is tied to it through (x_1 + x_i, e_j(i)) (equal c), and
    (x_i, e_j) to (x_i, e_1) through (x_i, e_1 + e_j) (c adds).  Returns ``{(i, j): [(rho_h, c_h) for h]}``.
    Raises :class:`MatchError` on differing pole counts, a missing or
    ambiguous partner, or c-values that depend on the final token.
    """
    d = plan.d
    m = len(poles_of[plan.index("basis", 0, 0)])
    for n, c in enumerate(plan.configs):
        if n in poles_of and len(poles_of[n]) != m:
            raise PoleCountMismatch(f"pole counts differ between configurations ({m} at (x_1, e_1), "
                             f"{len(poles_of[n])} at {c.kind}{(c.i + 1, c.j + 1)})")
    from exactlearn.pipeline.plan import across_direction
    labelled: dict = {(0, 0): list(poles_of[plan.index("basis", 0, 0)])}

    def within(i, j, base_j, other_j):
        """Label (x_i, e_other_j) from labelled (x_i, e_base_j) through (x_i, e_1 + e_j)."""
        other = poles_of[plan.index("basis", i, other_j)]
        perm = match(labelled[(i, base_j)], other, poles_of[plan.index("within", i, j)], "add", K)
        labelled[(i, other_j)] = [other[r] for r in perm]

    for i in range(d):
        if i > 0:
            j0 = across_direction(i, d)
            other = poles_of[plan.index("basis", i, j0)]
            perm = match(labelled[(0, j0)], other, poles_of[plan.index("across", i, j0)], "equal", K)
            labelled[(i, j0)] = [other[r] for r in perm]
            if j0 != 0:
                within(i, j0, j0, 0)            # (x_i, e_1) from (x_i, e_j0)
        for j in range(1, d):
            if (i, j) not in labelled:
                within(i, j, 0, j)
    # c_h(x, e_j) = -v_h.e_j does not depend on x: a free consistency check
    for (i, j), lab in labelled.items():
        for h, (_, c) in enumerate(lab):
            if not K.eq(c, labelled[(0, j)][h][1]):
                raise MatchError(f"head {h}: its c-value at e_{j + 1} depends on the final token")
    return labelled
