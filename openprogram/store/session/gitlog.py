"""A session's git log, read in-process (no ``git`` subprocess, no GitPython import).

One implementation for every front: ``openprogram sessions log`` and ``%openprogram log``
format the same :class:`LogEntry` list.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from pathlib import Path

from openprogram.store.session.repository import Repository

HEX_SHA = re.compile(rb"[0-9a-f]{40}")


@dataclass(frozen=True)
class LogEntry:
    sha: str  # hex
    time: int  # committer time, seconds since the epoch
    summary: str  # the message's first line
    author: str = ""  # the author's name (who ran the turn), as the commit records it
    email: str = ""


@dataclass(frozen=True)
class CommitInfo:
    parents: tuple[bytes, ...]
    time: int
    summary: str
    author: str = ""
    email: str = ""


def parse_commit(data: bytes) -> CommitInfo:
    """The parents, committer time, summary and author of a raw git commit object.  A session may
    come from anywhere: a committer line without a usable date gives time 0 and a parent
    that is not a sha is left out, as ``git log`` shows such commits rather than failing."""
    header, _, message = data.partition(b"\n\n")
    parents: list[bytes] = []
    when = 0
    name = email = ""
    for line in header.split(b"\n"):
        if line.startswith(b"parent ") and HEX_SHA.fullmatch(line[7:]):
            parents.append(bytes.fromhex(line[7:].decode()))
        elif line.startswith(b"committer "):
            stamp = line.rsplit(b">", 1)[-1].split()
            when = int(stamp[0]) if stamp and stamp[0].isdigit() and len(stamp[0]) < 19 else 0
        elif line.startswith(b"author ") and not name:
            ident = line[7:].rsplit(b">", 1)[0].decode("utf-8", "replace")
            name, _, email = (part.strip() for part in ident.partition("<"))
    summary = message.split(b"\n", 1)[0].decode("utf-8", "replace")
    return CommitInfo(tuple(parents), when, summary, name[:200], email[:200])


def _parsed(repo: Repository, sha: bytes) -> CommitInfo | None:
    """The commit ``sha``, or None when it is not here (a shallow clone's boundary)."""
    from gitdb.exc import BadName, BadObject  # gitdb is loaded by the read anyway

    try:
        return parse_commit(repo.read(sha))
    except (BadObject, BadName):  # missing; a refused or damaged folder still raises
        return None


def commit_log(worktree: Path) -> list[LogEntry]:
    """Every commit reachable from ``main``, newest first (as ``git log`` orders them)."""
    repo = Repository(worktree)
    head = repo.read_ref()
    if head is None:
        return []
    out: list[LogEntry] = []
    seen = {head}
    first = _parsed(repo, head)
    if first is None:
        return []
    queue: list[tuple[int, int, bytes, CommitInfo]] = [(-first.time, 0, head, first)]
    order = 1  # ties keep discovery order, so a linear history stays in parent order
    while queue:
        _, _, sha, info = heapq.heappop(queue)
        out.append(LogEntry(sha.hex(), info.time, info.summary, info.author, info.email))
        for parent in info.parents:
            if parent not in seen:
                seen.add(parent)
                parsed = _parsed(repo, parent)
                if parsed is None:
                    continue
                heapq.heappush(queue, (-parsed.time, order, parent, parsed))
                order += 1
    return out
