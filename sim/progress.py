"""A plain progress line for long steps (stderr, one line, no dependency): done of total, elapsed, and the
expected time left at the rate so far."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, what: str, total: int, stream=sys.stderr):
        self.what, self.total, self.stream = what, max(total, 1), stream
        self.began = time.monotonic()
        self._last = -1

    def update(self, done: int) -> None:
        percent = int(done * 100 / self.total)
        if percent == self._last:
            return
        self._last = percent
        elapsed = time.monotonic() - self.began
        bar = "#" * (percent // 4)
        left = f", ETA {elapsed * (self.total - done) / done:.0f} s" if 0 < done < self.total else ""
        self.stream.write(f"\r{self.what}: [{bar:<25}] {percent:3d}% {done}/{self.total} ({elapsed:.1f} s{left})")
        self.stream.flush()

    def close(self) -> None:
        self.update(self.total)
        self.stream.write("\n")
