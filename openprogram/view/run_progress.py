"""What a long command-line run is doing, while it does it: the function (stage) running,
the model calls made, the tokens so far.

It listens to the node writes of one session (:mod:`openprogram.store.session.events`).
Written to stdout (stderr keeps the one- or two-line error of a failed run): in a terminal
one status line is redrawn in place; written to a log (not a TTY), each event is a plain
line of its own, so ``openprogram research … > run.log`` shows progress
with ``tail -f``.  A slow local model is then never mistaken for a hung command.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from openprogram.store.session import events


class RunProgress:
    """Turns node writes into progress lines (pure but for the stream it writes to)."""

    def __init__(self, label: str, stream: TextIO, *, live: bool) -> None:
        self.label = label
        self.stream = stream
        self.live = live  # a terminal: one line redrawn; else a line per event
        self.stage = ""
        self.calls = 0
        self.tokens = 0
        self._counted: set[str] = set()
        self._started = time.monotonic()
        self._width = 0
        self._lock = threading.Lock()

    def on_write(self, node: dict[str, Any]) -> None:
        meta = node.get("metadata") or {}
        kind, status = meta.get("kind"), meta.get("status")
        with self._lock:
            if kind == "function" and status == "running" and node.get("caller"):
                self.stage = str(node.get("name") or "?")
                self._show(f"{self.stage} started")
            elif kind == "llm" and status == "running":
                self._show(f"{self.stage or self.label}: call {self.calls + 1} sent")
            elif kind == "llm" and node.get("id") not in self._counted:
                self._counted.add(str(node.get("id")))
                self.calls += 1
                usage = meta.get("usage") or {}
                self.tokens += int(usage.get("input_tokens") or 0)
                self.tokens += int(usage.get("output_tokens") or 0)
                self._show(f"{self.stage or self.label}: call {self.calls} {status}")

    def line(self, event: str) -> str:
        seconds = int(time.monotonic() - self._started)
        return (
            f"{self.label}: {event} · {self.calls} call{'s' if self.calls != 1 else ''} · "
            f"{self.tokens:,} tokens so far · {seconds // 60}m{seconds % 60:02d}s"
        )

    def _show(self, event: str) -> None:
        text = self.line(event)
        try:
            if self.live:
                pad = " " * max(0, self._width - len(text))
                self._width = len(text)
                self.stream.write(f"\r{text}{pad}")
            else:
                self.stream.write(text + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream never stops the run
            pass

    def end(self) -> None:
        with self._lock:
            if self.live and self._width:
                try:
                    self.stream.write("\n")
                    self.stream.flush()
                except (OSError, ValueError):
                    pass


@contextmanager
def showing_progress(
    label: str, session_id: Callable[[], str | None], stream: TextIO | None = None
) -> Iterator[RunProgress]:
    """Show the progress of the run inside the block (the writes of ``session_id()``'s
    session; a callable, since a run may name its session only once it starts)."""
    out = stream if stream is not None else sys.stdout
    progress = RunProgress(label, out, live=bool(getattr(out, "isatty", lambda: False)()))

    def listener(session: str, node: dict[str, Any]) -> None:
        wanted = session_id()
        if wanted is None or session == wanted:
            progress.on_write(node)

    unsubscribe = events.subscribe(listener)
    try:
        yield progress
    finally:
        unsubscribe()
        progress.end()
