"""Claim ``exact-recovery``: with H known, learn(oracle(model)) == canonical(model).

arXiv:2608.03294, main theorem (docs: explanation/algorithm.md#how-it-works and docs: explanation/algorithm.md#what-a-failure-means):
the learner returns exactly the
canonical heads (merged W, summed v, zero groups dropped), as exact rationals,
or an explicit failure -- never a wrong answer.  The campaign runs random
models of every kind (:mod:`proofs_check.models`) through the rational field
and, when installed, the modular field.  Verified when not one certified answer
differs from the canonical form and, in every field, at least 2/3 of the runs
are certified.
"""

from __future__ import annotations

from ..claim import ClaimResult, claim
from ._learning import learning_trial, modular_field, recovery_grid, recovery_summary

ID = "exact-recovery"


@claim(ID, "With H known, the learner recovers the canonical heads exactly "
           "(learn(oracle(model)) == canonical(model)), or flags a failure; never a wrong answer.",
       order=10)
def check(ctx):
    rows = ctx.map(learning_trial, recovery_grid(ctx, ID, upper_bound=False))
    status, evidence = recovery_summary(rows, min_certified=len(rows) // 2)
    evidence["modular_field"] = "used" if modular_field() is not None else \
        "not installed (exactlearn.fields.Modular missing): rational field only"
    return ClaimResult(status, evidence)
