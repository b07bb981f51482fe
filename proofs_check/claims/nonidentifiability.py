"""Claim ``nonidentifiability-resolved``: raw multi-head parameters are not
identifiable, and the canonical form resolves it (arXiv:2608.03294, building on
arXiv:2601.16873; docs: explanation/algorithm.md#the-model-and-its-sign-convention).

Per trial, from a random canonical model A:

1. *Not identifiable.*  A distinct raw parameterisation A' of the same
   function: one head's v split across two heads with the same W, heads
   permuted, or a cancelling pair (same W, v and -v) added.  A' and A must give
   exactly equal outputs on random queries -- in Q(T), T = e^(1/D) (the true
   exponential) and in the rational field -- and have the same canonical form.
2. *Resolved by the learner.*  The learner, run on A (heads = H) and on A'
   (heads = H' = its raw count) with different seeds, returns the same
   canonical heads, equal to A's.
3. *Distinct canonical forms, distinct outputs on the learner's queries.*  A
   perturbation B of A (as in ``canonical-form``) with a different canonical
   form is evaluated on the queries the learner actually asked of A; some value
   must differ (else the learner could not tell A from B and would certify A's
   heads for B).  The learner run on B with the same seed must not return A's
   heads.

Refuted by any counterexample to 1-3; verified when there is none and at least
2/3 of the learner pairs were certified; inconclusive otherwise.
"""

from __future__ import annotations

import gmpy2
from gmpy2 import mpq

from exactlearn import Head, MultiHeadAttention, Oracle, Rational, Symbolic, learn
from exactlearn.cli.main import field_by_name
from exactlearn.model import structure

from ..claim import ClaimResult, claim, verdict
from ..models import canonical_model, random_model, random_query, random_W, split_head, trial_rng
from ._learning import RATIONAL_RANGE, level, modular_field, reason_of, size
from .canonical_form import PERTURBATIONS, perturb

ID = "nonidentifiability-resolved"
VARIANTS = ("split v", "permute + split v", "cancelling pair")


def reparameterise(rng, model: MultiHeadAttention, variant: str) -> MultiHeadAttention:
    """A raw parameterisation of the same function (distinct as an ordered list of heads)."""
    if variant == "split v":
        return split_head(rng, model, rng.randrange(model.H))
    if variant == "permute + split v":
        out = split_head(rng, model, rng.randrange(model.H))
        heads = list(out.heads)
        while len(heads) > 1 and tuple(heads) == out.heads:
            rng.shuffle(heads)
        return MultiHeadAttention(heads, d=model.d)
    if variant == "cancelling pair":          # a W no head has: a group the canonical form drops
        taken = {h.W for h in model.heads}
        while True:
            W = tuple(tuple(mpq(x.numerator, x.denominator) for x in row) for row in random_W(rng, model.d, 2))
            if W not in taken:
                break
        u = tuple(mpq(rng.randint(1, 4)) for _ in range(model.d))
        heads = list(model.heads) + [Head(W, u), Head(W, tuple(-x for x in u))]
        rng.shuffle(heads)
        return MultiHeadAttention(heads, d=model.d)
    raise ValueError(variant)


class Recording:
    """A black box that records the queries asked of it (for part 3)."""

    def __init__(self, oracle):
        self.oracle = oracle
        self.asked = []

    def __call__(self, tokens):
        self.asked.append([tuple(t) for t in tokens])
        return self.oracle(tokens)

    def over(self, field):
        """The model modulo another prime (the multi-modular method asks the same
        queries again there; ``asked`` keeps the first prime's)."""
        return self.oracle.over(field)


def nonident_trial(args) -> dict:
    """``args = (seed, index, d, H, kind, n_symbolic, n_rational, field_name)``: the
    learner runs over ``field_name`` ("rational" at range 20, or "modular" at its
    default range); outputs are compared in Q(T) and over Q."""
    seed, index, d, H, kind, n_sym, n_rat, field_name = args
    R = RATIONAL_RANGE if field_name == "rational" else None
    rng = trial_rng(seed, ID, index)
    A = canonical_model(random_model(rng, d, H, kind))
    while A.H == 0:                  # d = 1 draws can cancel out entirely: redraw
        A = canonical_model(random_model(rng, d, H, kind))
    variant = VARIANTS[index % len(VARIANTS)]
    A2 = reparameterise(rng, A, variant)
    row = {"trial": [seed, ID, index], "field": field_name, "d": d, "H": A.H, "kind": kind,
           "variant": variant,
           "raw_heads": [A.H, A2.H], "raw_distinct": A.heads != A2.heads,
           "same_canonical": A.canonical_heads() == A2.canonical_heads(), "output_mismatches": [],
           # A is canonical and A2 is not: what part 1 compares are two different models
           "A_canonical": structure(A.heads) == (0, 0, 0),
           "A2_structure": list(structure(A2.heads))}
    # 1. same outputs, exactly (Q(T) and base 2), on random queries
    D = A2.scale()                   # a multiple of A's scale
    for K, n, entries in ((Symbolic(scale=D), n_sym, 2), (Rational(scale=D), n_rat, 6)):
        for _ in range(n):
            q = random_query(rng, d, 2 * A2.H + 1, entries)
            if not K.eq(A.evaluate(q, K), A2.evaluate(q, K)):
                row["output_mismatches"].append({"field": K.name, "query": [[str(x) for x in t] for t in q]})
    row["queries_compared"] = n_sym + n_rat
    # 2. the learner resolves it: same canonical heads from both parameterisations
    rec = Recording(Oracle(A, field_by_name(field_name)))
    s_a = rng.randrange(2 ** 32)
    ra = learn(rec, d=d, heads=A.H, field=rec.oracle.field, seed=s_a, query_range=R)
    rb = learn(Oracle(A2, field_by_name(field_name)), d=d, heads=A2.H, seed=rng.randrange(2 ** 32),
               query_range=R)
    row["learner"] = [ra.status, rb.status]
    row["learner_reasons"] = [reason_of(ra.error), reason_of(rb.error)]
    canon = A.canonical_heads()
    row["learner_equal"] = [ra.heads == canon if ra.certified else None,
                            rb.heads == canon if rb.certified else None]
    # 3. a different canonical form differs on the learner's own queries
    how = PERTURBATIONS[(index // len(VARIANTS)) % len(PERTURBATIONS)]
    other = perturb(rng, canon, d, how)
    if other is None:
        how, other = "add head", perturb(rng, canon, d, "add head")
    B = MultiHeadAttention(other, d=d)
    row["perturbation"] = how
    row["B_distinct"] = B.canonical_heads() != canon
    row["A_queries"] = len(rec.asked)
    if ra.certified and row["B_distinct"]:
        # compared over the learner's field at a common scale D; a difference in
        # Q or in F_p (both specialisations of Q(T)) is a difference in Q(T)
        K = field_by_name(field_name).with_scale(int(gmpy2.lcm(A.scale(), B.scale())))
        diff = [n for n, q in enumerate(rec.asked) if not K.eq(A.evaluate(q, K), B.evaluate(q, K))]
        row["differing_queries"] = len(diff)
        row["first_differing"] = diff[0] if diff else None
        # the learner on B, with A's seed, asks the same plan: it must not return A's heads
        rB = learn(Oracle(B, field_by_name(field_name)), d=d, heads=max(A.H, B.H, 1), seed=s_a,
                   query_range=R)
        row["B_learner"] = rB.status
        row["B_learned_A"] = rB.certified and rB.heads == canon
        row["B_learner_wrong"] = rB.certified and rB.heads != B.canonical_heads()
    return row


def nonident_summary(rows, threshold=2 / 3) -> tuple:
    mism = [r for r in rows if r["output_mismatches"]]
    not_distinct = [r for r in rows if not r["raw_distinct"]]
    # part 1 must compare a canonical model with a non-canonical one (not a model with itself)
    same_shape = [r for r in rows if not r["A_canonical"] or not any(r["A2_structure"])
                  or (r["variant"] == "cancelling pair" and r["A2_structure"][1] == 0)]
    canon_differ = [r for r in rows if not r["same_canonical"]]
    learner_wrong = [r for r in rows if False in r["learner_equal"]]
    both = [r for r in rows if r["learner"] == ["certified", "certified"]]
    checked_b = [r for r in rows if "differing_queries" in r]
    no_diff = [r for r in checked_b if r["differing_queries"] == 0]
    b_fooled = [r for r in checked_b if r["B_learned_A"] or r["B_learner_wrong"]]
    not_b_distinct = [r for r in rows if not r["B_distinct"]]
    evidence = {
        "pairs": len(rows),
        "raw_distinct": len(rows) - len(not_distinct),
        "canonical_vs_non_canonical": len(rows) - len(same_shape),
        "equal_outputs": len(rows) - len(mism),
        "queries_compared": sum(r["queries_compared"] for r in rows),
        "same_canonical_form": len(rows) - len(canon_differ),
        "learner_both_certified": len(both),
        "learner_same_canonical_heads": sum(1 for r in both if r["learner_equal"] == [True, True]),
        "learner_wrong": len(learner_wrong),
        "learner_failures": sorted({x for r in rows for x in r["learner_reasons"] if x}),
        "distinct_forms_checked_on_learner_queries": len(checked_b),
        "differ_on_learner_queries": len(checked_b) - len(no_diff),
        "median_fraction_of_queries_differing":
            sorted(r["differing_queries"] / r["A_queries"] for r in checked_b)[len(checked_b) // 2]
            if checked_b else None,
        "learner_on_B_returned_A_or_wrong": len(b_fooled),
        "learner_on_B_certified": sum(1 for r in checked_b if r["B_learner"] == "certified"),
        "variants": sorted({r["variant"] for r in rows}),
        "perturbations": sorted({r["perturbation"] for r in rows}),
        "grid": sorted({f"{r['field']} d={r['d']} H={r['H']}" for r in rows}),
        "example": {k: rows[0][k] for k in ("variant", "raw_heads", "learner", "perturbation")} if rows else None,
        "counterexamples": [{k: r.get(k) for k in ("trial", "d", "H", "variant", "perturbation",
                                                   "output_mismatches", "learner_equal")}
                            for r in (mism + canon_differ + learner_wrong + no_diff + b_fooled)[:3]],
    }
    problems = []
    if not_distinct:
        problems.append(f"{len(not_distinct)} reparameterisation(s) were not distinct")
    if same_shape:
        problems.append(f"{len(same_shape)} pair(s) where A is not canonical, A' is, or A' drops no group")
    if not_b_distinct:
        problems.append(f"{len(not_b_distinct)} perturbation(s) kept the canonical form")
    if not rows or len(both) < threshold * len(rows):
        problems.append(f"learner certified both parameterisations in {len(both)}/{len(rows)} pairs "
                        f"(need >= {threshold:.3g})")
    if len(checked_b) < threshold * len(rows):
        problems.append(f"only {len(checked_b)}/{len(rows)} distinct forms checked on learner queries")
    return verdict(evidence, refuted=bool(mism or canon_differ or learner_wrong or no_diff or b_fooled),
                   problems=problems)


@claim(ID, "Raw multi-head parameters are not identifiable (distinct parameterisations, one "
           "function), the canonical form resolves it, and distinct canonical forms differ on the "
           "learner's queries.", order=70)
def check(ctx):
    lv = level(ctx)
    n_sym, n_rat = {"tiny": (1, 3), "quick": (2, 6), "full": (3, 20)}[lv]
    reps = size(ctx, 1, 2, 6)
    items = []
    for d in (1, 2, 3):
        for H in (1, 2, 3):
            if lv == "tiny" and d * H > 6:
                continue
            for r in range(reps):
                kind = "den" if r % 2 else "plain"
                items.append((ctx.seed, len(items), d, H, kind, n_sym if d * H <= 4 else 0, n_rat,
                              "rational"))
    if modular_field() is not None:
        cells = {"tiny": [(4, 2)], "quick": [(4, 2), (4, 3), (5, 3)],
                 "full": [(d, H) for d in (4, 5, 6) for H in (2, 3, 4)]}[lv]
        for d, H in cells:
            for r in range(reps):
                items.append((ctx.seed, len(items), d, H, "den", 0, n_rat, "modular"))
    rows = ctx.map(nonident_trial, items)
    status, evidence = nonident_summary(rows)
    return ClaimResult(status, evidence)
