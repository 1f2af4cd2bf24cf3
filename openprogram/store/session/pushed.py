"""What of a session is on a remote: a ref per remote it was pushed to or pulled from
(``refs/openprogram/remotes/<key>``, the commit that remote is known to hold, as git's
remote-tracking branches), and the turns no such ref reaches — what deleting the session
would lose (``openprogram sessions delete`` asks, naming them).

The refs are local (a push sends only ``main``; a pull fetches only the session's ref), and
a remote is named by a hash of its URL without credentials, never the URL itself.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

from openprogram.errors import RefChanged, RefLocked
from openprogram.store.session.history import read_ref, update_ref
from openprogram.store.session.safegit import git_dir_of
from openprogram.store.session.syncgit import git
from openprogram.store.session.syncrules import redact_url

PREFIX = "refs/openprogram/remotes/"


def remote_ref(url: str) -> str:
    """The local ref that notes what the remote at ``url`` holds of the session."""
    return PREFIX + hashlib.sha256(redact_url(url).encode()).hexdigest()[:16]


def note_on_remote(repo: Path, url: str, tip: str) -> None:
    """The remote at ``url`` holds the session up to commit ``tip`` (after a push or a
    pull): written in-process, as git would (no git run added to a push or pull); a
    failure to note it never fails the push or pull (delete then asks)."""
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
    """What the remotes hold of ``source``'s history, noted in ``target`` too (a session
    that starts with that history: a notebook copy's); refs ``target`` has are kept."""
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
