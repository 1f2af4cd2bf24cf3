"""Running git on a session folder someone else may have written, without running anything
the folder names.

A session folder can come from anyone (a copy, a clone, a shared notebook's session), and
its ``.git`` can name programs git would run: hooks, ``core.hooksPath``, ``core.fsmonitor``,
``gpg.program`` with ``log.showSignature``, pagers, external diffs, filters and textconv
drivers (bound to paths by a committed ``.gitattributes``), ``include.path`` pulling in any
file, ``objects/info/alternates`` and ``commondir`` pointing outside the folder.  One
mechanism covers all of them:

* :func:`make_safe` is called before git touches a session: ``.git/config`` becomes the
  project's canonical config (git always reads the repository's config, so that is the only
  way to drop an ``include.path`` or a filter driver), ``alternates``/``commondir`` are
  removed and a ``.git`` whose core parts are symlinks is refused.
* :func:`run_git` (the only way the project starts git) runs it with :func:`git_env` — no
  system or global config, no variables from the caller's environment — and ``-c``
  overrides that switch off every config key able to run a program, in case the repository
  config changed between :func:`make_safe` and the run.
* The pure-Python object reads (:func:`object_db`) never look at ``alternates``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openprogram.errors import CorruptedFile

if TYPE_CHECKING:
    from gitdb.db import GitDB

BRANCH = "main"
QUARANTINE_PREFIX = ".incoming-"  # what a pull or an import receives into, then checks
INCOMING = "refs/openprogram/incoming"  # the ref a fetch names in the quarantine
ACTOR_NAME, ACTOR_EMAIL = "openprogram", "openprogram@localhost"
HEAD_CONTENT = f"ref: refs/heads/{BRANCH}\n".encode()


def canonical_config() -> bytes:
    """The whole ``.git/config`` of a session (remotes are passed as URLs, never stored).
    Bare: a session has no working tree (its nodes are read from git), so ``git status``
    in its folder lists no file as deleted; ``git log`` and ``git show`` see every turn."""
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


# Config keys that can make git run a program, set to harmless values on the command line
# (which wins over any config file).  Keys without a harmless value (``diff.external``,
# ``core.alternateRefsCommand``, drivers named by ``.gitattributes``…) can only come from the
# repository config, which :func:`make_safe` replaces; commands that diff pass
# ``--no-ext-diff --no-textconv`` as well.
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
# git's own ways to authenticate, kept for a network operation (push, pull): the user's
# credential helpers and ssh command come from their global config, never from a session's
CREDENTIAL_VARS = ("GIT_ASKPASS", "SSH_ASKPASS", "SSH_AUTH_SOCK", "GIT_SSH_COMMAND")
_CREDENTIAL_KEYS = ("core.askPass", "core.sshCommand", "credential.helper")
_KEPT_VARS = ("PATH", "HOME", "TZ", "LANG", "TMPDIR", "SYSTEMROOT")


def git_env(
    extra: Mapping[str, str] | None = None, *, network: str | None = None
) -> dict[str, str]:
    """The whole environment of a git subprocess: a few neutral variables of ours, no
    ``GIT_*`` (nor pager, editor, askpass, ssh command) from the caller's environment unless
    ``extra`` passes it explicitly.  Only the ``file`` protocol is allowed, unless
    ``network`` names the allowed protocols (``"https:ssh"``…): then the user's global git
    config and :data:`CREDENTIAL_VARS` are kept, so their own credentials work."""
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
    if extra:
        env.update(extra)
    return env


def git_argv(*args: str, network: bool = False) -> list[str]:
    """``git`` with the overrides, then ``args`` (for :func:`run_git` and shell scripts);
    ``network`` leaves the credential keys to the user's global config."""
    overrides = [
        arg
        for key, value in OVERRIDES
        if not (network and key in _CREDENTIAL_KEYS)
        for arg in ("-c", f"{key}={value}")
    ]
    return ["git", "--no-pager", *overrides, *args]


def git(
    repo: Path,
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    network: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """:func:`run_git` for sharing: ``network`` (the allowed protocols) also lets git use
    the user's own ways to authenticate; a quarantine (:data:`QUARANTINE_PREFIX`, made by
    this process) keeps its ``alternates``, which borrow the session's objects."""
    quarantine = repo.name.startswith(QUARANTINE_PREFIX)
    return run_git(repo, *args, input=input, check=check, network=network, sanitize=not quarantine)


def git_dir_of(repo: Path) -> Path:
    """``repo/.git`` for a session folder, ``repo`` itself for a bare repository."""
    dot_git = repo / ".git"
    return dot_git if os.path.lexists(dot_git) else repo


def git_command(
    repo: Path,
    *args: str,
    env_extra: Mapping[str, str] | None = None,
    network: str | None = None,
    sanitize: bool = True,
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment :func:`run_git` runs ``git args`` on ``repo`` with (for a
    caller that streams to git, such as ``index-pack``); makes ``repo`` safe first."""
    git_dir = git_dir_of(repo)
    if sanitize:
        make_safe(git_dir)
    env = {"GIT_DIR": str(git_dir)}  # no work tree: a session has none
    if env_extra:
        env.update(env_extra)
    return git_argv(*args, network=network is not None), git_env(env, network=network)


def run_git(
    repo: Path,
    *args: str,
    input: bytes | None = None,
    check: bool = True,
    timeout: float | None = None,
    env_extra: Mapping[str, str] | None = None,
    network: str | None = None,
    sanitize: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git args`` on ``repo`` (a session folder or a bare repository) safely: the
    repository is made safe first (:func:`make_safe`; ``sanitize=False`` only for a
    repository the project made itself in this operation, such as a quarantine borrowing a
    session's objects through ``alternates``), then git runs with :func:`git_env`, the
    overrides, and ``GIT_DIR`` fixed to ``repo``'s (no discovery of an enclosing
    repository, no work tree).  ``network``: the protocols a fetch or push may use.  Output is
    captured; ``check`` raises ``CalledProcessError``."""
    argv, env = git_command(repo, *args, env_extra=env_extra, network=network, sanitize=sanitize)
    return subprocess.run(
        argv,
        cwd=repo,
        env=env,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        check=check,
        timeout=timeout,
    )


# What the other side of a local transport must not run.  For a path or ``file://``
# remote, git starts ``git-receive-pack``/``git-upload-pack`` itself, on the *other*
# repository, with that repository's config and hooks, and without passing our ``-c``
# overrides on (they travel in ``GIT_CONFIG_PARAMETERS``, which git clears for a local
# transport).  So the program git starts there is named by us, with the overrides that
# matter on that side: no hooks (``pre-receive``, ``update``, ``post-receive``,
# ``post-update``, ``reference-transaction``, ``proc-receive``, ``push-to-checkout``), no
# ``core.alternateRefsCommand``, no automatic gc.  Over ssh/http/git the server decides.
REMOTE_SIDE = (
    "git -c core.hooksPath=/dev/null -c core.alternateRefsCommand=true "
    "-c core.alternateRefsPrefixes=refs/openprogram/none -c receive.autogc=false "
    "-c core.fsmonitor=false -c gc.auto=0"
)


def local_transport_options(*, push: bool) -> list[str]:
    """The options of ``git push``/``git fetch`` to a local repository that name the
    program run on its side (:data:`REMOTE_SIDE`)."""
    if push:
        return [f"--receive-pack={REMOTE_SIDE} receive-pack"]
    return [f"--upload-pack={REMOTE_SIDE} upload-pack"]


def _is_real_dir(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    import stat

    return stat.S_ISDIR(st.st_mode)


def _replace_if_different(path: Path, content: bytes) -> None:
    current = None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # missing, or a symlink (ELOOP): replace the link itself
        pass
    else:
        try:
            current = os.read(fd, len(content) + 1)
        except OSError:  # a directory, a FIFO without writer…: replaced (or refused below)
            pass
        finally:
            os.close(fd)
    if current == content:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.safe.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, content)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except OSError as exc:
        os.unlink(tmp)
        raise CorruptedFile(str(path), f"cannot be replaced: {exc.strerror}") from exc


def check_layout(git_dir: Path) -> None:
    """Raise :class:`CorruptedFile` unless ``git_dir``, its ``objects`` and ``refs`` are
    real directories (not symlinks, not a ``gitdir:`` file): git would otherwise read and
    write another repository's files."""
    for part in (git_dir, git_dir / "objects", git_dir / "refs"):
        if not _is_real_dir(part):
            raise CorruptedFile(str(part), "not a directory inside the session (refused)")


def make_safe(git_dir: Path) -> None:
    """Make a repository safe for git to open (a few syscalls when it is already safe).

    ``config`` is replaced by :func:`canonical_config` when it differs, ``HEAD`` by
    ``ref: refs/heads/main``; ``commondir``, ``config.worktree``, ``objects/info/alternates``
    and ``http-alternates`` (which make git read another repository) are removed, and so are
    symlinks among the object folders (objects would be written through them).  A ``.git``,
    ``objects`` or ``refs`` that is not a real directory (a symlink, a ``gitdir:`` file)
    raises :class:`CorruptedFile`: it would make git work on files outside the folder.
    """
    check_layout(git_dir)
    with os.scandir(git_dir / "objects") as entries:  # fan-out folders linked elsewhere
        for entry in entries:
            if entry.is_symlink():
                os.unlink(entry.path)
    _replace_if_different(git_dir / "config", canonical_config())
    _replace_if_different(git_dir / "HEAD", HEAD_CONTENT)
    for rel in (
        "commondir",
        "config.worktree",  # read by git only with an extension the canonical config lacks
        "info/sparse-checkout",  # no working tree: never read, never followed
        "objects/info/alternates",
        "objects/info/http-alternates",
    ):
        target = git_dir / rel
        if os.path.lexists(target):
            if _is_real_dir(target):
                import shutil

                shutil.rmtree(target)
            else:
                os.unlink(target)


def init_repository(path: Path) -> None:
    """A new, empty session repository (``path/.git``) with the canonical config, made
    without running git (and without its template hooks)."""
    git_dir = path / ".git"
    for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags"):
        (git_dir / sub).mkdir(parents=True, exist_ok=True)
    (git_dir / "HEAD").write_bytes(HEAD_CONTENT)
    (git_dir / "config").write_bytes(canonical_config())


def object_db(objects_dir: Path) -> GitDB:
    """A gitdb object database on ``objects_dir`` (loose objects and packs) that never
    reads ``info/alternates``: objects outside the folder are not the session's.

    When it looks at the packs again (:meth:`update_cache`), the mapped windows no pack in
    use holds are unmapped: gitdb drops the packs a maintenance removed, but its window
    manager keeps their windows (deleted files, resident memory) until its limits — a
    kernel that commits a pack per turn kept ~5 KiB of them per cell."""
    from gitdb.db import GitDB
    from gitdb.db.loose import LooseObjectDB
    from gitdb.db.pack import PackedDB
    from gitdb.pack import PackEntity
    from gitdb.util import mman

    class NewestPacksFirst(PackedDB):  # type: ignore[misc]
        """gitdb's list of packs, newest first, and no pack opened to make it.

        gitdb tries its packs in the order of their hits — all none in a new process: the
        listing's order, on ext4 a hash order — and reads each new pack's header to rank
        it by size.  A session has a pack per commit until a maintenance merges them, and
        HEAD, its trees and the newest turns are in the newest pack: ranked by mtime, a
        read of HEAD opens one pack, not half of them (and listing 50 packs opens none)."""

        def update_cache(self, force: bool = False) -> bool:
            root = self.root_path()
            mtime = os.stat(root).st_mtime
            if not force and mtime <= getattr(self, "_st_mtime", 0.0):
                return False
            self._st_mtime = mtime
            stamps: dict[str, int] = {}
            for name in os.listdir(root):
                if name.startswith("pack-") and name.endswith(".pack"):
                    path = os.path.join(root, name)
                    try:
                        stamps[path] = os.stat(path).st_mtime_ns
                    except OSError:  # removed by a maintenance meanwhile
                        continue
            known = {item[1].pack().path(): item for item in self._entities}
            listed = []
            for path in sorted(stamps, key=stamps.__getitem__, reverse=True):
                item = known.get(path)
                if item is None:
                    entity = PackEntity(path)
                    item = [0, entity, entity.index().sha_to_index]
                item[0] = 0  # gitdb re-sorts by hits now and then: the order starts as ours
                listed.append(item)
            self._entities[:] = listed
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
            mman.collect()
            files = mman._fdict  # path -> its windows; a removed pack's list stays, empty
            # the window manager is shared by every thread's database: take a snapshot (one C
            # call under the GIL) and drop entries with pop, another thread may map meanwhile
            for gone in [p for p, rl in list(files.items()) if not rl and not os.path.exists(p)]:
                files.pop(gone, None)
            return changed

    return LocalGitDB(str(objects_dir))
