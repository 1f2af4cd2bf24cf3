"""The one maintenance of a session: git's own ``repack -d --geometric=2``.

A commit writes its objects as one small pack; every ``REPACK_EVERY`` commits (counted
across processes) the committing process starts git's geometric repack in a child of its
own, never waits for it, and starts no other while one runs.  The session's close waits
for it ``WAIT_AT_CLOSE_S`` at most and then ends it (git removes its temporary pack), so
nothing the writer started outlives its close by more than a few seconds.  Git runs with
the fixed, hook-free configuration of :mod:`safegit` (``gc.auto=0``: git never starts a
collection of its own).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from openprogram.store.session.safegit import git_command

REPACK_EVERY = 200  # commits between two repacks
WAIT_AT_CLOSE_S = 3.0  # a repack still running when the session closes is waited for so long


def repack(root: Path) -> subprocess.Popen[bytes]:
    """Start ``git repack -d --geometric=2`` (loose objects rolled up with the small
    packs) on the session at ``root``, in a child of this process; returns it at once."""
    argv, env = git_command(root, "repack", "-d", "-q", "--geometric=2")
    return subprocess.Popen(
        argv,
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def finish(child: subprocess.Popen[bytes], wait_s: float | None = None) -> None:
    """Wait for a repack ``wait_s`` (``WAIT_AT_CLOSE_S``) at most, then end it."""
    wait_s = WAIT_AT_CLOSE_S if wait_s is None else wait_s
    try:
        child.wait(wait_s)
    except subprocess.TimeoutExpired:
        child.terminate()
        try:
            child.wait(wait_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
