"""An injected task failure, for proving that a job fails over in place: the fault matrix's `task_failure` row
(`adserve bench faults`) and the stateful jobs' restart tests arm it; a deployed job never does.

A job started with `--tripwire-file PATH` gives its stateful operator a Tripwire. While the file is absent the
operator runs as usual (the file is looked for at most every TRIPWIRE_LOOK_S). Once the operator sees it, the
N-th record it processes from then on (N is the file's content, 1 when empty) removes the file and raises
InjectedTaskFailure. The task fails, Flink restarts the job from its latest checkpoint inside the same
TaskManager and the same Python worker, and the file is gone, so it fails once: whichever parallel instance
removes the file first is the one that raises."""
from __future__ import annotations

import os
import time

from core.errors import AdserveError

TRIPWIRE_LOOK_S = 0.5


class InjectedTaskFailure(AdserveError, RuntimeError):
    """The failure a tripwire file asked for."""


class Tripwire:
    """Counts the records an operator processes once its file appears; `step()` raises at the N-th."""

    def __init__(self, path: str = "") -> None:
        self.path = path
        self._next_look = 0.0
        self._left: int | None = None  # records to go once the file was seen

    def step(self) -> None:
        if not self.path:
            return
        if self._left is None:
            now = time.monotonic()
            if now < self._next_look:
                return
            self._next_look = now + TRIPWIRE_LOOK_S
            try:
                with open(self.path, encoding="utf-8") as f:
                    text = f.read().strip()
            except OSError:  # absent (the usual case) or unreadable: not armed
                return
            self._left = int(text) if text.isdigit() and int(text) > 0 else 1
        self._left -= 1
        if self._left > 0:
            return
        self._left = None
        try:
            os.remove(self.path)
        except FileNotFoundError:  # another instance took it: it fails, this one goes on
            return
        raise InjectedTaskFailure(f"injected task failure: {self.path} was armed")
