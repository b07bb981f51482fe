"""proofs_check: one entry per claim of arXiv:2608.03294, each a seeded campaign.

Run ``proofs-check [--quick] [--json]``.  Claims live in
:mod:`proofs_check.claims` (one module each, imported with the package, which fills the
registry :data:`~proofs_check.claim.CLAIMS`) and
return a :class:`~proofs_check.claim.ClaimResult` with a status among
``verified``, ``refuted``, ``inconclusive`` and ``not checked``.
"""

from .claim import CLAIMS, Claim, ClaimResult, Context, claim, run_claims
from . import claims  # noqa: F401 (after .claim: every claim module registers itself)

__all__ = ["Claim", "ClaimResult", "Context", "claim", "CLAIMS", "run_claims"]
