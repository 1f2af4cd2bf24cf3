"""Where a session travels and what stays home: a remote resolved and checked before git
may contact it (credentials never printed nor stored), what each remote holds of a session
(``sessions delete`` names what it would lose), and replays, whose turns stay in a local
session of their own (decision 0063).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openprogram.errors import RefChanged, RefLocked, SyncError
from openprogram.store.session.files import MAX_ID_LENGTH, loads, read_bytes, validate_session_id
from openprogram.store.session.history import read_ref, update_ref
from openprogram.store.session.safegit import git, git_argv, git_dir_of, git_env

SAFE_SCHEMES = ("https", "ssh", "git", "file")  # what a notebook's metadata may name
TYPED_SCHEMES = (*SAFE_SCHEMES, "http")  # what a user may type (e.g. a loopback test server)
PREFIX = "refs/openprogram/remotes/"  # what each remote is known to hold
REPLAYED_MODEL = "replay"  # the model an llm node answered from the recording records
_SUFFIX = "-replay-"


# -- URLs ----------------------------------------------------------------------------------------
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_SCP = re.compile(r"(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9.-]+:(?!//)[^\s]*")
REMOTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def url_scheme(url: str) -> str:
    """The transport git would use for ``url`` (``ext`` for ``ext::…``, ``file`` for a path)."""
    if "::" in url.split("/", 1)[0]:
        return url.split("::", 1)[0].lower()  # <transport>::<address>: a remote helper
    match = _SCHEME.match(url)
    if match:
        return match.group(1).lower()
    if url.startswith(("/", "./", "../")) or url.endswith(".bundle"):
        return "file"
    if _SCP.fullmatch(url):
        return "ssh"
    return "file"


def check_url(url: str, *, from_notebook: bool) -> str:
    """``url`` if git may contact it (http only typed; never a remote helper or an option)."""
    url = url.strip()
    if not url or url.startswith("-") or any(c in url for c in "\n\r\0"):
        raise SyncError(f"refused remote {redact_url(url)[:60]!r}: not a URL or path")
    scheme = url_scheme(url)
    allowed = SAFE_SCHEMES if from_notebook else TYPED_SCHEMES
    if scheme not in allowed:
        source = "the notebook's metadata names" if from_notebook else "refused"
        raise SyncError(
            f"{source} remote {redact_url(url)!r}: transport {scheme!r} is not allowed "
            f"(only {', '.join(allowed)})"
        )
    return url


# ``scheme://userinfo@`` anywhere in a text (the last ``@`` before the path ends it)
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*)://([^/\s?#'\"]*)@")
_HTTP_SCHEMES = ("http", "https")


def _strip_userinfo(match: re.Match[str]) -> str:
    scheme, userinfo = match.group(1), match.group(2)
    if scheme.lower() in _HTTP_SCHEMES:  # the user name of an http(s) URL is often a token
        return f"{scheme}://"
    return f"{scheme}://{userinfo.split(':', 1)[0]}@"  # ssh://user@: only a password goes


def redact_url(url: str) -> str:
    """``url`` as it may be printed or stored: no password; no user name either for http(s),
    where it is often a token."""
    return _USERINFO.sub(_strip_userinfo, url)


def redact_text(text: str, url: str = "") -> str:
    """``text`` without the credentials of any URL, nor ``url``'s wherever they appear."""
    text = _USERINFO.sub(_strip_userinfo, text)
    match = _USERINFO.match(url) if url else None
    if match is not None:
        from urllib.parse import unquote

        user, _, password = match.group(2).partition(":")
        secret = (user, password) if match.group(1).lower() in _HTTP_SCHEMES else (password,)
        for part in secret:
            for form in {part, unquote(part)}:
                if len(form) >= 4 and form in text:
                    text = text.replace(form, "***")
    return text


def allow_protocol(*, from_notebook: bool) -> str:
    """``GIT_ALLOW_PROTOCOL`` for a fetch or push (git enforces it, redirects included)."""
    return ":".join(SAFE_SCHEMES if from_notebook else TYPED_SCHEMES)


def git_fail(what: str, result: subprocess.CompletedProcess[bytes], url: str = "") -> SyncError:
    """A failed git command's error: its first ``fatal:``/``error:`` line (the last is often
    advice), credentials masked."""
    lines = [" ".join(t.split()) for t in result.stderr.decode(errors="replace").splitlines()]
    lines = [t for t in lines if t]
    said = [t.split(":", 1)[1].strip() for t in lines if t.startswith(("fatal:", "error:"))]
    reason = said[0] if said else lines[-1] if lines else "git failed"
    return SyncError(redact_text(f"{what}: {reason[:300]}", url))


# -- resolving a remote ----------------------------------------------------------------------------
def repository_root(start: Path) -> Path:
    """The folder holding the ``.git`` of the repository containing ``start``, else ``start``."""
    for folder in (start, *start.parents):
        if os.path.lexists(folder / ".git"):
            return folder
    return start


def _local_path(url: str) -> str:
    return url[len("file://") :] if url.lower().startswith("file://") else url


def _recorded_local(url: str, base: Path) -> str:
    """A local remote a notebook's metadata names: refused outside the notebook's repository."""
    root = repository_root(base).resolve()
    target = (root / _local_path(url)).resolve()
    if not target.is_relative_to(root):
        raise SyncError(
            f"the notebook's metadata names the local remote {url!r}, outside the notebook's "
            f"repository {root}: refused (type it to use it, e.g. `%openprogram pull {target}`)"
        )
    return str(target)


def record_remote(url: str, where: str | os.PathLike[str]) -> str:
    """What a notebook records of a typed remote: no credentials, a path relative to its
    repository (a colleague's clone finds it)."""
    if url_scheme(url) != "file":
        return redact_url(url)
    root = repository_root(Path(where).expanduser().resolve()).resolve()
    target = Path(_local_path(url)).resolve()
    return target.relative_to(root).as_posix() if target.is_relative_to(root) else str(target)


def _repo_config(start: Path) -> Path | None:
    """The config file of the git repository containing ``start`` (read, never run)."""
    folder = repository_root(start)
    dot_git = folder / ".git"
    if dot_git.is_dir():
        return dot_git / "config"
    if dot_git.is_file():  # a worktree: "gitdir: <path>", config in the common dir
        text = dot_git.read_text().strip()
        if not text.startswith("gitdir:"):
            return None
        git_dir = (folder / text[len("gitdir:") :].strip()).resolve()
        common = git_dir / "commondir"
        if common.is_file():
            git_dir = (git_dir / common.read_text().strip()).resolve()
        return git_dir / "config"
    return None


def resolve_remote(
    remote: str | None, where: str | os.PathLike[str], *, recorded: str | None = None
) -> tuple[str, str]:
    """The URL and allowed protocols for ``remote`` (a URL, a path, a remote of the git
    repository containing ``where``), else ``recorded`` (the notebook's), else ``origin``."""
    base = Path(where).expanduser().resolve()
    if remote is None and recorded:
        checked = check_url(recorded, from_notebook=True)
        if url_scheme(checked) == "file":
            checked = _recorded_local(checked, base)
        return checked, allow_protocol(from_notebook=True)
    name = remote or "origin"
    if REMOTE_NAME.fullmatch(name) and not (base / name).exists():
        config = _repo_config(base)
        url = None
        if config is not None and config.is_file():
            got = subprocess.run(  # reads one key of that file (no includes), runs nothing
                git_argv("config", "--file", str(config), "--get", f"remote.{name}.url"),
                capture_output=True,
                env=git_env(),
            )
            url = got.stdout.decode().strip() or None
        if url is None:
            where_text = (
                f"the git repository of {base}" if config else f"{base} (not in a git repository)"
            )
            raise SyncError(f"no remote named {name!r} in {where_text}; pass a URL or a path")
        remote = url
    assert remote is not None
    if (
        "://" not in remote
        and ("::" not in remote)
        and (remote.startswith(("/", ".")) or (base / remote).exists())
    ):
        remote = str((base / remote).resolve())
    return check_url(remote, from_notebook=False), allow_protocol(from_notebook=False)


def notebook_session(path: str | os.PathLike[str]) -> tuple[str, str | None]:
    """The session id a notebook names and the remote it records (``metadata.openprogram``)."""
    try:
        data = json.loads(Path(path).read_bytes())
        stored: Mapping[str, Any] = data["metadata"]["openprogram"]
        sid = stored["session_id"]
    except (OSError, ValueError, KeyError, TypeError):
        raise SyncError(f"{path} names no session (metadata.openprogram.session_id)") from None
    remote = stored.get("remote")
    return validate_session_id(sid), remote if isinstance(remote, str) else None


# -- what a remote holds: refs/openprogram/remotes/<hash of the URL without credentials> ----------
def remote_ref(url: str) -> str:
    """The local ref that notes what the remote at ``url`` holds of the session."""
    return PREFIX + hashlib.sha256(redact_url(url).encode()).hexdigest()[:16]


def note_on_remote(repo: Path, url: str, tip: str) -> None:
    """The remote at ``url`` holds commit ``tip`` (a failure to note it fails nothing)."""
    name = remote_ref(url)
    git_dir = git_dir_of(repo)
    try:
        update_ref(git_dir, name, bytes.fromhex(tip), read_ref(git_dir, name))
    except (OSError, ValueError, RefChanged, RefLocked):
        pass


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
    listed = git(repo, "for-each-ref", "--format=%(refname)", PREFIX, check=False).stdout.decode(
        errors="replace"
    )
    known = [line for line in listed.splitlines() if line.startswith(PREFIX)]
    result = git(
        repo, "log", "--format=%ct %s", "refs/heads/main", "--not", *known, "--", check=False
    )
    if result.returncode != 0:  # no commit yet: nothing to lose
        return Unpushed(0, "", 0, bool(known))
    rows = [line.split(" ", 1) for line in result.stdout.decode(errors="replace").splitlines()]
    turns = [row for row in rows if len(row) == 2 and row[1].startswith("turn ")]
    if not turns:
        return Unpushed(0, "", 0, bool(known))
    stamp, summary = turns[0]
    return Unpushed(len(turns), summary, int(stamp) if stamp.isdigit() else 0, bool(known))


def copy_remote_refs(source: Path, target: Path) -> None:
    """What the remotes hold of ``source``, noted in ``target`` too (a notebook copy's)."""
    target_dir = git_dir_of(target)
    listed = git(source, "for-each-ref", "--format=%(refname) %(objectname)", PREFIX, check=False)
    for line in listed.stdout.decode(errors="replace").splitlines():
        name, _, sha = line.partition(" ")
        if not name.startswith(PREFIX) or read_ref(target_dir, name) is not None:
            continue
        try:
            update_ref(target_dir, name, bytes.fromhex(sha), None)
        except (OSError, ValueError, RefChanged, RefLocked):
            pass


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
    live = {
        n.turn
        for n in nodes
        if n.kind == "llm"
        and n.turn in turns
        and n.metadata.get("model") not in (None, REPLAYED_MODEL)
    }
    return [turns[t] for t in sorted(live)]
