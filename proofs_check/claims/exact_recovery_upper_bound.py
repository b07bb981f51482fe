"""Claim ``exact-recovery-upper-bound``: with only a bound H0 > H, recovery is still exact.

arXiv:2608.03294 (abstract; docs: explanation/algorithm.md#how-it-works): with
``max_heads=H0`` the plan uses H0 in place of H and the interpolation reveals
the true number of canonical heads.  The campaign is
that of ``exact-recovery`` with H0 = H + 1 and H + 2 in turn; verified under
the same rule (no certified wrong answer, >= 2/3 certified in every field).
"""

from __future__ import annotations

from ..claim import ClaimResult, claim
from ._learning import learning_trial, modular_field, recovery_grid, recovery_summary

ID = "exact-recovery-upper-bound"


@claim(ID, "With only a bound H0 >= H (max_heads=H0), the learner still recovers the canonical "
           "heads exactly, revealing their true number.", order=20)
def check(ctx):
    rows = ctx.map(learning_trial, recovery_grid(ctx, ID, upper_bound=True))
    status, evidence = recovery_summary(rows, min_certified=len(rows) // 2)
    evidence["bounds"] = sorted({f"H0=H+{r['bound'] - r['H']}" for r in rows})
    evidence["modular_field"] = "used" if modular_field() is not None else \
        "not installed (exactlearn.fields.Modular missing): rational field only"
    return ClaimResult(status, evidence)
