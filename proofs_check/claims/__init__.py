"""One module per claim of the paper; each registers itself with ``@claim``.

The package imports every claim module here, with plain imports that ``lint-imports``
sees (no ``importlib`` discovery), and ``proofs_check`` imports this package, so the
registry :data:`proofs_check.claim.CLAIMS` is complete as soon as ``proofs_check`` is
imported.  A new claim module is added to this list (``tests/test_proofs_check.py``
checks that none is missing).
"""

# each registers its claims on import
from . import (approximate_oracle, bias_extension, canonical_form, efficient_parameter_count,  # noqa: F401
               efficient_plan, exact_recovery,
               exact_recovery_upper_bound, nonidentifiability, probability_one_rate, query_count,
               query_length, rational_function_form, transformer_equivalence)
