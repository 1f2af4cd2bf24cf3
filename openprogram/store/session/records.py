"""The one point where a node becomes the bytes persisted and shown (decision 0014), and
the way back from the live rows a writer left, with who wrote them.

Every node write (the live row, the node file at commit, the live event a view draws) takes
its bytes from :func:`node_record`: one ``to_dict`` + ``orjson.dumps`` + a few ``bytes in
bytes`` tests for the known secrets.  A node holding what JSON cannot, or a secret, is
itself rewritten to the escaped, redacted form, so every in-memory view is what the disk has.
"""

from __future__ import annotations

import functools
import getpass
import os
import re
import socket
import subprocess
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
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
from openprogram.store.session.safegit import git_env

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


# who runs this process: GIT_AUTHOR_NAME/GIT_AUTHOR_EMAIL, then author.*/user.* of their
# *global* git config only (no includes, under safegit.git_env), else the login at the host
# marked "(unverified)"
MAX_PART = 120  # characters of a name or an email kept
_CRUD = re.compile(r"[<>\x00-\x1f\x7f]")  # what git strips or cannot hold in an ident
_KEYS = r"^(user|author)\.(name|email)$"


@dataclass(frozen=True)
class Author:
    name: str
    email: str
    verified: bool = True  # False: guessed from the login and host names

    @property
    def ident(self) -> str:
        """``Name <email>`` as a commit's author line holds it."""
        return f"{self.name} <{self.email}>"

    def to_json(self) -> dict[str, Any]:
        """What a turn node records as ``metadata.author`` (a new dict: the node owns it)."""
        out: dict[str, Any] = {"name": self.name, "email": self.email}
        if not self.verified:
            out["unverified"] = True
        return out


def clean(text: str) -> str:
    """``text`` fit for a git ident: no ``<``, ``>`` or control characters, one line."""
    return " ".join(_CRUD.sub(" ", text).split())[:MAX_PART]


def global_identity() -> dict[str, str]:
    """``user.*``/``author.*`` of the user's global config files as git finds them
    (``GIT_CONFIG_GLOBAL``, else the XDG file then ``~/.gitconfig``: later wins), their
    includes not followed; empty when there are none or git cannot read them."""
    env = git_env()
    for name in ("GIT_CONFIG_GLOBAL", "XDG_CONFIG_HOME"):  # the user's, not git_env's
        env.pop(name, None)
        if os.environ.get(name):
            env[name] = os.environ[name]
    argv = ["git", "config", "--global", "--no-includes", "--get-regexp", _KEYS]
    try:
        result = subprocess.run(
            argv, cwd="/", env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = result.stdout.decode("utf-8", "replace").splitlines()
    return {key.lower(): value for key, _, value in (line.partition(" ") for line in lines)}


@functools.cache
def current_author() -> Author:
    """The person running this process (read once, then cached)."""
    name = clean(os.environ.get("GIT_AUTHOR_NAME", ""))
    email = clean(os.environ.get("GIT_AUTHOR_EMAIL", ""))
    if not (name and email):
        config = global_identity()
        name = name or clean(config.get("author.name") or config.get("user.name") or "")
        email = email or clean(config.get("author.email") or config.get("user.email") or "")
    email = email or clean(os.environ.get("EMAIL", ""))
    if name and email:
        return Author(name, email)
    try:
        login = clean(getpass.getuser()).replace(" ", "") or "user"
    except (OSError, KeyError, ImportError):  # no USER/LOGNAME and no passwd entry
        login = "user"
    host = clean(socket.gethostname()).replace(" ", "") or "localhost"
    return Author(f"{name or login} (unverified)", email or f"{login}@{host}", verified=False)


forget_author = current_author.cache_clear  # read it again at the next call (tests, a new env)


def author_record() -> dict[str, Any]:
    return current_author().to_json()
