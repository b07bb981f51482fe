"""Test spies: a flag that is up while a patched function runs, so that another spy records
only the calls made from inside it (tests/test_real_speed.py, tests/test_stable_ask_more.py)."""

from __future__ import annotations


def while_inside(monkeypatch, owner, name, before=None) -> list:
    """Patch ``owner.name`` so that the returned flag ``[bool]`` is True while it runs;
    ``before()``, if given, is called at each entry."""
    real, inside = getattr(owner, name), [False]

    def wrapped(*args, **kwargs):
        if before is not None:
            before()
        inside[0] = True
        try:
            return real(*args, **kwargs)
        finally:
            inside[0] = False

    monkeypatch.setattr(owner, name, wrapped)
    return inside
