"""How a process's typed settings are printed at start: every field, secrets masked.

A field is a secret when its name says so (password, secret, token, key) or its value masks itself (a value
with a `masked()` method, such as core.tokens.TokenKeys); a URL or DSN keeps its host but not its password
(in a URL, everything between the user's colon and the authority's last @, so a password holding an @ is
masked whole).
Pure: this module formats values it is given and never reads the environment."""
from __future__ import annotations

import dataclasses
import re
from typing import Any

SECRET_WORDS = ("password", "secret", "token", "key")
MASK = "***"
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^/?#\s]+(?P<tail>@)", re.IGNORECASE)
_DSN_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?:'[^']*'|\S+)", re.IGNORECASE)


def masked(name: str, value: Any) -> str:
    """One setting as it may be printed."""
    if hasattr(value, "masked"):
        return value.masked()
    if value and any(word in name.lower() for word in SECRET_WORDS):
        return MASK
    text = str(value)
    text = _URL_PASSWORD.sub(lambda m: m["head"] + MASK + m["tail"], text)
    return _DSN_PASSWORD.sub(lambda m: m["head"] + MASK, text)


def describe(settings: Any, prefix: str = "") -> str:
    """A settings dataclass as `name=value, ...` (nested dataclasses as `outer.inner=value`), secrets masked."""
    parts = []
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            parts.append(describe(value, prefix=f"{prefix}{field.name}."))
        else:
            parts.append(f"{prefix}{field.name}={masked(field.name, value)}")
    return ", ".join(parts)
