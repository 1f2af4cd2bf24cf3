"""Streaming a reply to where the user is looking, as it arrives.

A notebook cell (or a chat cell, or a terminal chat) installs an :class:`Echo` for its
frame with :func:`using_echo`; a plain-text ``runtime.exec`` made directly in that frame
(not inside a nested agentic function, and not one gated by ``choices`` or a
``response_format``) then streams, and each piece of text is written to the output the
moment the provider delivers it: to the echo's output (stdout by default), or, given
``per_reply`` (a notebook cell: one output per reply, updated in place), to a new output
opened by each reply's first piece and closed by its end.  The node still stores the
complete reply; a reply cut off (Ctrl-C) keeps what arrived, marked ``cancelled`` and ``partial``.

What is written passes :class:`~openprogram.context.secrets.SecretStream` first: a known
secret the model echoes (an API key of the environment, a key given to a provider) is
``***`` on the screen and in the saved notebook, as in the node, even split across pieces.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TextIO

from openprogram.context.secrets import SecretStream
from openprogram.store.vars import current, using


class ReplySink(Protocol):
    """One reply's own output (``Echo(per_reply=…)``): written, flushed, closed when the
    reply ends."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class Echo:
    """Writes streamed text to ``out`` (default: the current ``sys.stdout``), flushed per
    piece so a notebook frontend shows it at once, secrets masked; ``end()`` writes what
    was held back (the possible start of a secret) and closes the line.

    With ``per_reply``, each reply (its pieces up to ``end()``) is written to an output of
    its own instead, made by ``per_reply()`` at the reply's first piece and closed (its
    ``close()``: the whole text shown) at ``end()``."""

    def __init__(
        self,
        frame_id: str | None,
        out: TextIO | Callable[[], TextIO] | None = None,
        *,
        per_reply: Callable[[], ReplySink] | None = None,
    ) -> None:
        self.frame_id = frame_id
        self._out = out
        self._per_reply = per_reply
        self._reply: ReplySink | None = None  # the current reply's own output (per_reply)
        self.wrote = False  # on the current line
        self.total = 0  # characters streamed, ever
        self._redact: SecretStream | None = None  # one per reply: the secrets of its time

    def stream(self) -> TextIO | ReplySink:
        if self._per_reply is not None:
            if self._reply is None:
                self._reply = self._per_reply()
            return self._reply
        out = self._out() if callable(self._out) else self._out
        return out if out is not None else sys.stdout

    def __call__(self, delta: str) -> None:
        if not delta:
            return
        self.total += len(delta)
        if self._redact is None:
            self._redact = SecretStream()
        self._write(self._redact.feed(delta))

    def _write(self, text: str) -> None:
        if text:
            out = self.stream()
            out.write(text)
            out.flush()
            self.wrote = True

    def end(self) -> None:
        if self._redact is not None:
            self._write(self._redact.end())
            self._redact = None
        if self.wrote:
            out = self.stream()
            out.write("\n")
            out.flush()
            self.wrote = False
        if self._reply is not None:  # the reply's own output: complete
            reply, self._reply = self._reply, None
            reply.close()


def using_echo(echo: Echo | None) -> AbstractContextManager[Any]:
    """Install ``echo`` in the turn state (``TurnState.echo``) for the ``with`` block."""
    return using(echo=echo)


def echo_for(frame_id: str | None) -> Echo | None:
    """The echo installed for ``frame_id``, if any (calls in nested frames do not stream)."""
    echo: Echo | None = current().echo
    return echo if echo is not None and echo.frame_id == frame_id else None
