"""Labelling the configurations by head when some families are missing
(docs: explanation/real-field.md#the-stable-plan-for-float-black-boxes, step 3 and coarse boxes;
docs: explanation/biases.md#over-the-real-field).

Unlike the paper's traversal (:func:`exactlearn.pipeline.match.label_heads`), which needs every
family, this one uses the plan's redundancy: **ties** in either direction (``within(i, j)``:
rho multiply, c add; ``across(i)``: rho multiply, c equal; :func:`~exactlearn.pipeline.match.tie`);
**c-values** (``c_h(x, e) = -v_h.e`` is free of x and adds over e: :func:`label_by_c`);
**c-sums** where those label nothing more (:func:`label_by_c_sum`, :func:`label_by_c_pair`);
and **joint families** whose two sides are labelled.  Every decision is a
:class:`~exactlearn.pipeline.match.WithinBounds` relation, and an undecided one never labels
(except a coarse box's ``equal_only`` c-values: :func:`by_equal_c`); labels found by different
routes must agree, else :class:`~exactlearn.errors.MatchError`.  With biases ``across(i)`` is
the midpoint ``((x_0 + x_i)/2, e_j(i))`` (``square_joint``), and a tie holds only between
families asked at the same scale (``scales``).
"""

from __future__ import annotations

from exactlearn.errors import MatchError, Undecided
from exactlearn.pipeline.match import by_c, tie


def _spread(poles):
    return max(p[3] for p in poles)


def directions(c) -> list:
    """``[(j, coefficient)]``: the configuration's e as a combination of the e_j."""
    return [(0, 1), (c.j, 1)] if c.kind == "within" else [(c.j, 1)]


def label_by_c(poles, dirs, refs, relation, equal_only=False):
    """Pole indices of ``poles`` (a family whose e is ``sum coef e_j`` over ``dirs``) by the
    predicted c-values ``sum coef c_h(e_j)`` of the labelled references ``refs[j]``; None
    when a reference is missing or a decision is undecided or not a bijection.  With
    ``equal_only`` (a coarse box, module doc) an undecided comparison does not stop it: each
    head needs exactly one pole decided equal, and those a bijection."""
    if not all(j in refs for j, _ in dirs):
        return None
    m = len(refs[dirs[0][0]])
    pred = [(None, sum(co * refs[j][h][1] for j, co in dirs), None,
             sum(abs(co) * refs[j][h][3] for j, co in dirs)) for h in range(m)]
    if equal_only:
        return by_equal_c(poles, pred, relation)
    out, problem = by_c(poles, pred, relation)
    return out if problem is None and len(set(out)) == len(out) else None


def by_equal_c(poles, ref, relation):
    """For each head of ``ref`` the one pole of ``poles`` whose c-value is decided equal to
    its own (``relation.same_c`` True; undecided ones are passed over), the pairing a
    bijection; None otherwise.

    >>> from exactlearn.pipeline.match import WithinBounds
    >>> rel = WithinBounds(10, 100)
    >>> ref = [(None, -0.89231, None, 1e-4), (None, -0.54089, None, 6e-5)]
    >>> poles = [(None, -0.54089, None, 5.7e-3), (None, -0.89247, None, 4.1e-3)]
    >>> by_equal_c(poles, ref, rel)            # -0.89231 vs -0.54089: 60 bounds, undecided
    [1, 0]
    >>> by_equal_c(poles[:1] * 2, ref, rel) is None
    True
    """
    if len(poles) != len(ref):
        return None
    out = []
    for rp in ref:
        hits = [r for r, p in enumerate(poles) if relation.same_c(p, rp) is True]
        if len(hits) != 1:
            return None
        out.append(hits[0])
    return out if len(set(out)) == len(out) else None


def label_by_c_sum(joint, other, ref, relation, equal_only=False):
    """``(perm_joint, perm_other)`` from c-values alone: ``joint`` is a family whose e is
    ``e_k + e_u``, ``ref`` the labelled poles of direction ``e_k`` and ``other`` an unlabelled
    family of direction ``e_u`` (any final token, any scale: c is free of both).  Each head h
    needs exactly one pair ``(s, r)`` with ``c_joint[s] = c_ref[h] + c_other[r]`` (the
    relation's ``"add"`` tie on c), the pairing a bijection; None when a decision is undecided
    (with ``equal_only``, a coarse box: passed over) or a head has no partner or several.

    >>> from exactlearn.pipeline.match import WithinBounds
    >>> rel = WithinBounds(10, 100)
    >>> ref = [(None, 1.0, None, 1e-3), (None, 2.0, None, 1e-3)]
    >>> other = [(None, -5.0, None, 1e-3), (None, 3.0, None, 1e-3)]
    >>> joint = [(None, -3.0, None, 1e-3), (None, 4.0, None, 1e-3)]
    >>> label_by_c_sum(joint, other, ref, rel)
    ([1, 0], [1, 0])
    >>> label_by_c_sum(joint, other, [(None, 1.0, None, 1.0), (None, 2.0, None, 1.0)], rel)
    """
    if not (len(joint) == len(other) == len(ref)):
        return None
    perm_joint, perm_other = [], []
    for rp in ref:
        hits = []
        for s, jp in enumerate(joint):
            for r, op in enumerate(other):
                state = relation.c_tie(jp, rp, op, "add")
                if state is None and not equal_only:
                    return None
                if state:
                    hits.append((s, r))
        if len(hits) != 1:
            return None
        perm_joint.append(hits[0][0])
        perm_other.append(hits[0][1])
    if len(set(perm_joint)) != len(ref) or len(set(perm_other)) != len(ref):
        return None
    return perm_joint, perm_other


def known_part(dirs, blind, refs):
    """Per head ``(None, sum coef c_h(e_k), None, its bound)`` over the directions of ``dirs``
    other than ``blind`` (all labelled in ``refs``); None when one of them is not."""
    others = [(k, co) for k, co in dirs if k != blind]
    if not refs or not all(k in refs for k, _ in others):
        return None
    m = len(next(iter(refs.values())))
    return [(None, sum(co * refs[k][h][1] for k, co in others), None,
             sum(abs(co) * refs[k][h][3] for k, co in others)) for h in range(m)]


def label_by_c_pair(fam_a, known_a, fam_b, known_b, relation, equal_only=False):
    """Two families of one direction ``e_j`` that no labelled family has: ``fam_a`` of
    ``e_j + a``, ``fam_b`` of ``e_j + b`` with ``a`` and ``b`` combinations of labelled
    directions whose predicted c-values are ``known_a``, ``known_b`` (:func:`known_part`).
    Since ``c_h(e_j + a) = c_h(e_j + b) + c_h(a) - c_h(b)``, they label each other by c alone
    (:func:`label_by_c_sum`, the reference ``known_a - known_b``), and their c-values less the
    known parts give ``e_j``'s own reference (the mean of the two, with the mean of their
    bounds).  Returns ``(perm_a, perm_b, reference of e_j)`` or None (undecided, a head
    without exactly one partner, or ``a = b``: every pole would pair).

    >>> from exactlearn.pipeline.match import WithinBounds
    >>> rel = WithinBounds(10, 100)
    >>> k1 = [(None, 1.0, None, 1e-3), (None, 2.0, None, 1e-3)]          # c_h(e_1)
    >>> zero = [(None, 0.0, None, 0.0)] * 2
    >>> plus = [(None, 5.0, None, 1e-3), (None, -2.0, None, 1e-3)]       # e_j + e_1: 4 + 1, -4 + 2
    >>> minus = [(None, -6.0, None, 1e-3), (None, 3.0, None, 1e-3)]      # e_j - e_1: -4 - 2, 4 - 1
    >>> neg = [(None, -a, None, b) for _, a, _, b in k1]
    >>> pa, pb, ref = label_by_c_pair(plus, k1, minus, neg, rel)
    >>> pa, pb, [round(r[1], 9) for r in ref]
    ([0, 1], [1, 0], [4.0, -4.0])
    >>> label_by_c_pair(plus, k1, plus, k1, rel) is None
    True
    """
    if all(relation.same_c(p, q) is True for p, q in zip(known_a, known_b)):
        return None
    ref = [(None, ka[1] - kb[1], None, ka[3] + kb[3]) for ka, kb in zip(known_a, known_b)]
    got = label_by_c_sum(fam_a, fam_b, ref, relation, equal_only)
    if got is None:
        return None
    pa, pb = got
    own = [(None, (fam_a[pa[h]][1] - ka[1] + fam_b[pb[h]][1] - kb[1]) / 2, None,
            (fam_a[pa[h]][3] + ka[3] + fam_b[pb[h]][3] + kb[3]) / 2)
           for h, (ka, kb) in enumerate(zip(known_a, known_b))]
    return pa, pb, own


def references(configs, index, poles_of) -> dict:
    """Per direction j: the labelled poles of the basis family ``(x_i, e_j)`` with the most
    precise c-values (``configs``: the plan's configurations and those asked since)."""
    refs: dict = {}
    for n in sorted(index):
        c = configs[n]
        if c.kind == "basis":
            lab = [poles_of[n][p] for p in index[n]]
            if c.j not in refs or _spread(lab) < _spread(refs[c.j]):
                refs[c.j] = lab
    return refs


def _squared(poles):
    """Poles ``(rho^2, c, 2 rho B_rho, B_c)``: the across family of the plan for biases."""
    return [(p[0] * p[0], p[1], 2 * float(p[0]) * p[2], p[3]) for p in poles]


def label_families(plan, poles_of: dict, relation, root, dirs=None, square_joint=False,
                   scales=None, equal_only=False) -> dict:
    """``{configuration index: [pole index of head h]}`` for every family that can be
    labelled (module doc); ``equal_only`` for a coarse box (:func:`label_by_c`);
    ``poles_of`` has the present families, ``root`` the basis
    family whose poles define the head numbering; ``square_joint`` and ``scales`` (the scale
    each family was asked at, 1 when absent) for the plan for biases (module doc)."""
    cfg = plan.configs
    dirs = dirs or (lambda n: directions(cfg[n]))
    index: dict = {root: list(range(len(poles_of[root])))}
    squared = {}

    def joint_poles(n):
        if square_joint and cfg[n].kind == "across":
            if n not in squared:
                squared[n] = _squared(poles_of[n])
            return squared[n]
        return poles_of[n]

    def lab(n):
        return [poles_of[n][p] for p in index[n]]

    ties = _ties(plan, scales)
    present = set(poles_of)
    changed = True
    while changed:
        changed = False
        for a, b, joint, mode in ties:
            if joint not in present or joint in index:
                continue
            for base, other in ((a, b), (b, a)):
                if base in index and other in present and other not in index:
                    try:
                        perm, pj = tie(lab(base), poles_of[other], joint_poles(joint), mode,
                                       relation)
                    except (MatchError, Undecided):
                        continue
                    index[other], index[joint] = perm, pj
                    changed = True
                    break
        # c-values: c_h(x, e) = -v_h.e is additive in e and free of x, so any family whose
        # directions have a labelled basis family is labelled by the predicted c-values
        refs = references(cfg, index, poles_of)
        for n in sorted(present - set(index)):
            got = label_by_c(poles_of[n], dirs(n), refs, relation, equal_only)
            if got is not None:
                index[n] = got
                changed = True
        if changed:
            continue
        changed = _by_c_sums(cfg, poles_of, index, present, refs, dirs, relation, equal_only)
    # joints whose sides are labelled: the identity pairing must hold
    for a, b, joint, mode in ties:
        if joint in present and joint not in index and a in index and b in index:
            try:
                perm, pj = tie(lab(a), lab(b), joint_poles(joint), mode, relation)
            except (MatchError, Undecided):
                continue
            if perm == list(range(len(perm))):
                index[joint] = pj
    _check_c_values(cfg, index, lab, relation)
    return index


def _ties(plan, scales) -> list:
    """The joints ``(base a, base b, joint, mode)`` of the plan's within (``"add"``) and
    across (``"equal"``) families; with ``scales``, those whose three families share one."""
    ties = []
    for n, c in enumerate(plan.configs):
        if c.kind == "within":
            ties.append((plan.index("basis", c.i, 0), plan.index("basis", c.i, c.j), n, "add"))
        elif c.kind == "across":
            ties.append((plan.index("basis", 0, c.j), plan.index("basis", c.i, c.j), n, "equal"))
    if scales is not None:             # a tie holds at one common scale only (module doc)
        ties = [t for t in ties if len({scales.get(n, 1) for n in t[:3]}) == 1]
    return ties


def _by_c_sums(cfg, poles_of, index, present, refs, dirs, relation, equal_only) -> bool:
    """c-sums: a family of e_k + e_u with e_k labelled labels, with a family of e_u at any
    final token and scale, both by c alone (c_h(e_k + e_u) = c_h(e_k) + c_h(e_u)); the first
    such pair found is labelled in ``index``.  Returns whether one was."""
    for n in sorted(present - set(index)):
        ds = dirs(n)
        if len(ds) != 2 or any(co != 1 for _, co in ds) or ds[0][0] == ds[1][0]:
            continue
        unknown = [j for j, _ in ds if j not in refs]
        if len(unknown) != 1:
            continue
        k = next(j for j, _ in ds if j in refs)
        for b in sorted(present - set(index)):
            if cfg[b].kind != "basis" or cfg[b].j != unknown[0]:
                continue
            got = label_by_c_sum(poles_of[n], poles_of[b], refs[k], relation, equal_only)
            if got is not None:
                index[n], index[b] = got
                return True
    return False


def _check_c_values(cfg, index, lab, relation) -> None:
    """One direction's c-values agree across final tokens, head by head, or MatchError."""
    refs = {}
    for n in sorted(index):
        c = cfg[n]
        if c.kind != "basis":
            continue
        if c.j not in refs:
            refs[c.j] = lab(n)
            continue
        for h, (p, q) in enumerate(zip(lab(n), refs[c.j])):
            if relation.same_c(p, q) is not True:
                raise MatchError(f"head {h + 1}: its c-value at e_{c.j + 1} depends on the final "
                                 f"token (beyond its error bound)")
