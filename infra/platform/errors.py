"""The platform's one error type: every failure names its cause and what to do."""


class PlatformError(RuntimeError):
    """A platform part could not be fetched, started, checked or stopped."""
