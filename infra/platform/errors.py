"""The platform's one error type: every failure names its cause and what to do."""
from __future__ import annotations

from core.errors import AdserveError


class PlatformError(AdserveError, RuntimeError):
    """A platform part could not be fetched, started, checked or stopped (a RuntimeError too, for callers that
    catch the builtin)."""
