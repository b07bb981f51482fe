"""Repository-wide pytest hooks: the tutorial notebooks are ``slow``.

A test function carries ``@pytest.mark.slow`` itself; a notebook, run by ``nbmake``
(``--nbmake`` in ``pyproject.toml``), cannot, so it is marked here.  Each takes 5-37 s
(full run at 43b826e), 66 s together.  The fast profile ``python -m pytest -m "not slow"``
leaves them out; ``python -m pytest`` (the README's Quickstart) runs everything
(docs/explanation/tests.md).
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
