"""Griffe extension: Sphinx roles in docstrings shown as code on the API page (docs: reference/api.md).

The package's docstrings name objects the Sphinx way (``:class:`~exactlearn.oracle.Oracle```),
which mkdocstrings would print as a raw ``:class:`` before the code.  This extension, loaded by
the ``mkdocstrings`` handler in mkdocs.yml, rewrites each role to plain code (``Oracle`` for a
``~`` name, the full name otherwise) in every docstring griffe reads; the source keeps its roles
for ``help()``.  ``tests/test_site.py`` checks that the built API page shows none.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:py:)?(?:mod|class|func|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")


def _plain(match: re.Match) -> str:
    name = match.group(2)
    return f"`{name.rsplit('.', 1)[-1] if match.group(1) else name}`"


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite ``:role:`target``` to ```target``` in each object's docstring."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_plain, obj.docstring.value)
