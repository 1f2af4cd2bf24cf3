"""The one point where a node becomes the bytes persisted and shown (decision 0014), and
the way back from the live rows a writer left, with who wrote them.

Every node write (the live row, the node file at commit, the live event a view draws) takes
its bytes from :func:`node_record`: one ``to_dict`` + ``orjson.dumps`` + a few ``bytes in
bytes`` tests for the known secrets.  A node holding what JSON cannot, or a secret, is
itself rewritten to the escaped, redacted form, so every in-memory view is what the disk has.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from contextlib import suppress
from typing import Any

from openprogram.context.nodes import (
    AWAITING,
    INTERRUPTED,
    OPEN_STATUSES,
    UNANSWERED,
    Call,
    NodeFormatError,
)
from openprogram.context.secrets import holds_secret, redact_shown
from openprogram.store.session.files import MAX_FILE_BYTES, jsonable, loads, strict_dumps

_OWNER: tuple[int, str] | None = None


def node_record(call: Call) -> bytes:
    """The JSON bytes of ``call`` as persisted (rewriting ``call`` when it had to change)."""
    data = call.to_dict()
    try:
        raw = strict_dumps(data)
        changed = False
    except (TypeError, ValueError):
        data = jsonable(data)
        raw = strict_dumps(data)
        changed = True
    if holds_secret(raw):  # a known secret, a URL's password: the one masking
        data = redact_shown(data)
        raw = strict_dumps(data)
        changed = True
    if changed:
        call.name = data["name"]
        call.input = data["input"]
        call.output = data["output"]
        call.metadata = data["metadata"]
    return raw


def parsed(bodies: Iterable[Any]) -> tuple[list[dict[str, Any]], int]:
    """The records of the live rows ``bodies``, and how many were not JSON objects."""
    records: list[dict[str, Any]] = []
    bad = 0
    for body in bodies:
        record = None
        if isinstance(body, bytes) and len(body) <= MAX_FILE_BYTES:
            with suppress(ValueError):
                record = loads(body)
        if isinstance(record, dict):
            records.append(record)
        else:
            bad += 1
    return records, bad


def recovered(records: Iterable[dict[str, Any]]) -> tuple[list[Call], list[str]]:
    """The nodes of a stopped writer's records, open ones closed (``running`` →
    ``interrupted``, ``awaiting`` → ``unanswered``), and why records were not nodes."""
    calls: list[Call] = []
    reasons: list[str] = []
    for record in records:
        try:
            call = Call.from_dict(record)
        except NodeFormatError as exc:
            reasons.append(str(exc))
            continue
        if call.status in OPEN_STATUSES:
            call.metadata["status"] = UNANSWERED if call.status == AWAITING else INTERRUPTED
            call.metadata["recovered"] = True
        calls.append(call)
    return calls, reasons


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), or None if it is gone
    (a zombie too); "0" where ``/proc`` cannot say (a live pid then counts as its owner)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        fields = data.rsplit(b")", 1)[1].split()
        if fields[0] in (b"Z", b"X"):  # a zombie has ended (and released its locks)
            return None
        return fields[19].decode()
    except FileNotFoundError:
        return None
    except (OSError, IndexError, UnicodeDecodeError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except OSError:
            pass
        return "0"


def own_owner() -> str:
    """``host:pid:start time`` of this process (computed again in a forked child)."""
    global _OWNER
    pid = os.getpid()
    if _OWNER is None or _OWNER[0] != pid:
        _OWNER = (pid, f"{socket.gethostname()}:{pid}:{_start_time(pid) or '0'}")
    return _OWNER[1]


def owner_alive(owner: str) -> bool:
    """Whether the process that wrote ``owner`` still runs (on this host; a row from
    another host is a copied folder's: its writer is not running here)."""
    parts = owner.rsplit(":", 2)
    try:
        pid = int(parts[1]) if len(parts) == 3 and parts[0] == socket.gethostname() else 0
    except ValueError:
        pid = 0
    started = _start_time(pid) if pid > 0 else None
    return started is not None and (started == parts[2] or "0" in (started, parts[2]))
