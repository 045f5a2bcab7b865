"""The rule for versioned records (core.versions): only a newer version replaces the held one."""
from __future__ import annotations

from core.versions import is_newer


def test_a_first_version_is_always_newer():
    assert is_newer(1, None) and is_newer(0, None)


def test_only_a_higher_version_replaces_the_held_one():
    assert is_newer(3, 2)
    assert not is_newer(2, 2) and not is_newer(1, 2)
