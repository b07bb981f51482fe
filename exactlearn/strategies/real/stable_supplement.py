"""The stable plan's supplementary and targeted families
(:mod:`~exactlearn.strategies.real.stable`, step 4; docs/explanation/real-field.md): families
for the entries the labelled ones leave undetermined (:func:`supplement`), the
c-values of directions whose every basis family failed (:func:`_blind_directions`, "Coarse
boxes").  The families the polish asks for are in
:mod:`~exactlearn.strategies.real.stable_ask_more`.
"""
from __future__ import annotations

from gmpy2 import mpq

from exactlearn.errors import LearningFailure
from exactlearn.pipeline.plan import Config
from exactlearn.strategies.real.labels import (directions, known_part, label_by_c,
                                               label_by_c_pair, references)
from exactlearn.strategies.real.ratio import family_tokens
from exactlearn.strategies.real.stable_families import RESCUE, family_poles, resolve_family
from exactlearn.strategies.real.stable_plan import SUPPLEMENT_PER_ENTRY, SUPPLEMENT_ROUNDS
from exactlearn.strategies.real.stable_solve import rows_bias, undetermined


def supplement(splan, configs, rows, fits, ids, index, poles_of, K, asker, noise, nodes, m, H,
               relation, frame=None, scales=None, equal_only=False, paper=False):
    """Supplementary families for the entries of M (and c) that the labelled families leave
    undetermined -- ``(x_i, e_j - e_k)`` for the k whose basis family at x_i is labelled; for
    a coarse box (``equal_only``) then the other k, ``(x_i, e_j + e_k)`` and ``(x_i + x_k, e_j)``
    (:func:`_extra`), at most SUPPLEMENT_PER_ENTRY an entry a round.  Each is labelled by
    its predicted c-values; for a coarse box one of a direction that no labelled family
    references yet is kept, and labelled once a pair gives that direction its c-values
    (:func:`_blind_directions`);
    up to SUPPLEMENT_ROUNDS rounds, new ones each round, until every entry is determined
    (entries determined only poorly: the polish asks for them,
    :mod:`~exactlearn.strategies.real.stable_ask_more`); a new family that fails
    is re-asked at the scales
    :data:`~exactlearn.strategies.real.stable_families.RESCUE`; ``paper``: the paper plan's
    nodes, as :func:`~exactlearn.strategies.real.stable_families.fit_all`'s).  Returns
    how many were asked.  With biases (``frame``,
    :func:`~exactlearn.strategies.real.stable_solve.bias_frame`) the unknowns are ``M~`` (d x (d +
    1)), each new family's rows come from its tokens as asked
    and ``scales`` records its scale."""
    d = splan.d
    dc = d + 1 if frame is not None else d
    asked = 0
    tried: set = set()
    pending: list = []                  # fitted, not labelled (_blind_directions may label them)
    synth: dict = {}                    # c-values of directions without a labelled basis family

    def add(c, k, f_used, fit, q, pl, lab):
        n = len(configs)
        configs.append(c)
        if frame is None:               # k: _extra's
            rows.append(_extra_rows(c, k))
        else:
            scales[n] = f_used
            rows.append(rows_bias(frame, tuple(f_used * a for a in c.x),
                                  tuple(f_used * b for b in c.e), f_used, K))
        fits[n], ids[n], poles_of[n], index[n] = fit, q, pl, lab

    for _ in range(SUPPLEMENT_ROUNDS):
        used = sorted(index)
        missW = undetermined([[(j * dc + i, co) for (j, i), co in rows[n][0]] for n in used],
                             d * dc)
        missv = undetermined([rows[n][1] for n in used], d)
        if not missW and not missv:
            break
        refs = {**synth, **references(configs, index, poles_of)}
        want = [divmod(u, dc) for u in missW] + [(j, 0) for j in missv]
        new = _new_families(splan, want, refs, index, tried, SUPPLEMENT_PER_ENTRY, equal_only)
        if not new:
            break
        asker.ask([q for c, _ in new for q in
                   (family_tokens(c.x, c.a, kk, mm) for kk, mm in nodes)])
        asked += len(new)
        _fit_and_label(new, K, asker, noise, nodes, m, H, (RESCUE, frame is not None, paper),
                       (refs, relation, equal_only), pending, add)
        if equal_only:
            _blind_directions(splan, configs, index, poles_of, pending, synth, relation,
                              equal_only, add)
    return asked


def _fit_and_label(new, K, asker, noise, nodes, m, H, how, labelling, pending, add):
    """Each new family of :func:`supplement` (``(config, o)``) fitted
    (:func:`~exactlearn.strategies.real.stable_families.resolve_family`: at 1 and then the
    rescue scales of ``how = (rescue, bias, paper)``, as for the plan's families) and
    labelled by its predicted c-values (``labelling = (refs, relation, equal_only)``): ``add``
    takes a labelled one, ``pending`` one no reference labels yet; one that fails is passed
    over."""
    (rescue, bias, paper), (refs, relation, equal_only) = how, labelling
    for c, k in new:
        try:
            fit, q, f_used = resolve_family(c, K, asker, noise, nodes, m, H,
                                            scales=(mpq(1),) + rescue, bias=bias, paper=paper)
        except LearningFailure:
            continue
        pl = family_poles(K, fit, m)
        dirs = [(c.j, 1)] + ([] if k[0] == "x" else [k[1:]])
        lab = label_by_c(pl, dirs, refs, relation, equal_only)
        if lab is None:                 # kept: a direction without a reference may label it
            pending.append((c, k, f_used, fit, q, pl, dirs))
            continue
        add(c, k, f_used, fit, q, pl, lab)


def _new_families(splan, want, refs, index, tried, per_entry, equal_only) -> list:
    """The families of one round for the entries ``want`` (``(j, i)`` of M), as ``(config,
    o)``, none of them in ``tried`` (which gets them): up to ``per_entry`` of ``(x_i, e_j -
    e_k)``, the k whose basis family at x_i is labelled first, and for a coarse box
    (``equal_only``) the other k, ``(x_i, e_j + e_k)`` and ``(x_i + x_k, e_j)``
    (:func:`_extra`)."""
    new = []
    for j, i in want:
        ks = sorted(sorted(k for k in refs if k != j),
                    key=lambda k: splan.index("basis", i, k) not in index)
        if not equal_only:              # a box at float64 rounding: labelled k only
            ks = [k for k in ks if splan.index("basis", i, k) in index]
        opts = [("e", k, s) for s in ((-1, 1) if equal_only else (-1,)) for k in ks]
        if j in refs and equal_only:    # then (x_i + x_k, e_j): another final token
            opts += [("x", k, 1) for k in range(len(splan.X)) if k != i]
        opts = [o for o in opts if (i, j) + o not in tried]
        for o in opts[:per_entry]:
            tried.add((i, j) + o)
            new.append((_extra(splan, i, j, o), o))
    return new


def _extra(splan, i, j, o):
    """The supplementary configuration ``o`` for the entry ``(j, i)``: ``("e", k, s)`` is
    ``(x_i, e_j + s e_k)``, ``("x", k, 1)`` is ``(x_i + x_k, e_j)`` (tokens on the plan's grid)."""
    kind, k, sg = o
    if kind == "e":
        e = tuple(p + sg * q for p, q in zip(splan.E[j], splan.E[k]))
        return Config("extra", i, j, splan.X[i], e)
    return Config("extra", i, j, tuple(p + q for p, q in zip(splan.X[i], splan.X[k])), splan.E[j])


def _extra_rows(c, o):
    """The rows (:func:`~exactlearn.strategies.real.stable_solve.rows_of`) of a bias-free
    supplementary configuration ``c`` made by :func:`_extra` with ``o``."""
    kind, k, sg = o
    if kind == "e":
        return [((c.j, c.i), 1), ((k, c.i), sg)], [(c.j, 1), (k, sg)]
    return [((c.j, c.i), 1), ((c.j, k), 1)], [(c.j, 1)]


def _blind_directions(splan, configs, index, poles_of, pending, synth, relation, equal_only,
                      add):
    """Directions ``e_j`` that no labelled basis family references (every ``(x_i, e_j)`` failed:
    two heads' exponents crowd in each, as four float32 heads often do) get their c-values from
    a pair of unlabelled families of ``e_j`` plus different labelled directions -- a within
    family ``(x_i, e_1 + e_j)`` of the plan and a supplementary ``(x_k, e_j - e_1)``, say
    (:func:`~exactlearn.strategies.real.labels.label_by_c_pair`); those, stored in ``synth``,
    then label the other families of ``e_j`` by their predicted c-values.  ``pending``: the
    supplementary families fitted but not labelled (``add`` labels one); the plan's unlabelled
    families are those of ``poles_of`` outside ``index``; ``configs`` every family labelled."""
    n_plan = len(splan.configs)
    while True:
        refs = {**synth, **references(configs, index, poles_of)}
        for p, e in enumerate(pending):  # references found since it was fitted
            lab = None if e is None else label_by_c(e[5], e[6], refs, relation, equal_only)
            if lab is not None:
                _label_candidate(("pending", p), lab, index, pending, add)
        cands = [(n, poles_of[n], directions(splan.configs[n])) for n in sorted(poles_of)
                 if n < n_plan and n not in index]
        cands += [(("pending", p), e[5], e[6]) for p, e in enumerate(pending) if e is not None]
        by_dir: dict = {}
        for key, pl, dirs in cands:
            blind = [(j, co) for j, co in dirs if j not in refs]
            if len(blind) == 1 and blind[0][1] == 1:
                known = known_part(dirs, blind[0][0], refs)
                if known is not None:
                    by_dir.setdefault(blind[0][0], []).append((key, pl, known))
        found = None
        for j, fams in sorted(by_dir.items()):
            for a in range(len(fams)):
                for b in range(a + 1, len(fams)):
                    got = label_by_c_pair(fams[a][1], fams[a][2], fams[b][1], fams[b][2],
                                          relation, equal_only)
                    if got is not None:
                        found = (j, fams[a][0], fams[b][0], got)
                        break
                if found:
                    break
            if found:
                break
        if found is None:
            return
        j, ka, kb, (pa, pb, own) = found
        synth[j] = own
        refs[j] = own
        for key, perm in ((ka, pa), (kb, pb)):
            _label_candidate(key, perm, index, pending, add)
        for key, pl, dirs in cands:     # the rest of e_j's families by their c-values
            if key in (ka, kb):
                continue
            lab = label_by_c(pl, dirs, refs, relation, equal_only)
            if lab is not None:
                _label_candidate(key, lab, index, pending, add)


def _label_candidate(key, perm, index, pending, add):
    """Labels a plan family (its index) or a pending supplementary one (``("pending", p)``)."""
    if isinstance(key, tuple):
        c, k, f_used, fit, q, pl, _ = pending[key[1]]
        pending[key[1]] = None
        add(c, k, f_used, fit, q, pl, perm)
    else:
        index[key] = perm
