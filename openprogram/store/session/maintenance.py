"""Session maintenance, in a detached process that no turn ever waits for.

Every ``MAINTAIN_EVERY`` commits (counted across processes) and when a commit opens a new
history bucket, but no sooner than ``SPACING`` times the last one's duration after it, the
committing process starts ``python -m openprogram.store.session.maintenance <session>`` in a
new session (``setsid``) and returns at once.  That process, at low priority:

1. repacks the objects, git's geometric repack (:func:`history.repack`);
2. seals up to ``SEALS_PER_MAINTENANCE`` older buckets lacking a valid committed index
   (:mod:`buckets`; computed without the session lock, committed under it in a few ms,
   only for buckets whose tree did not move meanwhile);
3. puts the newest turns' folders on disk whole (a commit writes them to git only), makes
   git's index match HEAD and leaves all but the newest turns out of the working tree
   (:func:`checkout.refresh`), so ``git status`` is clean.

``.state/maintain.lock`` (``flock``) is taken by the spawning process and inherited by the
child, so two maintenances never overlap and whoever wants one finished (tests, a
benchmark, :meth:`Session.maintain`) can wait on it.  Closing a session starts only a
light one (a few git commands and a Python without the package): the new turns' folders
put on disk whole (:mod:`materialise`), ``git read-tree --reset HEAD``, the loose objects
packed.
A process that asks for a maintenance while one is running leaves ``.state/maintain.pending``
and the running one does another round (so a bucket opened meanwhile is still sealed).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from openprogram.store.session import checkout, materialise
from openprogram.store.session.buckets import bucket_trees, seal, sealed_columns
from openprogram.store.session.files import (
    atomic_write,
    is_real_dir,
    open_state_file,
    read_bytes,
)
from openprogram.store.session.history import Repository, repack
from openprogram.store.session.index import BUCKET_INDEX, SEALS_PER_MAINTENANCE
from openprogram.store.session.indexcache import CACHE_DIR
from openprogram.store.session.live import LiveState
from openprogram.store.session.safegit import git_argv, git_env

MAINTAIN_EVERY = 50  # commits between two maintenances
# A maintenance costs a Python start and a few git commands over the session's index: one
# started every 50 commits, or at every new bucket, of a busy writer (a turn in ~5 ms) ran
# nearly back to back, and the writer's turns cost ~1.7-2.4x its first ones.  So a commit
# asks for the next one only once the last one's time has passed SPACING times over
# (maintenances take at most 1/(1 + SPACING) of the time); a pull, an open, a close or
# Session.maintain do not wait.  The packs a long gap leaves are few: the writer starts
# git's repack beside itself (history.REPACK_EVERY).
SPACING = 9.0
# .state/: the earliest time (unix) a commit asks again, and the last one's duration (s)
NEXT_FILE = "maintain.next"
MAX_ROUNDS = 10  # rounds one maintenance process runs while others keep asking for one
STALE_INDEX_LOCK_S = 60.0
SEALED_FILE = "sealed.json"  # .state/: bucket -> tree sha found sealed (not checked again)
# What closing a small session runs: git's index set to HEAD (--reset: keeps skip-worktree
# marks and stat data, never refuses), then the loose objects packed by name (into
# pack-*.pack: gitdb reads no other name, so not `git maintenance run`).
LIGHT = (
    '{python} -I -S {script} "$GIT_WORK_TREE" {argv};'  # new turns' folders put on disk
    "{git} read-tree --reset HEAD;"
    " {git} ls-files -z --deleted --sparse | {git} update-index -z --skip-worktree --stdin;"
    ' find "$GIT_DIR/objects" -mindepth 2 -maxdepth 2 -type f'
    " | sed -n 's|.*/\\([0-9a-f][0-9a-f]\\)/\\([0-9a-f]\\{{38\\}}\\)$|\\1\\2|p'"
    ' | {git} pack-objects -q --non-empty "$GIT_DIR/objects/pack/pack" >/dev/null'
    " && {git} prune-packed"
)


def lock_path(root: Path) -> Path:
    return root / ".state" / "maintain.lock"


def pending_path(root: Path) -> Path:
    return root / ".state" / "maintain.pending"


def _try_lock(root: Path, *, wait: bool) -> int | None:
    fd = open_state_file(lock_path(root), os.O_RDWR)  # a symlink there: replaced
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def spawn(root: Path, *, index_only: bool = False, again: bool = True) -> bool:
    """Start a detached maintenance of the session at ``root`` unless one is running
    (``index_only``: only ``git read-tree --reset HEAD`` and pack the loose objects); returns
    at once, never waits.  One running does another round for this request unless
    ``again`` is False (a commit's: it asks again once the spacing has passed)."""
    fd = _try_lock(root, wait=False)
    if fd is None:  # one is running: it does another round when it sees this
        if again:
            try:
                atomic_write(pending_path(root), b"")
            except OSError:
                pass
        return False
    try:
        if index_only:  # a few git commands, no Python start: a session put to rest
            script = LIGHT.format(
                git=shlex.join(git_argv()),
                python=shlex.quote(sys.executable),
                script=shlex.quote(materialise.__file__),
                argv=shlex.quote(json.dumps(git_argv())),
            )
            argv = ["sh", "-c", script]
            env = git_env({"GIT_DIR": str(root / ".git"), "GIT_WORK_TREE": str(root)})
        else:
            argv = [sys.executable, "-m", "openprogram.store.session.maintenance", str(root)]
            env = dict(os.environ)
        subprocess.Popen(
            argv,
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(fd,),  # the child holds the maintenance lock until it exits
            start_new_session=True,
        )
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def wait_for(root: Path) -> None:
    """Return once no maintenance of the session at ``root`` is running or asked for: a
    request left while the last one was finishing is carried out here."""
    fd = _try_lock(root, wait=True)
    if fd is not None:
        try:
            if os.path.lexists(pending_path(root)):
                _rounds(root)
        finally:
            os.close(fd)


def run_now(root: Path) -> None:
    """Maintenance in this process, waiting for a running one first."""
    fd = _try_lock(root, wait=True)
    assert fd is not None
    try:
        run(root)
    finally:
        os.close(fd)


def run(root: Path) -> None:
    """The three steps of the module doc (the caller holds the maintenance lock)."""
    index_lock = root / ".git" / "index.lock"
    try:  # debris of a killed git: nothing else in a session uses git's index
        if time.time() - index_lock.stat().st_mtime > STALE_INDEX_LOCK_S:
            index_lock.unlink()
    except FileNotFoundError:
        pass
    repack(root / ".git")
    repo = Repository(root)
    try:
        seal_old_buckets(root, repo)
        checkout.refresh(root, repo)
    finally:
        repo.close()


def seal_old_buckets(root: Path, repo: Repository) -> list[str]:
    """Seal up to ``SEALS_PER_MAINTENANCE`` buckets (all but the newest), newest first."""
    known_path = root / ".state" / SEALED_FILE
    try:
        known = json.loads(known_path.read_bytes())
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    trees = bucket_trees(repo)
    payloads: dict[str, tuple[bytes, bytes]] = {}  # bucket -> (tree, index content)
    for name in sorted(trees, key=int, reverse=True)[1:]:
        tree = trees[name]
        if known.get(name) == tree.hex():
            continue
        payload = seal(repo, root, name, tree)
        if payload is None:  # sealed already, or cannot be: do not look again at this tree
            if sealed_columns(repo, root, name, tree, None) is not None:
                known[name] = tree.hex()
            continue
        payloads[name] = (tree, payload)
        if len(payloads) >= SEALS_PER_MAINTENANCE:
            break
    sealed: list[str] = []
    if payloads:
        live = LiveState(root / ".state")
        repo.lock_held = live.lock.held
        try:
            with live.lock:  # the session's write lock, held for the commit only: a few ms
                now = bucket_trees(repo)
                files: dict[str, bytes | None] = {}
                for name, (tree, payload) in payloads.items():
                    if now.get(name) == tree:  # nobody rewrote it meanwhile
                        rel = f"history/{name}/{BUCKET_INDEX}"
                        if is_real_dir(root / "history" / name):  # else: left out already
                            atomic_write(root / rel, payload)
                        files[rel] = payload
                        sealed.append(name)
                if files:
                    repo.commit(files, f"index of history bucket(s) {', '.join(sorted(sealed))}")
                    after = bucket_trees(repo)
                    known.update({name: after[name].hex() for name in sealed if name in after})
        finally:
            live.close()
    try:
        atomic_write(known_path, json.dumps(known).encode())
    except OSError:
        pass
    current = bucket_trees(repo)
    for name, tree in current.items():  # a sealed bucket loads from its committed index:
        if known.get(name) == tree.hex():  # its local cache (~75 KB) is not read again
            (root / ".state" / CACHE_DIR / f"{name}.json").unlink(missing_ok=True)
    return sealed


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    try:
        os.nice(10)
    except OSError:
        pass
    # the maintenance lock was inherited from the process that started this one; commits
    # made meanwhile may have asked for a maintenance (a new bucket) and found it running
    _rounds(root)
    return 0


def _rounds(root: Path) -> None:
    """Maintenance rounds while someone keeps asking for one (the caller holds the lock),
    then when the commit count may ask for the next (``SPACING``)."""
    pending = pending_path(root)
    _due_after(root, (1 + SPACING) * _last_took(root))  # meanwhile: as if it took as long
    started = time.monotonic()
    for _round in range(MAX_ROUNDS):
        pending.unlink(missing_ok=True)
        run(root)
        if not os.path.lexists(pending):
            break
    took = time.monotonic() - started
    _due_after(root, SPACING * took, took=took)


def _due_after(root: Path, gap: float, took: float | None = None) -> None:
    """Write when commits may ask for the next maintenance (and how long the last took)."""
    took = _last_took(root) if took is None else took
    try:
        atomic_write(root / ".state" / NEXT_FILE, f"{time.time() + gap:.3f} {took:.3f}".encode())
    except OSError:
        pass


def _fields(root: Path) -> list[float]:
    try:
        return [float(f) for f in read_bytes(str(root / ".state" / NEXT_FILE), 64).split()]
    except (OSError, ValueError):  # none yet, or not ours
        return []


def _last_took(root: Path) -> float:
    fields = _fields(root)
    return fields[1] if len(fields) > 1 else 0.0


def next_due(root: Path) -> float:
    """The earliest time (unix) the commit count may ask for a maintenance (0: at once)."""
    fields = _fields(root)
    return fields[0] if fields else 0.0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
