"""Claim ``canonical-form``: f depends only on the canonical form, and distinct
canonical forms give distinct functions (arXiv:2608.03294; docs: explanation/algorithm.md#the-model-and-its-sign-convention).

Two checks per random model (every kind of :mod:`proofs_check.models`):

1. *Only the canonical form matters.*  The model, its canonical form and the
   model with its heads permuted give exactly the same value on random queries
   (repeated tokens included).  Each is evaluated as written, every raw head
   included, at the model's scale D (the lcm of its raw W denominators); the
   model's value is also computed as the sum of its raw heads taken one at a
   time (:func:`sum_of_heads`), so no grouping enters the raw side.  The
   comparison runs in the symbolic field
   Q(T), T = e^(1/D): equality there is equality for the true exponential
   (T is transcendental), not only for one specialisation.  Further queries
   run in the rational field (base 2).  Any difference refutes the claim.
   The comparison must be between different things: every model of a merged
   or cancelling kind must differ from its canonical form (``non_canonical``),
   and the permutation must move the heads whenever two differ; otherwise the
   claim is inconclusive.
2. *Distinct canonical forms, distinct functions.*  The canonical form is
   perturbed (a W entry, a v entry, a head dropped, added or merged into
   another, two v swapped) into a model whose canonical form differs; a random
   query on which the two differ is searched for in the rational field.  A
   difference at T = 2 is a difference in Q(T) (specialisation T -> 2 is a
   ring map on these values), hence a witness for the true exponential.  A
   pair without a witness within the search budget leaves the claim
   inconclusive.
"""

from __future__ import annotations

import gmpy2
from gmpy2 import mpq

from exactlearn import Head, MultiHeadAttention, Rational, Symbolic, canonicalize
from exactlearn.model import structure

from ..claim import ClaimResult, claim, verdict
from ..models import expected_canonical_heads, kinds_for, random_model, random_query, random_W, trial_rng
from ._learning import level

ID = "canonical-form"
PERTURBATIONS = ("W entry", "v entry", "drop head", "add head", "merge heads", "swap v")


def perturb(rng, heads: tuple, d: int, how: str):
    """Heads whose canonical form differs from ``heads`` (a canonical form), or None
    when ``how`` does not apply (e.g. merging with fewer than two heads)."""
    heads = [Head(h.W, h.v) for h in heads]
    delta = mpq(rng.choice([-2, -1, 1, 2]), rng.choice([1, 2]))
    if how == "W entry" and heads:
        h, r, c = rng.randrange(len(heads)), rng.randrange(d), rng.randrange(d)
        W = [list(row) for row in heads[h].W]
        W[r][c] += delta
        heads[h] = Head(tuple(map(tuple, W)), heads[h].v)
    elif how == "v entry" and heads:
        h, r = rng.randrange(len(heads)), rng.randrange(d)
        v = list(heads[h].v)
        v[r] += delta
        heads[h] = Head(heads[h].W, tuple(v))
    elif how == "drop head" and heads:
        heads.pop(rng.randrange(len(heads)))
    elif how == "add head":
        W = tuple(tuple(mpq(x.numerator, x.denominator) for x in row) for row in random_W(rng, d, 2))
        heads.append(Head(W, tuple(mpq(rng.randint(-3, 3) or 1) for _ in range(d))))
    elif how == "merge heads" and len(heads) >= 2:
        g, h = rng.sample(range(len(heads)), 2)
        heads[h] = Head(heads[g].W, heads[h].v)
    elif how == "swap v" and len(heads) >= 2:
        g, h = rng.sample(range(len(heads)), 2)
        heads[g], heads[h] = Head(heads[g].W, heads[h].v), Head(heads[h].W, heads[g].v)
    else:
        return None
    return heads


def sum_of_heads(model: MultiHeadAttention, q, K):
    """f(X) as the sum over the raw heads, each evaluated as a one-head model: the
    raw side of the comparison, with no grouping of heads anywhere in its path."""
    total = K.zero
    for h in model.heads:
        total = total + MultiHeadAttention([h], d=model.d).evaluate(q, K)
    return total


def canonical_trial(args) -> dict:
    """``args = (seed, index, d, H, kind, n_symbolic, n_rational, search)``."""
    seed, index, d, H, kind, n_sym, n_rat, search = args
    rng = trial_rng(seed, ID, index)
    model = random_model(rng, d, H, kind)
    canon = model.canonical_heads()
    cmodel = MultiHeadAttention(list(canon), d=d)
    perm = list(model.heads)
    rng.shuffle(perm)
    if tuple(perm) == model.heads:            # the identity: rotate (moves two different heads)
        perm = perm[1:] + perm[:1]
    pmodel = MultiHeadAttention(perm, d=d)
    D = model.scale()                         # raw: every head of the model, as written
    shape = structure(model.heads)
    row = {"trial": [seed, ID, index], "d": d, "H": H, "kind": kind,
           "canonical_heads": len(canon), "scale": D, "mismatches": [],
           "non_canonical": len(canon) < H,
           "structure_as_kind": kind in ("plain", "den") or (
               len(canon) == expected_canonical_heads(H, kind) and (shape.merged or shape.cancelled) > 0),
           "permuted": pmodel.heads != model.heads}
    maxlen = 2 * H + 3
    for field, n, R in ((Symbolic(scale=D), n_sym, 2), (Rational(scale=D), n_rat, 6)):
        for _ in range(n):
            q = random_query(rng, d, maxlen, R)
            a, b, c = (m.evaluate(q, field) for m in (model, cmodel, pmodel))
            r = sum_of_heads(model, q, field)
            if not (field.eq(a, b) and field.eq(a, c) and field.eq(r, b)):
                row["mismatches"].append({"field": field.name, "query": [list(t) for t in q],
                                          "model": model.to_json()})
        row[f"{field.name}_queries"] = n
    # distinct canonical forms -> a witness query
    how = PERTURBATIONS[index % len(PERTURBATIONS)]
    other = perturb(rng, canon, d, how)
    if other is None or canonicalize(other) == canon:
        how = "add head"
        other = perturb(rng, canon, d, how)
    row["perturbation"] = how
    row["distinct_canonical"] = canonicalize(other) != canon
    omodel = MultiHeadAttention(other, d=d)
    K = Rational(scale=int(gmpy2.lcm(cmodel.scale(), omodel.scale())))   # realises both raw models
    row["witness_after"] = None
    for n in range(1, search + 1):
        q = random_query(rng, d, maxlen, 6)
        if not K.eq(cmodel.evaluate(q, K), omodel.evaluate(q, K)):
            row["witness_after"] = n
            row["witness"] = [[str(x) for x in t] for t in q]
            break
    return row


def canonical_summary(rows, min_pairs: int) -> tuple:
    mism = [m for r in rows for m in r["mismatches"]]
    # self-comparisons: a merged/cancelling model without its structure (then it may be
    # its own canonical form), or no model at all that differs from its canonical form
    # or from its permutation
    vacuous = [r for r in rows if not r["structure_as_kind"]]
    not_distinct = [r for r in rows if not r["distinct_canonical"]]
    pairs = [r for r in rows if r["distinct_canonical"]]
    unwitnessed = [r for r in pairs if r["witness_after"] is None]
    after = sorted(r["witness_after"] for r in pairs if r["witness_after"] is not None)
    evidence = {
        "models": len(rows),
        "equal_on_queries": {"symbolic Q(T)": sum(r["symbolic_queries"] for r in rows),
                             "rational base 2": sum(r["rational_queries"] for r in rows)},
        "mismatches": len(mism),
        "non_canonical_models": sum(1 for r in rows if r["non_canonical"]),
        "permuted_models": sum(1 for r in rows if r["permuted"]),
        "structured_models_missing_structure": len(vacuous),
        "distinct_pairs": len(pairs),
        "witnessed": len(pairs) - len(unwitnessed),
        "queries_to_witness": {"max": after[-1], "median": after[len(after) // 2]} if after else None,
        "perturbations": sorted({r["perturbation"] for r in rows}),
        "kinds": sorted({r["kind"] for r in rows}),
        "grid": sorted({f"d={r['d']} H={r['H']}" for r in rows}),
        "mismatch_examples": mism[:3],
        "unwitnessed_examples": [{k: r[k] for k in ("trial", "d", "H", "kind", "perturbation")}
                                 for r in unwitnessed[:3]],
    }
    problems = []
    if vacuous:
        problems.append(f"{len(vacuous)} merged/cancelling model(s) without their structure "
                        f"(compared with themselves)")
    if not any(r["non_canonical"] for r in rows):
        problems.append("no model differed from its canonical form")
    if not any(r["permuted"] for r in rows):
        problems.append("no permutation moved the heads")
    if not_distinct:
        problems.append(f"{len(not_distinct)} perturbation(s) did not change the canonical form")
    if unwitnessed:
        problems.append(f"{len(unwitnessed)} distinct pair(s) without a witness query")
    if len(pairs) < min_pairs:
        problems.append(f"only {len(pairs)} distinct pairs (need {min_pairs})")
    return verdict(evidence, refuted=bool(mism), problems=problems)


@claim(ID, "f depends only on the canonical form (merge equal W, sum v, drop zero groups), "
           "and distinct canonical forms give distinct functions.", order=50)
def check(ctx):
    lv = level(ctx)
    reps, n_sym, n_rat, search = {"tiny": (1, 2, 4, 50), "quick": (2, 3, 10, 50),
                                  "full": (6, 5, 30, 200)}[lv]
    items = []
    for d in (1, 2, 3):
        for H in (1, 2, 3, 4):
            for kind in kinds_for(H):
                for _ in range(reps if d < 3 else 1):
                    items.append((ctx.seed, len(items), d, H, kind, n_sym if d < 3 else 1, n_rat, search))
    rows = ctx.map(canonical_trial, items)
    status, evidence = canonical_summary(rows, min_pairs=len(rows))
    return ClaimResult(status, evidence)
