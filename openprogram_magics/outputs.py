"""No secret leaves the kernel in an output: every message the kernel sends its frontend
(a cell's ``execute_result``, ``display_data`` and its updates, ``stream`` text, an
error's traceback, a widget's state and its binary buffers) is masked on its way out.

Two places of the kernel session see every message: ``Session.serialize``, which packs a
message's header, parent header, metadata and content before they are signed, and
``Session.send``, which adds the message's binary buffers (a widget's bytes) after them;
the extension wraps both.

- What is shown is masked, what routes a message is not: the packed metadata and content
  are checked with one ``bytes in bytes`` test per known secret value
  (:func:`openprogram.context.secrets.needs_masking`); only a message where they hold one,
  or a URL with a password, is serialized again from a copy with those two masked
  (:func:`~openprogram.context.secrets.redact_shown`).  The header and the parent header
  (message ids, the session, the user name, the date) are sent as they are: a reply stays
  matched to its request, whatever a variable holds.
- ``stream`` text (a cell's stdout and stderr) is masked across messages too: a cell that
  prints a secret in pieces (``print(k[i:i+6], end="", flush=True)``, as a hand-written
  streaming loop does) sends each piece on its own, and a frontend shows them joined.
  Each cell execution's stdout and stderr pass a
  :class:`~openprogram.context.secrets.SecretStream` (:class:`HeldStreams`): a tail that
  could begin a secret is held back until the next piece shows whether it is one, and is
  sent (as a ``stream`` message of its own) before any other message of that execution (a
  display, its reply, its ``idle``) or before the kernel begins another execution: nothing
  is lost or reordered, and a line that does not end with the start of a secret is sent
  at once.  With no secret known, a stream message is sent as it is.
- A buffer holding a secret (as UTF-8 or JSON text) or a URL's password is sent with it
  overwritten by as many ``*`` (:func:`~openprogram.context.secrets.mask_binary`): a
  binary format around the text keeps its length and offsets.  A secret inside a buffer
  in another encoding (UTF-16, base64, compressed pixels) is not found.

The program's own values stay whole: only what is sent is masked.  Outside a kernel (a
terminal IPython) nothing leaves the process this way, and nothing is installed.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

MARK = "_openprogram_masks"  # set on a wrapped method: the method it wraps
WRAPPED = ("serialize", "send")


def masking_serializer(session: Any) -> Callable[..., list[bytes]]:
    """``session.serialize`` that serializes a copy with the metadata and the content masked
    when they hold a secret."""
    serialize = session.serialize
    if getattr(serialize, MARK, None) is not None:  # wrapped already
        return serialize  # type: ignore[no-any-return]
    from openprogram.context.secrets import holds_secret, needs_masking, redact_shown

    def masked(msg: Any, ident: Any = None) -> list[bytes]:
        parts: list[bytes] = serialize(msg, ident)
        # its last four parts: header, parent header, metadata, content
        if not (needs_masking(parts[-1]) or holds_secret(parts[-2])):
            return parts
        shown = {
            "header": msg["header"],
            "parent_header": msg["parent_header"],
            "metadata": redact_shown(msg["metadata"]),
            "content": redact_shown(_unpacked(session, msg["content"])),
        }
        return serialize(shown, ident)  # type: ignore[no-any-return]

    setattr(masked, MARK, serialize)
    return masked


def masking_sender(session: Any) -> Callable[..., Any]:
    """``session.send`` that sends every binary buffer with its secrets overwritten."""
    send = session.send
    if getattr(send, MARK, None) is not None:
        return send  # type: ignore[no-any-return]
    from openprogram.context.secrets import refresh_secrets

    streams = HeldStreams(session, send)

    def masked(
        stream: Any,
        msg_or_type: Any,
        content: Any = None,
        parent: Any = None,
        ident: Any = None,
        buffers: Sequence[Any] | None = None,
        track: bool = False,
        header: Any = None,
        metadata: Any = None,
    ) -> Any:
        given = buffers if buffers else _buffers_of(msg_or_type)
        if given:
            buffers = masked_buffers(given)
        kind = _type_of(msg_or_type)
        if kind == "stream" and (streams.held or refresh_secrets()):
            with streams.lock:
                shown = streams.feed(stream, msg_or_type, content, parent, ident)
                if shown is None:  # all of it held back
                    return msg_or_type if isinstance(msg_or_type, dict) else None
                return send(stream, *shown, parent, ident, buffers, track, header, metadata)
        if streams.held and kind != "stream":
            with streams.lock:
                streams.flush(_parent_of(msg_or_type, parent), kind)
                return send(
                    stream, msg_or_type, content, parent, ident, buffers, track, header, metadata
                )
        return send(stream, msg_or_type, content, parent, ident, buffers, track, header, metadata)

    setattr(masked, MARK, send)
    masked.streams = streams  # type: ignore[attr-defined]
    return masked


class HeldStreams:
    """The ``stream`` text a session holds back: per cell execution (its request's message
    id) and stream name, the :class:`~openprogram.context.secrets.SecretStream` its pieces
    pass, where its messages go and their parent header.  Used under :attr:`lock` (the
    kernel sends its output streams from its IO thread, the rest from the main one)."""

    def __init__(self, session: Any, send: Callable[..., Any]) -> None:
        from openprogram.context.secrets import SecretStream

        self.session, self.send, self.redacting = session, send, SecretStream
        self.lock = threading.Lock()
        self.held: dict[tuple[str, str], tuple[Any, Any, Any, dict[str, Any]]] = {}

    def feed(
        self, to: Any, msg_or_type: Any, content: Any, parent: Any, ident: Any
    ) -> tuple[Any, Any] | None:
        """The stream message to send, masked across pieces: ``(msg_or_type, content)``,
        or ``None`` when all of its text is held back."""
        whole = isinstance(msg_or_type, dict)
        body = msg_or_type["content"] if whole else content
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str):
            return msg_or_type, content
        head = _parent_of(msg_or_type, parent)
        key = (str(head.get("msg_id", "")), str(body.get("name", "")))
        entry = self.held.pop(key, None)
        redact = entry[0] if entry else self.redacting()
        shown = redact.feed(text)
        if redact.holding:
            self.held[key] = (redact, to, ident, dict(head))
        if shown == text:
            return msg_or_type, content
        if not shown:
            return None
        body = {**body, "text": shown}
        return ({**msg_or_type, "content": body}, content) if whole else (msg_or_type, body)

    def flush(self, parent: dict[str, Any] | None, kind: str | None = None) -> None:
        """Send what is held back for the execution whose request header is ``parent``
        (before a message of it that is not a stream), or all of it (``None``; and when
        the kernel begins executing another cell: what a thread printed after its cell
        ended)."""
        parent_id = None if parent is None else str(parent.get("msg_id", ""))
        if kind == "status" and parent and parent.get("msg_type") == "execute_request":
            parent_id = None
        for key in [k for k in self.held if parent_id is None or k[0] == parent_id]:
            redact, to, ident, head = self.held.pop(key)
            text = redact.end()
            msg = self.session.msg("stream", {"name": key[1], "text": text}, parent=head)
            self.send(to, msg, ident=ident)


def masked_buffers(buffers: Sequence[Any]) -> list[Any]:
    """``buffers`` with each one that holds a secret replaced by a masked copy (the others
    are passed on as they are: a large array is not copied to be sent)."""
    from openprogram.context.secrets import mask_binary, refresh_secrets

    refresh_secrets()  # a variable set in a cell counts at once
    out = []
    for buffer in buffers:
        try:
            data = memoryview(buffer).tobytes()
        except TypeError:  # not a buffer: the session refuses it in one line
            out.append(buffer)
            continue
        shown = mask_binary(data)
        out.append(buffer if shown is data else shown)
    return out


def _buffers_of(msg: Any) -> Any:
    """The buffers a whole message dict carries (``send`` uses them when none are given;
    ``msg`` is a message type when ``send`` builds the message)."""
    return msg.get("buffers") if isinstance(msg, dict) else None


def _type_of(msg: Any) -> str | None:
    """A message's type (``send`` takes a whole message, or its type to build it)."""
    if isinstance(msg, dict):
        return msg.get("header", {}).get("msg_type")  # type: ignore[no-any-return]
    return msg if isinstance(msg, str) else None


def _parent_of(msg: Any, parent: Any) -> dict[str, Any]:
    """The header of the request a message answers (its cell execution)."""
    head = msg.get("parent_header") if isinstance(msg, dict) else parent
    head = head.get("header", head) if isinstance(head, dict) else None
    return head if isinstance(head, dict) else {}


def _unpacked(session: Any, content: Any) -> Any:
    """A message's content as a value (a relayed message carries it packed already)."""
    if isinstance(content, str):
        content = content.encode("utf8")
    return session.unpack(content) if isinstance(content, bytes) else content


def kernel_sessions(shell: Any) -> list[Any]:
    """The jupyter_client sessions that send ``shell``'s messages (one, usually, shared
    by the kernel, its display publisher, display hook and output streams)."""
    holders = [
        getattr(shell, "kernel", None),
        getattr(shell, "display_pub", None),
        getattr(shell, "displayhook", None),
        sys.stdout,
        sys.stderr,
    ]
    found: list[Any] = []
    for holder in holders:
        session = getattr(holder, "session", None)
        if all(callable(getattr(session, name, None)) for name in WRAPPED) and all(
            s is not session for s in found
        ):
            found.append(session)
    return found


def install(shell: Any) -> int:
    """Mask every message ``shell``'s kernel sends; returns how many sessions it wraps."""
    sessions = kernel_sessions(shell)
    for session in sessions:
        session.serialize = masking_serializer(session)
        session.send = masking_sender(session)
    return len(sessions)


def uninstall(shell: Any) -> None:
    for session in kernel_sessions(shell):
        streams = getattr(session.send, "streams", None)
        if streams is not None:
            with streams.lock:
                streams.flush(None)  # nothing held back is lost
        for name in WRAPPED:
            original = getattr(getattr(session, name), MARK, None)
            if original is not None:
                setattr(session, name, original)
