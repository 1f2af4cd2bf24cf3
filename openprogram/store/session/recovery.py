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
from openprogram.store.session.files import claim_dead_journals, read_journal


def replay_dead_journals(directory: Path, own: Path | None) -> tuple[list[Call], list[Path]]:
    """The nodes recorded in the journals of dead writers, open ones closed as above, and
    the journals read (to delete once the nodes are committed)."""
    claimed = claim_dead_journals(directory, own)
    recovered: dict[str, Call] = {}
    for _path, fd in claimed:
        try:
            for record in read_journal(fd):
                try:
                    call = Call.from_dict(record)
                except NodeFormatError:
                    continue
                recovered[call.id] = call
        finally:
            os.close(fd)
    for call in recovered.values():
        if call.status in OPEN_STATUSES:
            call.metadata["status"] = UNANSWERED if call.status == AWAITING else INTERRUPTED
            call.metadata["recovered"] = True
    return list(recovered.values()), [path for path, _fd in claimed]
