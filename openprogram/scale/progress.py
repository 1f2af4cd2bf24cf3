"""The one-line progress of a map: done / failed / in flight / tokens, redrawn in place.

Written to stderr with a carriage return (a terminal and a notebook's stream output both
redraw the line), at most a few times a second, and once more at the end.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def progress_line(label: str, total: int, done: int, failed: int, flight: int, tokens: int) -> str:
    parts = [f"{done}/{total} done"]
    if failed:
        parts.append(f"{failed} failed")
    parts.append(f"{flight} in flight")
    parts.append(f"{tokens:,} tokens")
    return f"map {label}: " + " · ".join(parts)


class Progress:
    def __init__(
        self, label: str, total: int, *, enabled: bool, stream: TextIO | None = None
    ) -> None:
        self.label = label
        self.total = total
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self._last = 0.0
        self._width = 0

    def show(
        self, done: int, failed: int, flight: int, tokens: int, *, final: bool = False
    ) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not final and now - self._last < 0.25:
            return
        self._last = now
        line = progress_line(self.label, self.total, done, failed, flight, tokens)
        pad = " " * max(0, self._width - len(line))
        self._width = len(line)
        try:
            self.stream.write(f"\r{line}{pad}" + ("\n" if final else ""))
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream must not stop the map
            self.enabled = False
