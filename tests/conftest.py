"""Shared pytest configuration: hypothesis profiles.

Two profiles are registered; the environment variable ``HYPOTHESIS_PROFILE``
selects one (default ``ci``):

``ci`` (default)
    Fast and reproducible: ``derandomize=True`` (the same examples on every
    run, so CI never flakes on a new draw), ``deadline=None`` (exact
    arithmetic has heavy-tailed timings), no example database, and a small
    ``max_examples`` (10).  The whole suite runs in a few minutes on two cores.

``thorough``
    The campaign size: ``max_examples=100`` (ten times ``ci``), random (not derandomized) draws,
    the example database on, so a failure found once is replayed first next
    time.  Run it with::

        HYPOTHESIS_PROFILE=thorough python -m pytest tests

Expensive properties do not hard-code ``max_examples``; they ask for a
fraction of the profile's budget with :func:`strategies.scaled` (tests/strategies.py), so the
``thorough`` profile enlarges them too.
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
    "thorough", max_examples=100, deadline=None, suppress_health_check=_SLOW, print_blob=True)

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)
