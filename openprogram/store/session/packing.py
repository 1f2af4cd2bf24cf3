"""Loose objects and packs of a session repository: writing one loose object (``zlib`` of
``<kind> <size>\\0<data>``, named by its SHA-1, as git writes them) on a commit's path, and
packing them later — run by the detached maintenance, never on a commit's path.
"""

from __future__ import annotations

import hashlib
import os
import threading
import zlib
from pathlib import Path

from openprogram.store.session.safegit import run_git

MAX_PACKS = 20  # more packs than this and packing merges them (geometric repack)


def write_loose(objects: str, kind: bytes, data: bytes) -> bytes:
    """Write one loose object into the ``objects`` folder; returns its binary sha.  (A
    background ``prune-packed`` may remove an empty fan-out folder between making it and
    the rename: retried.)"""
    header = b"%s %d\0" % (kind, len(data))
    digest = hashlib.sha1(header)
    digest.update(data)
    binsha, hexsha = digest.digest(), digest.hexdigest()
    target = f"{objects}/{hexsha[:2]}/{hexsha[2:]}"
    if os.path.exists(target):
        return binsha
    tmp = f"{objects}/tmp_obj_{os.getpid()}_{threading.get_ident()}_{os.urandom(3).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        os.write(fd, zlib.compress(header + data, 1))
    finally:
        os.close(fd)
    for attempt in range(20):
        try:
            os.rename(tmp, target)
            break
        except FileNotFoundError:
            if attempt == 19:
                os.unlink(tmp)
                raise
            os.makedirs(f"{objects}/{hexsha[:2]}", exist_ok=True)
    return binsha


def loose_objects(git_dir: Path) -> list[str]:
    """The hex names of the loose objects."""
    names = []
    objects = git_dir / "objects"
    for fan in os.scandir(objects):
        if len(fan.name) == 2 and fan.is_dir():
            names += [fan.name + o.name for o in os.scandir(fan.path) if len(o.name) == 38]
    return names


def pack_loose(worktree: Path) -> int:
    """Pack the loose objects (by name: O(new objects), no history walk) and delete the
    packed loose copies; past ``MAX_PACKS`` packs, merge them geometrically (reusing their
    deltas, again without a walk).  Returns how many objects were packed.  Concurrent
    commits are safe: only loose objects that are in a pack are deleted."""
    git_dir = worktree / ".git"
    names = loose_objects(git_dir)
    if names:
        stdin = ("\n".join(names) + "\n").encode()
        run_git(worktree, "pack-objects", "-q", str(git_dir / "objects" / "pack" / "pack"),
                input=stdin)  # fmt: skip
        run_git(worktree, "prune-packed")
    packs = [p for p in os.listdir(git_dir / "objects" / "pack") if p.endswith(".pack")]
    geometric = ("repack", "-d", "-q", "--geometric=2")
    if len(packs) > MAX_PACKS and run_git(worktree, *geometric, check=False).returncode:
        run_git(worktree, "repack", "-a", "-d", "-q")
    return len(names)
