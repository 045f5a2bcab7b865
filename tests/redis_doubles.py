"""The one part of redis-py's asyncio client that unit tests' stand-in Redis objects lack: a pipeline.

serving.frequency_store.UserStore reads a user's keys in one pipeline (`pipeline(transaction=False)`, commands
queued, then `execute(raise_on_error=False)`). A stand-in that implements the commands as coroutines (hgetall,
smembers) inherits `Pipelined` to take part: the queued commands run in order when the pipeline executes, and a
command that raises puts its exception in its place, as redis-py does with raise_on_error=False."""
from __future__ import annotations

from typing import Any


class _Pipeline:
    def __init__(self, target: Any) -> None:
        self.target = target
        self.queued: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, command: str):
        def queue(*args: Any) -> "_Pipeline":
            self.queued.append((command, args))
            return self
        return queue

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        results: list[Any] = []
        for command, args in self.queued:
            try:
                results.append(await getattr(self.target, command)(*args))
            except Exception as exc:  # noqa: BLE001 - in its place, as redis-py does
                if raise_on_error:
                    raise
                results.append(exc)
        return results


class Pipelined:
    """Mixin: `pipeline(transaction=False)` over the stand-in's own command coroutines."""

    def pipeline(self, transaction: bool = True) -> _Pipeline:
        return _Pipeline(self)
