"""A plain progress bar for long steps (stderr, no dependency): done of total, a note of the caller's (the
simulated clock, say), the wall time elapsed, and the expected time left and the wall-clock time of the end
(ETA) at the rate so far.

On a terminal the bar redraws in place on one line; written to a file or a pipe (a log, CI) it becomes one
plain line every `line_every_s` wall seconds and a last one at the end, so a log holds no carriage returns
and no thousand copies of the same bar. `done` may be any unit that grows with the work, not only items:
a caller whose items cost unequal time (a simulated day's busy evening) passes work units so the ETA holds."""
from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Callable, TextIO

BAR_WIDTH = 25
ETA_AFTER_S = 5.0  # a rate over the first few seconds (a warm-up, a first bundle) says little of the rest


def duration(seconds: float) -> str:
    """`42 s`, `3m05s` or `1h02m`: short enough for a progress line."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def progress_line(what: str, done: float, total: float, elapsed_s: float, now: datetime, note: str = "") -> str:
    """One rendering of the bar: `what: [####   ]  42% note | 3m05s elapsed, ETA 4m10s (ends 22:51:03 UTC)`.
    No ETA in the first ETA_AFTER_S seconds, before any work is done, or once all is."""
    fraction = min(1.0, max(0.0, done / total)) if total > 0 else 1.0
    bar = "#" * int(fraction * BAR_WIDTH)
    eta = ""
    if 0 < done < total and elapsed_s >= ETA_AFTER_S:
        left_s = elapsed_s * (total - done) / done
        ends = (now + timedelta(seconds=left_s)).astimezone(timezone.utc)
        eta = f", ETA {duration(left_s)} (ends {ends:%H:%M:%S} UTC)"
    return f"{what}: [{bar:<{BAR_WIDTH}}] {int(fraction * 100):3d}% {note or f'{done:g}/{total:g}'} | " \
           f"{duration(elapsed_s)} elapsed{eta}"


class Progress:
    """The bar on `stream`: in place on a terminal, periodic lines elsewhere (see the module's docstring)."""

    def __init__(self, what: str, total: float, stream: TextIO | None = None, *, line_every_s: float = 30.0,
                 tty: bool | None = None, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = lambda: datetime.now(timezone.utc)):
        """`tty` None: ask the stream. `clock` (seconds) and `wall` (the time of day for the ETA's end) are
        parameters so a test can script them."""
        self.what, self.total = what, max(total, 1)
        self.stream = stream if stream is not None else sys.stderr
        self.tty = tty if tty is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        self.line_every_s, self.clock, self.wall = line_every_s, clock, wall
        self.began = clock()
        self._last_percent = -1
        self._last_note = ""
        self._last_line_at: float | None = None
        self._drawn = False

    def update(self, done: float, note: str = "") -> None:
        """Report `done` of the total; `note` replaces the `done/total` count in the line when given."""
        now = self.clock()
        percent = int(done * 100 / self.total)
        if self.tty:
            if percent == self._last_percent and note == self._last_note:
                return
            self.stream.write("\r" + self._line(done, note, now) + "\x1b[K")
            self._drawn = True
        else:
            if self._last_line_at is not None and now - self._last_line_at < self.line_every_s:
                return
            self.stream.write(self._line(done, note, now) + "\n")
            self._last_line_at = now
        self._last_percent, self._last_note = percent, note
        self.stream.flush()

    def close(self, note: str = "") -> None:
        """The final state (all done), and the line ended."""
        line = self._line(self.total, note or self._last_note, self.clock())
        self.stream.write(("\r" + line + "\x1b[K\n") if self.tty else line + "\n")
        self.stream.flush()

    def _line(self, done: float, note: str, now: float) -> str:
        return progress_line(self.what, done, self.total, now - self.began, self.wall(), note)
