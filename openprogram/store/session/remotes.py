"""Where a session is pushed to and pulled from: resolving ``REMOTE`` (a URL, a path, or a
remote of the git repository holding the notebook) and reading what a notebook records.

Only reads: the project's git config is read as a file (no includes, nothing run), and a
URL is checked (:func:`syncrules.check_url`) before git may contact it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from openprogram.store.session.ids import validate_session_id
from openprogram.store.session.safegit import git_argv, git_env
from openprogram.store.session.syncrules import (
    REMOTE_NAME,
    SyncError,
    allow_protocol,
    check_url,
    redact_url,
    url_scheme,
)

__all__ = ["notebook_session", "record_remote", "resolve_remote"]


def repository_root(start: Path) -> Path:
    """The work tree of the git repository containing ``start`` (the folder holding its
    ``.git``), else ``start`` itself: what a local path in a notebook's metadata is
    relative to, and may not leave."""
    for folder in (start, *start.parents):
        if os.path.lexists(folder / ".git"):
            return folder
    return start


def _local_path(url: str) -> str:
    return url[len("file://") :] if url.lower().startswith("file://") else url


def _recorded_local(url: str, base: Path) -> str:
    """A local remote a notebook's metadata names, resolved against the notebook's
    repository (never the session folder git runs in), refused if it leads outside."""
    root = repository_root(base).resolve()
    target = (root / _local_path(url)).resolve()
    if not target.is_relative_to(root):
        raise SyncError(
            f"the notebook's metadata names the local remote {url!r}, outside the notebook's "
            f"repository {root}: refused (type it to use it, e.g. `%openprogram pull {target}`)"
        )
    return str(target)


def record_remote(url: str, where: str | os.PathLike[str]) -> str:
    """What a notebook remembers of a remote the user typed: a URL without credentials,
    or a local path relative to the notebook's repository (so a colleague's clone finds
    it where theirs is)."""
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
    """The URL to fetch from or push to, and the protocols git may use for it.

    ``remote`` (typed by the user) is a URL, a path, or the name of a remote of the git
    repository containing ``where`` (the notebook's folder); without it, ``recorded`` (a URL
    from the notebook's metadata: https/ssh/git/file only), else that repository's
    ``origin``.
    """
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
