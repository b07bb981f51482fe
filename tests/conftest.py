"""Shared pytest configuration: hypothesis profiles.

Two profiles are registered; the environment variable ``HYPOTHESIS_PROFILE``
selects one (default ``ci``):

``ci`` (default)
    Fast and reproducible: ``derandomize=True`` (the same examples on every
    run, so CI never flakes on a new draw), ``deadline=None`` (exact
    arithmetic has heavy-tailed timings), no example database, and a small
    ``max_examples`` (10).  The round-trip, invariance, differential,
    degenerate, out-of-class and CLI tests take about 10 s on two cores.

``thorough``
    The campaign size: ``max_examples=500`` (fifty times ``ci``; several
    minutes), random draws (not derandomized), and the example database on, so
    a failure found once is replayed first next time.  Run it with::

        HYPOTHESIS_PROFILE=thorough python -m pytest tests

Properties do not hard-code ``max_examples``; they ask for a multiple of the
``ci`` budget with :func:`strategies.scaled` (tests/strategies.py), so the
``thorough`` profile enlarges them in proportion.
"""

from __future__ import annotations

import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))     # `import strategies` from test modules

_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile(
    "ci", max_examples=10, deadline=None, derandomize=True, database=None,
    suppress_health_check=_SLOW, print_blob=True)
settings.register_profile(
    "thorough", max_examples=500, deadline=None, suppress_health_check=_SLOW, print_blob=True)

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)
