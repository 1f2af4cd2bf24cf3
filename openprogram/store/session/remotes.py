"""Remotes and what stays home: a URL's transport and its credentials (never printed nor
stored), what each remote holds of a session (``sessions delete`` names what it would
lose), and replays, whose turns stay in a local session of their own (decision 0063;
which remote a notebook names: :mod:`openprogram.sharing`).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openprogram.context.secrets import strip_url_credentials
from openprogram.errors import SyncError
from openprogram.store.session.files import MAX_ID_LENGTH, loads, read_bytes, validate_session_id
from openprogram.store.session.history import MAIN_REF, read_ref
from openprogram.store.session.safegit import git, git_dir_of

PREFIX = "refs/openprogram/remotes/"  # what each remote is known to hold
_RECORDED = (None, "replay")  # an llm node's model unless answered live (replay: the provider)
_SUFFIX = "-replay-"


# -- URLs ----------------------------------------------------------------------------------------
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_SCP = re.compile(r"(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:(?!//)[^\s]*")


def url_scheme(url: str) -> str:
    """The transport git would use for ``url`` (``ext`` for ``ext::…``, ``file`` for a path)."""
    if "::" in url.split("/", 1)[0]:
        return url.split("::", 1)[0].lower()  # <transport>::<address>: a remote helper
    match = _SCHEME.match(url)
    if match:
        return match.group(1).lower()
    path = url.startswith(("/", "./", "../")) or url.endswith(".bundle")
    return "ssh" if _SCP.fullmatch(url) and not path else "file"


redact_url = strip_url_credentials  # no password nor http(s) user name in a URL or message


def git_fail(what: str, result: subprocess.CompletedProcess[bytes], url: str = "") -> SyncError:
    """A failed git command's error: its first ``fatal:``/``error:`` line (the last is often
    advice), credentials masked."""
    lines = [" ".join(t.split()) for t in result.stderr.decode(errors="replace").splitlines()]
    lines = [t for t in lines if t]
    said = [t.split(":", 1)[1].strip() for t in lines if t.startswith(("fatal:", "error:"))]
    reason = said[0] if said else lines[-1] if lines else "git failed"
    return SyncError(redact_url(f"{what}: {reason[:300]}", url))


# -- what a remote holds: refs/openprogram/remotes/<hash of the URL without credentials> ----------
def note_on_remote(repo: Path, url: str, tip: str) -> None:
    """The remote at ``url`` holds commit ``tip`` (a failure to note it fails nothing)."""
    ref = PREFIX + hashlib.sha256(redact_url(url).encode()).hexdigest()[:16]
    git(repo, "update-ref", ref, tip, check=False)


@dataclass(frozen=True)
class Unpushed:
    """The turns of a session's ``main`` that no remote is known to hold."""

    turns: int  # commits of turns ("turn N: …")
    newest: str  # the newest one's summary ("turn 7: [3] triage(...)"), or ""
    when: int  # its commit time, seconds since the epoch (0: none)
    ever_pushed: bool  # any remote known at all

    def describe(self) -> str:
        """``3 turns not pushed (never pushed; newest: turn 7: …, 2026-12-06 04:10)``."""
        where = "" if self.ever_pushed else "never pushed; "
        plural = "s" if self.turns != 1 else ""
        stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.when)) if self.when else "?"
        return f"{self.turns} turn{plural} not pushed ({where}newest: {self.newest}, {stamp})"


def unpushed_turns(repo: Path) -> Unpushed:
    """The turn commits reachable from ``main`` and from no remote ref (one ``git log``)."""
    ever_pushed = bool(git(repo, "for-each-ref", "--count=1", PREFIX, check=False).stdout)
    log = git(
        repo, "log", "--format=%ct %s", MAIN_REF, "--not", f"--glob={PREFIX}*", "--", check=False
    )
    rows = [line.split(" ", 1) for line in log.stdout.decode(errors="replace").splitlines()]
    turns = [row for row in rows if len(row) == 2 and row[1].startswith("turn ")]
    stamp, summary = turns[0] if turns else ("0", "")  # (no commit yet: nothing to lose)
    return Unpushed(len(turns), summary, int(stamp) if stamp.isdigit() else 0, ever_pushed)


def copy_remote_refs(source: Path, target: Path) -> None:
    """What the remotes hold of ``source``, noted in ``target`` too (a notebook copy's),
    where ``target`` notes nothing of that remote yet."""
    listed = git(source, "for-each-ref", "--format=%(refname) %(objectname)", PREFIX, check=False)
    moves = [
        f"create {line}\n"
        for line in listed.stdout.decode(errors="replace").splitlines()
        if line.startswith(PREFIX) and read_ref(git_dir_of(target), line.split(" ")[0]) is None
    ]
    if moves:
        git(target, "update-ref", "--stdin", input="".join(moves).encode(), check=False)


# -- replays ---------------------------------------------------------------------------------------
REPLAY_OF = "replay_of"  # meta.json: the session a replay session is a replay of


def replay_of(meta: dict[str, Any]) -> str | None:
    """The session a session is a replay of (its ``meta.json``), or None."""
    found = meta.get(REPLAY_OF)
    return found if isinstance(found, str) and found else None


def refuse_replay_push(session_id: str, meta: dict[str, Any], with_replays: bool) -> None:
    """A replay session is pushed only when asked: raise :class:`SyncError` otherwise."""
    source = replay_of(meta)
    if source is not None and not with_replays:
        raise SyncError(
            f"not pushed: session {session_id} is a replay of session {source} (made by "
            "`openprogram run --replay`, kept on this machine); `openprogram sessions push "
            f"{session_id} --with-replays` sends it as a session of its own"
        )


def looks_like_replay(session_id: str) -> bool:
    """Whether ``session_id`` has the shape :func:`replay_id` gives (its session may be on
    another machine: its ``meta.json`` cannot be asked)."""
    return re.search(f"{_SUFFIX}[0-9a-f]{{8}}$", session_id) is not None


def replay_id(source_id: str) -> str:
    """A fresh id for a replay of ``source_id``: ``<source>-replay-<8 hex>``."""
    tail = f"{_SUFFIX}{secrets.token_hex(4)}"
    return validate_session_id(f"{source_id[: MAX_ID_LENGTH - len(tail)]}{tail}")


def local_replays(root: Path, source_id: str) -> list[str]:
    """The replay sessions of ``source_id`` in the sessions folder ``root``, oldest first."""
    prefix = replay_id(source_id).rsplit(_SUFFIX, 1)[0] + _SUFFIX
    found: list[tuple[float, str]] = []
    for folder in root.glob(f"{prefix}*") if root.is_dir() else ():
        try:
            meta = loads(read_bytes(str(folder / "meta.json"), 1 << 20))
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and replay_of(meta) == source_id:
            created = meta.get("created_at")
            found.append((created if isinstance(created, int | float) else 0.0, folder.name))
    return [name for _, name in sorted(found)]


def live_turns(nodes: list[Any]) -> list[Any]:
    """The replay turns of ``nodes`` a provider answered live (an llm node of another model
    than the recording's)."""
    turns = {n.turn: n for n in nodes if n.kind == "turn" and n.metadata.get(REPLAY_OF)}
    live = {n.turn for n in nodes if n.kind == "llm" and n.metadata.get("model") not in _RECORDED}
    return [turns[t] for t in sorted(live & turns.keys())]
