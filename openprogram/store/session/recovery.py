"""Crash recovery: the journals left by writers that died mid-turn.

Each process journals its node writes to ``.state/journal/<pid>-<random>.jsonl`` and holds
an ``flock`` on it while it lives.  A journal that can be locked belongs to a dead writer:
its records are replayed (the last state of each node wins), nodes still ``running`` become
``interrupted`` and questions still ``awaiting`` become ``unanswered``; the caller commits
them and then deletes the journals.
"""

from __future__ import annotations

import os
from pathlib import Path

from openprogram.context.nodes import (
    AWAITING,
    INTERRUPTED,
    OPEN_STATUSES,
    UNANSWERED,
    Call,
    NodeFormatError,
)
from openprogram.store.session.statefiles import claim_dead_journals, read_journal


def replay_dead_journals(
    directory: Path, own: Path | None
) -> tuple[list[Call], list[Path], list[tuple[str, str]]]:
    """The nodes recorded in the journals of dead writers, open ones closed as above, the
    journals read (to delete once the nodes are committed), and (journal, reason) for those
    with records skipped (not JSON objects, or not nodes: absurd numbers, wrong types)."""
    claimed = claim_dead_journals(directory, own)
    recovered: dict[str, Call] = {}
    skipped: list[tuple[str, str]] = []
    for path, fd in claimed:
        try:
            records, bad = read_journal(fd)
        finally:
            os.close(fd)
        reasons = [f"{bad} line(s) not JSON objects"] if bad else []
        for record in records:
            try:
                call = Call.from_dict(record)
            except NodeFormatError as exc:
                reasons.append(str(exc))
                continue
            recovered[call.id] = call
        if reasons:
            skipped.append((str(path), f"{len(reasons)} record(s) skipped: {reasons[0]}"))
    for call in recovered.values():
        if call.status in OPEN_STATUSES:
            call.metadata["status"] = UNANSWERED if call.status == AWAITING else INTERRUPTED
            call.metadata["recovered"] = True
    return list(recovered.values()), [path for path, _fd in claimed], skipped
