"""Running git on a session folder someone else may have written, without running anything
the folder names (hooks, drivers, includes, alternates): :func:`make_safe` before git
touches it, :func:`run_git` with a fixed environment and ``-c`` overrides (decision 0063).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openprogram.errors import CorruptedFile
from openprogram.store.session.files import atomic_write

if TYPE_CHECKING:
    from gitdb.db import GitDB

BRANCH = "main"
QUARANTINE_PREFIX = ".incoming-"  # what a pull or an import receives into, then checks
INCOMING = "refs/openprogram/incoming"  # the ref a fetch names in the quarantine
ACTOR_NAME, ACTOR_EMAIL = "openprogram", "openprogram@localhost"
HEAD_CONTENT = f"ref: refs/heads/{BRANCH}\n".encode()
REPOSITORY_DIRS = ("objects/info", "objects/pack", "refs/heads", "refs/tags")  # a new .git's


def canonical_config() -> bytes:
    """The whole ``.git/config`` of a session: bare (no working tree), no remote stored."""
    return (
        "[core]\n"
        "\trepositoryformatversion = 0\n"
        "\tfilemode = true\n"
        "\tbare = true\n"
        "\thooksPath = /dev/null\n"
        "[gc]\n"
        "\tauto = 0\n"
        "[user]\n"
        f"\tname = {ACTOR_NAME}\n"
        f"\temail = {ACTOR_EMAIL}\n"
    ).encode()


# Keys that can make git run a program (or take parents from a file), harmless on the command
# line (which wins over any config file); the others only come from the config make_safe replaces.
OVERRIDES: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("core.askPass", ""),
    ("core.sshCommand", "ssh"),
    ("core.attributesFile", "/dev/null"),
    ("core.excludesFile", "/dev/null"),
    ("core.commitGraph", "false"),  # objects/info/commit-graph*: never read
    ("sequence.editor", ":"),
    ("log.showSignature", "false"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("push.gpgSign", "false"),
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.program", "false"),
    ("credential.helper", ""),
    ("protocol.ext.allow", "never"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("transfer.fsckObjects", "true"),  # what a fetch or an import receives, fsck'ed by git
)
# kept for a network operation: the user's own ways to authenticate (never a session's)
CREDENTIAL_VARS = ("GIT_ASKPASS", "SSH_ASKPASS", "SSH_AUTH_SOCK", "GIT_SSH_COMMAND")
_CREDENTIAL_KEYS = ("core.askPass", "core.sshCommand", "credential.helper")
_KEPT_VARS = ("PATH", "HOME", "TZ", "LANG", "TMPDIR", "SYSTEMROOT")


def git_env(*, network: str | None = None) -> dict[str, str]:
    """The whole environment of a git subprocess, nothing of the caller's: only ``file://``
    unless ``network`` names the protocols (then the user's credentials)."""
    env = {name: os.environ[name] for name in _KEPT_VARS if name in os.environ}
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_SYSTEM": "/dev/null",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat",
            "PAGER": "cat",
            "GIT_EDITOR": ":",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_PROTOCOL_FROM_USER": "0",
            "GIT_ALLOW_PROTOCOL": network or "file",
            "GIT_OPTIONAL_LOCKS": "0",
            "LC_ALL": "C",
        }
    )
    if network is not None:
        env.update({k: os.environ[k] for k in CREDENTIAL_VARS if k in os.environ})
        global_config = Path(os.environ.get("HOME", "/nonexistent")) / ".gitconfig"
        if global_config.is_file():
            env["GIT_CONFIG_GLOBAL"] = str(global_config)
    return env


def git_argv(*args: str, network: bool = False) -> list[str]:
    """``git`` with the overrides, then ``args`` (``network``: credentials left to the user)."""
    overrides = [
        arg
        for key, value in OVERRIDES
        if not (network and key in _CREDENTIAL_KEYS)
        for arg in ("-c", f"{key}={value}")
    ]
    return ["git", "--no-pager", *overrides, *args]


def git(repo: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[bytes]:
    """:func:`run_git` for sharing: a quarantine (made here) keeps its ``alternates``."""
    return run_git(repo, *args, sanitize=not repo.name.startswith(QUARANTINE_PREFIX), **kw)


def git_dir_of(repo: Path) -> Path:
    """``repo/.git`` for a session folder, ``repo`` itself for a bare repository."""
    dot_git = repo / ".git"
    return dot_git if os.path.lexists(dot_git) else repo


def git_command(
    repo: Path,
    *args: str,
    network: str | None = None,
    sanitize: bool = True,
    env: dict[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of :func:`run_git` (for a caller that streams to git),
    ``env`` added to the fixed environment."""
    git_dir = git_dir_of(repo)
    if sanitize:
        make_safe(git_dir)
    env = git_env(network=network) | (env or {}) | {"GIT_DIR": str(git_dir)}  # no work tree
    return git_argv(*args, network=network is not None), env


def run_git(
    repo: Path,
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    network: str | None = None,
    sanitize: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git args`` on ``repo`` safely (made safe first unless ``sanitize=False``: a
    repository made in this operation), ``GIT_DIR`` fixed, output captured."""
    argv, env = git_command(repo, *args, network=network, sanitize=sanitize, env=env)
    stdin = None if input is not None else subprocess.DEVNULL
    return subprocess.run(
        argv, cwd=repo, env=env, input=input, stdin=stdin, capture_output=True, check=check
    )


# the program a local transport starts on the other repository (git clears our -c there)
REMOTE_SIDE = (
    "git -c core.hooksPath=/dev/null -c core.alternateRefsCommand=true "
    "-c core.alternateRefsPrefixes=refs/openprogram/none -c receive.autogc=false "
    "-c core.fsmonitor=false -c gc.auto=0 -c core.commitGraph=false"
)


def is_real_dir(path: str | Path) -> bool:
    """Whether ``path`` is a directory and not a symlink to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def remove(path: str | Path) -> None:
    """Remove what is at ``path``: a real folder with what it holds, anything else (a
    symlink too: never followed) unlinked."""
    if is_real_dir(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def holds(path: Path, content: bytes) -> bool:
    """Whether ``path`` is a regular file (not followed) holding exactly ``content``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:  # (a FIFO without writer, a directory: not a file)
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, len(content) + 1) == content
    except OSError:
        return False
    finally:
        os.close(fd)


def check_layout(git_dir: Path) -> None:
    """:class:`CorruptedFile` unless ``git_dir``, ``objects`` and ``refs`` are real folders."""
    for part in (git_dir, git_dir / "objects", git_dir / "refs"):
        if not is_real_dir(part):
            raise CorruptedFile(str(part), "not a directory inside the session (refused)")


def _unlink_symlinks(folder: str, depth: int = -1) -> None:
    """Unlink every symlink in ``folder`` and in its real folders ``depth`` levels down
    (-1: every level; a loop, not recursion, however deep)."""
    todo = [(folder, depth)]
    while todo:
        where, left = todo.pop()
        try:
            with os.scandir(where) as entries:
                for entry in entries:
                    if entry.is_symlink():
                        os.unlink(entry.path)
                    elif left and entry.is_dir(follow_symlinks=False):
                        todo.append((entry.path, left - 1))
        except OSError as exc:  # (nested past PATH_MAX: never a ref; nothing of it read)
            raise CorruptedFile(folder, f"cannot be checked ({exc.strerror}): refused") from None


def make_safe(git_dir: Path) -> None:
    """The canonical ``config`` and ``HEAD``; no ``commondir``, alternates, grafts,
    reflogs or symlink among the objects, refs, ``info`` or ``packed-refs`` (git
    would read, write or remove outside the folder, or see a cut history); refused unless
    real folders."""
    check_layout(git_dir)
    _unlink_symlinks(f"{git_dir}/objects", 1)  # fan-out folders, packs, loose objects
    _unlink_symlinks(f"{git_dir}/refs")  # a linked folder: refs read or written elsewhere
    for name in ("info", "packed-refs"):  # (before removing what info/ holds)
        if os.path.islink(git_dir / name):
            os.unlink(git_dir / name)
    for name, content in (("config", canonical_config()), ("HEAD", HEAD_CONTENT)):
        if not holds(git_dir / name, content):  # (rewritten only if not: at every git run)
            atomic_write(git_dir / name, content)
    for rel in (
        "commondir",
        "config.worktree",  # read by git only with an extension the canonical config lacks
        "info/sparse-checkout",  # no working tree: never read, never followed
        "info/grafts",  # parents replaced: a history cut or made up
        "logs",  # reflogs: never ours (bare), git appends to one found, through a symlink too
        "objects/info/alternates",
        "objects/info/http-alternates",
    ):
        if os.path.lexists(git_dir / rel):
            remove(git_dir / rel)


def init_repository(path: Path) -> None:
    """A new, empty session repository (``path/.git``), made without git's template hooks."""
    git_dir = path / ".git"
    for sub in REPOSITORY_DIRS:
        (git_dir / sub).mkdir(parents=True, exist_ok=True)
    (git_dir / "HEAD").write_bytes(HEAD_CONTENT)
    (git_dir / "config").write_bytes(canonical_config())


def free_maps(kept: int = 0) -> None:
    """Unmap gitdb's windows no reader uses and forget the files removed since (a repack's
    packs, a roll-up's indexes: gitdb keeps each one's entry, ~5 KiB a cell, decision 0063);
    nothing done while fewer than ``kept`` files are mapped.  The one reach into gitdb's
    private state: its map manager's ``_fdict`` (path -> its windows, a removed file's list
    left empty), the process's, shared by every thread: a snapshot, then pop (another may
    map meanwhile)."""
    from gitdb.util import mman

    if len(mman._fdict) < kept:
        return
    mman.collect()
    files = mman._fdict
    for gone in [p for p, rl in list(files.items()) if not rl and not os.path.exists(p)]:
        files.pop(gone, None)


def object_db(objects_dir: Path) -> GitDB:
    """A gitdb database on ``objects_dir`` that never reads ``info/alternates``, and unmaps
    the windows of packs a repack removed at each update (:func:`free_maps`)."""
    from gitdb.db import GitDB
    from gitdb.db.loose import LooseObjectDB
    from gitdb.db.pack import PackedDB
    from gitdb.pack import PackEntity

    class NewestPacksFirst(PackedDB):  # type: ignore[misc]
        """gitdb's packs newest first (HEAD's objects are there), none opened to list them."""

        def update_cache(self, force: bool = False) -> bool:
            root = self.root_path()
            mtime = os.stat(root).st_mtime
            if not force and mtime <= getattr(self, "_st_mtime", 0.0):
                return False
            self._st_mtime = mtime
            stamps: dict[str, int] = {}
            with os.scandir(root) as entries:
                for entry in entries:
                    if entry.name.startswith("pack-") and entry.name.endswith(".pack"):
                        with suppress(OSError):  # removed by a maintenance meanwhile
                            stamps[entry.path] = entry.stat().st_mtime_ns
            known = {item[1].pack().path(): item[1] for item in self._entities}
            newest = sorted(stamps, key=stamps.__getitem__, reverse=True)
            entities = [known[path] if path in known else PackEntity(path) for path in newest]
            # hits counted from 0: gitdb re-sorts by hits now and then, the order starts as ours
            self._entities[:] = [[0, e, e.index().sha_to_index] for e in entities]
            return True

    class LocalGitDB(GitDB):  # type: ignore[misc]
        def _set_cache_(self, attr: str) -> Any:
            if attr not in ("_dbs", "_loose_db"):
                return super()._set_cache_(attr)
            loose = LooseObjectDB(self.db_path(""))
            packs = self.db_path("pack")
            self._dbs = [NewestPacksFirst(packs), loose] if os.path.isdir(packs) else [loose]
            self._loose_db = loose
            return None

        def update_cache(self, force: bool = False) -> bool:
            changed = bool(super().update_cache(force))
            free_maps()
            return changed

    return LocalGitDB(str(objects_dir))
