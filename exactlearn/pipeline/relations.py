"""The relations that decide a matching, and one tie (:mod:`~exactlearn.pipeline.match`; docs:
explanation/algorithm.md#how-it-works): the :class:`Relation` interface, equality in an exact
field (:class:`Exact`), equality within first-order bounds (:class:`WithinBounds`, the real
field's), and the tie of two labelled configurations through a matching one (:func:`tie`,
:func:`match`).

>>> from exactlearn.fields import QQ
>>> find = Exact(QQ).products([(QQ(6), QQ(8)), (QQ(4), QQ(4))])   # the joint's rho-values
>>> find((QQ(2), QQ(1)), (QQ(3), QQ(7)))                  # rho 2 * 3: the joint's pole 0
[(0, True)]
"""

from __future__ import annotations

import flint
from gmpy2 import mpz

from exactlearn.errors import MatchError, PoleCountMismatch, Undecided


# -- relations -----------------------------------------------------------------------------
class Relation:
    """How two quantities of the matching compare: True (equal), False (unequal) or None
    (undecided).  A pole is a tuple whose first two entries are ``(rho, c)``."""

    #: appended to the message of a c-value that depends on the final token
    c_suffix = ""

    def products(self, joint):
        """``find(base_pole, other_pole)``: the ``(s, state)`` with ``joint[s]``'s rho not
        decided unequal to the product of the two rhos (``state`` True or None), s ascending."""
        raise NotImplementedError

    def partners(self, joint):
        """``pairs(base_pole, other)``: every ``(r, s, state)`` of ``find(base_pole, other[r])``,
        r then s ascending (:func:`tie` asks this once per base pole)."""
        find = self.products(joint)
        return lambda bp, other: [(r, s, state) for r, op in enumerate(other)
                                  for s, state in find(bp, op)]

    def c_tie(self, joint_pole, base_pole, other_pole, mode):
        """The c-relation of ``mode``: ``c_joint = c_base + c_other`` ("add") or
        ``c_other = c_base`` and ``c_joint = c_base`` ("equal")."""
        raise NotImplementedError

    def same_c(self, p, q):
        """``c_p = c_q``."""
        raise NotImplementedError

    def undecided(self, config) -> Exception:
        """The failure for a relation that is neither equal nor unequal."""
        raise NotImplementedError


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


class Exact(Relation):
    """Equality in the field ``K`` (``K.eq``); products are looked up in a hash table
    over an exact field."""

    def __init__(self, K):
        self.K = K

    def products(self, joint):
        finder = _Finder([p[0] for p in joint], self.K)
        return lambda bp, op: [(s, True) for s in finder.find(bp[0] * op[0])]

    def partners(self, joint):
        """Over F_p (python-flint ``fmpz_mod``) the products rho_h * rho_r are taken on the
        residues as integers (gmpy2 ``mpz``: about half the time of Python's ``int`` for a
        product modulo p; equal values hash alike) and looked up among the joint's residues:
        the same pairs as the products in the field (equal elements of F_p are equal
        residues in [0, p)), without a field element per product."""
        ring = getattr(self.K, "poly_ring", None)
        if not isinstance(ring, flint.fmpz_mod_poly_ctx):
            return super().partners(joint)
        p = mpz(int(ring.modulus()))
        table: dict = {}
        for s, jp in enumerate(joint):
            table.setdefault(int(jp[0]), []).append(s)
        get = table.get
        cache: dict = {}

        def pairs(bp, other):
            key = id(other)
            got = cache.get(key)
            if got is None:
                got = cache[key] = (other, [mpz(int(op[0])) for op in other])
            b = mpz(int(bp[0]))
            out = []
            for r, o in enumerate(got[1]):
                hit = get(b * o % p)
                if hit is not None:
                    out.extend((r, s, True) for s in hit)
            return out
        return pairs

    def c_tie(self, jp, bp, op, mode):
        eq = self.K.eq
        if mode == "add":
            return eq(jp[1], bp[1] + op[1])
        return eq(op[1], bp[1]) and eq(jp[1], bp[1])

    def same_c(self, p, q):
        return self.K.eq(p[1], q[1])

    def undecided(self, config) -> Exception:
        raise AssertionError("an exact relation is always decided")


class WithinBounds(Relation):
    """Equal within ``equal`` first-order error bounds, unequal beyond ``unequal`` of them,
    undecided in between.  Poles are ``(rho, c, B_rho, B_c)``; a difference is compared
    with the sum of the bounds it propagates from, e.g.
    ``|rho_s - rho_h rho_r| <= equal (B_s + rho_h B_r + rho_r B_h)``.  ``size`` turns a
    number into the (low-precision) type of the bounds.

    >>> rel = WithinBounds(10, 10 ** 5)
    >>> rel.decide(3e-9, 1e-9), rel.decide(1e-3, 1e-9), rel.decide(1e-6, 1e-9)
    (True, False, None)
    """

    c_suffix = " (beyond its error bound)"

    def __init__(self, equal, unequal, size=float):
        self.equal, self.unequal, self.size = equal, unequal, size

    def decide(self, x, bound):
        """True (equal), False (unequal) or None (undecided) for a difference x and its bound."""
        x = self.size(abs(x))
        if x <= self.equal * bound:
            return True
        if x > self.unequal * bound:
            return False
        return None

    def products(self, joint):
        size = self.size

        def find(bp, op):
            out = []
            for s, jp in enumerate(joint):
                state = self.decide(jp[0] - bp[0] * op[0],
                                    jp[2] + size(bp[0]) * op[2] + size(op[0]) * bp[2])
                if state is not False:
                    out.append((s, state))
            return out
        return find

    def c_tie(self, jp, bp, op, mode):
        if mode == "add":
            return self.decide(jp[1] - bp[1] - op[1], jp[3] + bp[3] + op[3])
        rels = (self.decide(op[1] - bp[1], op[3] + bp[3]), self.decide(jp[1] - bp[1], jp[3] + bp[3]))
        return False if False in rels else (None if None in rels else True)

    def same_c(self, p, q):
        return self.decide(p[1] - q[1], p[3] + q[3])

    def undecided(self, config) -> Exception:
        where = (f"{config.kind}{(config.i + 1, config.j + 1)}" if config is not None
                 else "the matching configuration")
        return Undecided(f"matching undecided: a relation between the poles of {where} and its "
                         f"basis configurations is neither within {self.equal} nor beyond "
                         f"{self.unequal} error bounds")


def as_relation(K) -> Relation:
    return K if isinstance(K, Relation) else Exact(K)


# -- one tie -------------------------------------------------------------------------------
def tie(base, other, joint, mode: str, relation, config=None) -> tuple:
    """``(perm, perm_joint)``: ``other[perm[h]]`` and ``joint[perm_joint[h]]`` are the same
    head as ``base[h]``.

    Every head of ``base`` needs exactly one partner r in ``other`` and one s in ``joint``
    with rho_s = rho_h * rho_r and the c-relation of ``mode``; the pairing must be a
    bijection.  Otherwise :class:`MatchError` (an undecided relation: the relation's
    failure, naming the joint ``config``)."""
    if not (len(base) == len(other) == len(joint)):
        raise PoleCountMismatch(f"pole counts differ between configurations "
                                f"({len(base)}, {len(other)}, {len(joint)})")
    pairs = relation.partners(joint)
    perm, perm_joint = [], []
    used_r, used_s = set(), set()
    for h, bp in enumerate(base):
        cands = []
        for r, s, state in pairs(bp, other):
            op = other[r]
            c_state = relation.c_tie(joint[s], bp, op, mode)
            if c_state is False:
                continue
            if state is None or c_state is None:
                raise relation.undecided(config)
            cands.append((r, s))
        if len(cands) != 1:
            what = "no" if not cands else "more than one"
            sums = " and sums" if mode == "add" else ""
            raise MatchError(f"head {h + 1}: {what} consistent partner in the matching "
                             f"configuration (products of rho{sums} of c)")
        r, s = cands[0]
        if r in used_r or s in used_s:
            raise MatchError("the pairing of heads across configurations is not one-to-one")
        used_r.add(r)
        used_s.add(s)
        perm.append(r)
        perm_joint.append(s)
    return perm, perm_joint


def match(base, other, joint, mode: str, K) -> list:
    """Permutation ``perm`` with ``other[perm[h]]`` the same head as ``base[h]`` (:func:`tie`),
    with equality in the field ``K`` (or a :class:`Relation`)."""
    return tie(base, other, joint, mode, as_relation(K))[0]
