"""Which remote a notebook or a git repository names, checked before git may contact it:
https/ssh/git/file from a notebook's metadata (a local path only inside the notebook's
repository), http too when typed, never a remote helper or an option; what a notebook
records of a typed remote (no credentials).  The store's ``push``/``pull`` take the URL
and the protocols this resolves (decision 0063).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from openprogram.errors import SyncError
from openprogram.store.session.files import validate_session_id
from openprogram.store.session.remotes import redact_url, url_scheme
from openprogram.store.session.safegit import git_argv, git_env

SAFE_SCHEMES = ("https", "ssh", "git", "file")  # what a notebook's metadata may name
TYPED_SCHEMES = (*SAFE_SCHEMES, "http")  # what a user may type (e.g. a loopback test server)
REMOTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


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


def allow_protocol(*, from_notebook: bool) -> str:
    """``GIT_ALLOW_PROTOCOL`` for a fetch or push (git enforces it, redirects included)."""
    return ":".join(SAFE_SCHEMES if from_notebook else TYPED_SCHEMES)


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
