"""A session's git log, read in-process (no ``git`` subprocess, no GitPython import).

One implementation for every front: ``openprogram sessions log`` and ``%openprogram log``
format the same :class:`LogEntry` list.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from pathlib import Path

from openprogram.store.session.repository import Repository


@dataclass(frozen=True)
class LogEntry:
    sha: str  # hex
    time: int  # committer time, seconds since the epoch
    summary: str  # the message's first line


@dataclass(frozen=True)
class CommitInfo:
    parents: tuple[bytes, ...]
    time: int
    summary: str


def parse_commit(data: bytes) -> CommitInfo:
    """The parents, committer time and summary of a raw git commit object."""
    header, _, message = data.partition(b"\n\n")
    parents: list[bytes] = []
    when = 0
    for line in header.split(b"\n"):
        if line.startswith(b"parent "):
            parents.append(bytes.fromhex(line[7:].decode()))
        elif line.startswith(b"committer "):
            when = int(line.rsplit(b" ", 2)[1])
    summary = message.split(b"\n", 1)[0].decode("utf-8", "replace")
    return CommitInfo(tuple(parents), when, summary)


def commit_log(worktree: Path) -> list[LogEntry]:
    """Every commit reachable from ``main``, newest first (as ``git log`` orders them)."""
    repo = Repository(worktree)
    head = repo.read_ref()
    if head is None:
        return []
    out: list[LogEntry] = []
    seen = {head}
    first = parse_commit(repo.read(head))
    queue: list[tuple[int, int, bytes, CommitInfo]] = [(-first.time, 0, head, first)]
    order = 1  # ties keep discovery order, so a linear history stays in parent order
    while queue:
        _, _, sha, info = heapq.heappop(queue)
        out.append(LogEntry(sha.hex(), info.time, info.summary))
        for parent in info.parents:
            if parent not in seen:
                seen.add(parent)
                parsed = parse_commit(repo.read(parent))
                heapq.heappush(queue, (-parsed.time, order, parent, parsed))
                order += 1
    return out
