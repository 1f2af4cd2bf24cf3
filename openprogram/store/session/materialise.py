"""Turn folders put into the working tree whole, never a file at a time.

A commit writes its nodes to git only (one pack); the node files of the newest turns come
to disk later, here, in the detached maintenance: each missing turn folder is written in a
staging folder under ``.state`` and renamed into ``history/<bucket>/`` under the session
lock, after checking that HEAD still has that folder's tree.  A reader sees no folder (and
reads the nodes from git) or the whole folder with every file complete: git's own
``checkout-index`` writes a file in place, so a reader could open it empty.  A commit
rewrites a node file only in a folder already on disk (atomically), and holds the same
lock, so a folder renamed in is never older than HEAD.

Standard library only: the light maintenance of a closing session runs this file by path
(``python -I -S materialise.py <session> <git argv as JSON>``) without importing the
package (its start costs a fraction of the package's).  Nothing is followed through a
symlink; a folder whose tree holds anything but plain files with plain names is left in git.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable

# git(args, input) -> stdout, raising on failure
Git = Callable[[list[str], bytes | None], bytes]
TURN_FOLDER = re.compile(r"history/[0-9]{4,}/[0-9]{6,}")
FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}")
PLAIN_MODES = (b"100644", b"100755")
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _real_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _listing(git: Git, commit: str, folders: Iterable[str]) -> dict[str, tuple[str, dict]]:
    """Folder -> (its tree sha, name -> blob sha) in ``commit``, for the folders holding
    plain files only."""
    wanted = sorted(folders)
    if not wanted:
        return {}
    out = git(["ls-tree", "-r", "-t", "-z", "--full-tree", commit, "--", *wanted], None)
    trees: dict[str, str] = {}
    files: dict[str, dict[str, str]] = {}
    bad: set[str] = set()
    for item in out.split(b"\0"):
        info, _, raw = item.partition(b"\t")
        parts = info.split()
        if len(parts) != 3:
            continue
        path = raw.decode("utf-8", "surrogateescape")
        folder, _, name = path.rpartition("/")
        if path in wanted:
            if parts[1] == b"tree":
                trees[path] = parts[2].decode()
        elif folder in wanted:
            if parts[0] in PLAIN_MODES and parts[1] == b"blob" and FILE_NAME.fullmatch(name):
                files.setdefault(folder, {})[name] = parts[2].decode()
            else:
                bad.add(folder)
        elif any(path.startswith(f + "/") for f in wanted):
            bad.add("/".join(path.split("/")[:3]))
    return {f: (trees[f], files.get(f, {})) for f in trees if f not in bad}


def _blobs(git: Git, shas: list[str]) -> dict[str, bytes]:
    out = git(["cat-file", "--batch"], b"".join(s.encode() + b"\n" for s in shas))
    got: dict[str, bytes] = {}
    pos = 0
    for _sha in shas:
        eol = out.find(b"\n", pos)
        if eol < 0:
            break
        header = out[pos:eol].split(b" ")
        pos = eol + 1
        if len(header) == 3 and header[1] == b"blob":
            size = int(header[2])
            got[header[0].decode()] = out[pos : pos + size]
            pos += size + 1
    return got


def _head(root: str, git: Git) -> str:
    """The commit the session's HEAD names (read from the ref file when it is loose)."""
    try:
        with open(f"{root}/.git/refs/heads/main", "rb") as f:
            sha = f.read(64).strip().decode()
        if re.fullmatch(r"[0-9a-f]{40}", sha):
            return sha
    except OSError:
        pass
    return git(["rev-parse", "-q", "--verify", "HEAD^{commit}"], None).strip().decode()


def missing(root: str, folders: Iterable[str]) -> list[str]:
    """Those of ``folders`` (turn folders, ``history/<bucket>/<turn>``) that are not real
    directories on disk (missing, or a symlink: replaced, never followed)."""
    return [f for f in folders if TURN_FOLDER.fullmatch(f) and not _real_dir(f"{root}/{f}")]


def _make_dir(path: str) -> bool:
    """``path`` as a real directory (a symlink there replaced); False when a file is there."""
    if os.path.islink(path):
        os.unlink(path)
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    return _real_dir(path)


def materialise(root: str, git: Git, commit: str, folders: Iterable[str]) -> list[str]:
    """Write those of ``folders`` that are missing on disk from ``commit``, whole; returns
    the folders written.  Nothing is written where a folder on the way is not a real
    directory, nor a folder HEAD no longer has as it was in ``commit``."""
    state = f"{root}/.state"
    todo = missing(root, folders)
    if not todo or not _real_dir(state):
        return []
    listing = _listing(git, commit, todo)
    if not listing:
        return []
    contents = _blobs(
        git, sorted({sha for _t, files in listing.values() for sha in files.values()})
    )
    stage = f"{state}/materialise-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    os.mkdir(stage, 0o755)
    done: list[str] = []
    try:
        staged: dict[str, str] = {}
        for i, (folder, (_tree, files)) in enumerate(sorted(listing.items())):
            if not all(sha in contents for sha in files.values()):
                continue
            where = f"{stage}/{i}"
            os.mkdir(where, 0o755)
            for name, sha in files.items():
                fd = os.open(
                    f"{where}/{name}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644
                )
                try:
                    os.write(fd, contents[sha])
                finally:
                    os.close(fd)
            staged[folder] = where
        if staged:
            done = _rename_in(root, git, commit, staged, {f: t for f, (t, _f) in listing.items()})
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return done


def _rename_in(
    root: str, git: Git, commit: str, staged: dict[str, str], trees: dict[str, str]
) -> list[str]:
    """Under the session's write lock (a ``BEGIN IMMEDIATE`` on ``.state/live.db``, as
    :mod:`live` takes it): rename each staged folder in if HEAD still has its tree."""
    path = f"{root}/.state/live.db"
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return []
        db = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=1, isolation_level=None)
    except (OSError, sqlite3.Error):
        return []
    done: list[str] = []
    try:
        while True:
            try:
                db.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    return []
        head = _head(root, git)
        if head != commit:  # committed since: only folders whose tree did not move
            now = _listing(git, head, staged)
            staged = {f: w for f, w in staged.items() if f in now and now[f][0] == trees[f]}
        for folder, where in sorted(staged.items()):
            bucket_dir = folder.rsplit("/", 1)[0]
            if not (_make_dir(f"{root}/history") and _make_dir(f"{root}/{bucket_dir}")):
                continue  # a file where a folder belongs: left in git
            target = f"{root}/{folder}"
            if os.path.islink(target):
                os.unlink(target)
            if not os.path.lexists(target):
                os.rename(where, target)
                done.append(folder)
    finally:
        db.close()  # (rolls back: releases the lock, nothing was written)
    _note_on_disk(root, {folder: trees[folder] for folder in done})
    return done


def _note_on_disk(root: str, trees: dict[str, str]) -> None:
    """Tell the local index cache (``.state/index/<bucket>.json``, :mod:`indexcache`) that
    those turns are checked out now: a turn cached by its tree sha alone is keyed by
    ``<sha>@<its folder's mtime>``, as if the commit had written it (its entries hold;
    a change on disk after this is still seen)."""
    by_bucket: dict[str, dict[str, str]] = {}
    for folder, tree in trees.items():
        _history, bucket, turn = folder.split("/")
        by_bucket.setdefault(bucket, {})[turn] = tree
    for bucket, turns in by_bucket.items():
        path = f"{root}/.state/index/{bucket}.json"
        try:
            fd = os.open(path, os.O_RDONLY | NOFOLLOW)
            try:
                data = b""
                while chunk := os.read(fd, 1 << 20):
                    data += chunk
            finally:
                os.close(fd)
            head, newline, body = data.partition(b"\n")
            header = json.loads(head)
            dirs = header["dirs"]
            changed = False
            for turn, tree in turns.items():
                if dirs.get(turn) == tree:
                    mtime = os.lstat(f"{root}/history/{bucket}/{turn}").st_mtime_ns
                    dirs[turn] = f"{tree}@{mtime}"
                    changed = True
            if not changed:
                continue
            tmp = f"{path}.{os.getpid()}.materialise.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, 0o644)
            try:
                os.write(fd, json.dumps(header, separators=(",", ":")).encode() + newline + body)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # no cache, or not ours: the next open scans the turn


def turn_folders(git: Git, commit: str) -> list[str]:
    """Every turn folder of ``commit`` (a small session's: the light maintenance's)."""
    out = git(
        ["ls-tree", "-r", "-d", "-z", "--name-only", "--full-tree", commit, "--", "history"], None
    )
    names = (p.decode("utf-8", "surrogateescape") for p in out.split(b"\0"))
    return [name for name in names if TURN_FOLDER.fullmatch(name)]


def main(argv: list[str]) -> int:
    """The light maintenance's step: every turn folder of HEAD missing on disk."""
    root, argv0 = argv[0], json.loads(argv[1])

    def git(args: list[str], data: bytes | None) -> bytes:
        done = subprocess.run(
            [*argv0, *args], input=data, capture_output=True, check=True, cwd=root
        )
        return done.stdout

    try:
        commit = _head(root, git)
        materialise(root, git, commit, turn_folders(git, commit))
    except (OSError, subprocess.CalledProcessError, ValueError):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
