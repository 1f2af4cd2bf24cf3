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
- A buffer holding a secret (as UTF-8 or JSON text) or a URL's password is sent with it
  overwritten by as many ``*`` (:func:`~openprogram.context.secrets.mask_binary`): a
  binary format around the text keeps its length and offsets.  A secret inside a buffer
  in another encoding (UTF-16, base64, compressed pixels) is not found.

The program's own values stay whole: only what is sent is masked.  Outside a kernel (a
terminal IPython) nothing leaves the process this way, and nothing is installed.
"""

from __future__ import annotations

import sys
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
        return send(stream, msg_or_type, content, parent, ident, buffers, track, header, metadata)

    setattr(masked, MARK, send)
    return masked


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
        for name in WRAPPED:
            original = getattr(getattr(session, name), MARK, None)
            if original is not None:
                setattr(session, name, original)
