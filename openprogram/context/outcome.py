"""How a node ends: :func:`finish` writes status, output, error, traceback and duration.

Every path that ends a node — an agentic call, an LLM exec, a tool, ``ask_user``, a notebook
turn, a chat reply, a child process — goes through here, so they agree on the error text
(one cap), on redaction (credentials are replaced *before* anything is cut, so a secret
split by a cut cannot escape) and on what counts as a cancellation.
"""

from __future__ import annotations

import sys
import time
import traceback as tb
from typing import Any, Final

from openprogram.context.nodes import CANCELLED, COMPLETED, ERROR, INTERRUPTED, Call, sanitize
from openprogram.context.paths import portable_traceback
from openprogram.context.secrets import redact_secrets, without_home

ERROR_CHARS: Final = 2000  # the head of an error message kept on a node
TRACEBACK_CHARS: Final = 20000  # the tail of a traceback kept on a node
_KEEP: Final[Any] = object()


def is_cancellation(exc: BaseException) -> bool:
    """Ctrl-C, a cancelled asyncio task or a closed generator: the node ends ``cancelled``."""
    if isinstance(exc, KeyboardInterrupt | GeneratorExit):
        return True
    asyncio = sys.modules.get("asyncio")  # no import: without asyncio there is no task
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)


ENDED: Final = {
    COMPLETED: "completed",
    ERROR: "failed",
    CANCELLED: "was cancelled",
    INTERRUPTED: "was interrupted",
}


def ended_sentence(what: str, status: str, error: str | None = None) -> str:
    """How ``what`` ended as words: ``the reply failed: ValueError: …`` (not ``the reply
    ended error: …``); a status of no known kind is quoted."""
    how = ENDED.get(status, f"ended with status {status!r}")
    return f"{what} {how}" + (f": {error}" if error else "")


def error_text(exc: BaseException, limit: int = ERROR_CHARS) -> str:
    """``Type: message`` (``Type`` alone when the message is empty), redacted, then cut;
    ``<Type (str() failed: Error)>`` when the exception's own ``__str__`` fails."""
    try:
        message = str(exc)
    except Exception as failed:  # the user's exception must stay the one that propagates
        return f"<{type(exc).__name__} (str() failed: {type(failed).__name__})>"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return redact_secrets(text)[:limit]


def traceback_text(exc: BaseException) -> str:
    """The formatted traceback, redacted, its frames' files without this machine's paths
    (:func:`paths.portable_traceback`; the home folder written ``~``), then cut to its last
    ``TRACEBACK_CHARS``."""
    text = portable_traceback(redact_secrets("".join(tb.format_exception(exc))))
    return without_home(text)[-TRACEBACK_CHARS:]


def finish(
    node: Call,
    status: str | None = None,
    *,
    output: Any = _KEEP,
    exc: BaseException | None = None,
    error: str | None = None,
    with_traceback: bool = False,
    started: float | None = None,
) -> Call:
    """End ``node``: its status, output, error and duration (the caller persists it).

    ``status`` defaults to ``completed``, or — with ``exc`` — ``cancelled`` for a
    cancellation and ``error`` otherwise.  ``exc`` gives the error text (:func:`error_text`)
    and, with ``with_traceback`` when the status is ``error``, the traceback; ``error``
    is an error text already made.  ``output`` is made JSON-safe; ``started`` (a
    ``time.perf_counter()`` reading) gives ``duration_ms``.
    """
    meta = node.metadata
    if exc is not None:
        status = status or (CANCELLED if is_cancellation(exc) else ERROR)
        meta["error"] = error_text(exc)
        if with_traceback and status == ERROR:
            meta["traceback"] = traceback_text(exc)
    elif error is not None:
        meta["error"] = redact_secrets(error)[:ERROR_CHARS]
    meta["status"] = status or COMPLETED
    if output is not _KEEP:
        node.output = sanitize(output)
    if started is not None:
        meta["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return node
