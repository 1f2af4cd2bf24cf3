"""Replays stay home: a replay's turns live in a local session of their own.

``openprogram run --replay`` (and ``--only-stale``) re-runs a notebook, answering its LLM
calls from the recording of the notebook's session ``S``.  Its turns are not work to
share, so they are never written into ``S``: the run forks ``S`` into a new local session
``R`` (``<S>-replay-<hex>``: ``S``'s history as it is, imported under the new id), and the
replay's turns are a branch from the root of ``R``.  So

* ``sessions push S`` sends ``S``'s ``main`` — which no replay ever touched — and a
  colleague's DAG gains no replay lanes;
* ``R``'s ``meta.json`` says ``replay_of: S`` and each replay turn carries
  ``metadata.replay_of``, so the views draw them as a replay, and ``sessions push R`` is
  refused unless asked (``--with-replays``: then ``R`` travels as a session of its own,
  still never into ``S``);
* ``S``'s recording stays what was recorded: a later replay, ``%openprogram stale`` and
  ``--only-stale`` judge against it, not against earlier replays;
* ``R`` still holds ``S``'s turns beside the replay's, so ``sessions diff R --runs``
  compares the recorded run with the replay.

A replay that changes nothing (every output reproduced) leaves nothing behind: the runner
deletes ``R``.
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openprogram.store.session.ids import MAX_ID_LENGTH, validate_session_id
from openprogram.store.session.syncrules import REPLAY_OF, refuse_replay_push, replay_of

if TYPE_CHECKING:
    from openprogram.store.session.store import SessionStore

#: ``meta.json`` field of a replay session and ``metadata`` field of its replay turns.
REPLAYED_MODEL = "replay"  # the model an llm node answered from the recording records
_SUFFIX = "-replay-"

__all__ = [
    "REPLAY_OF",
    "fork_for_replay",
    "live_turns",
    "local_replays",
    "refuse_replay_push",
    "replay_id",
    "replay_of",
]


def replay_id(source_id: str) -> str:
    """A fresh id for a replay of ``source_id``: ``<source>-replay-<8 hex>`` (the source's
    id cut so the whole stays a valid id)."""
    tail = f"{_SUFFIX}{secrets.token_hex(4)}"
    return validate_session_id(f"{source_id[: MAX_ID_LENGTH - len(tail)]}{tail}")


def fork_for_replay(store: SessionStore, source_id: str) -> str:
    """A new local session holding ``source_id``'s history as it is now (exported and
    imported under a fresh id through the checked bundle path); returns its id.  The
    replay's turns go there, never into ``source_id``."""
    from openprogram.store.session.sync import export_bundle, import_bundle

    new_id = replay_id(source_id)
    with tempfile.TemporaryDirectory(prefix="openprogram-replay-") as folder:
        bundle = export_bundle(store, source_id, Path(folder) / "source.bundle")
        import_bundle(store, bundle, as_id=new_id)
    return new_id


def local_replays(root: Path, source_id: str) -> list[str]:
    """The replay sessions of ``source_id`` in the sessions folder ``root`` (their
    ``meta.json`` says so), oldest first."""
    from openprogram.store.session.files import loads, read_bytes

    prefix = replay_id(source_id).rsplit(_SUFFIX, 1)[0] + _SUFFIX
    found: list[tuple[float, str]] = []
    for folder in root.glob(f"{prefix}*") if root.is_dir() else ():
        try:
            meta = loads(read_bytes(str(folder / "meta.json"), 1 << 20))
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and replay_of(meta) == source_id:
            created = meta.get("created_at")
            found.append((created if isinstance(created, int | float) else 0.0, folder.name))
    return [name for _, name in sorted(found)]


def live_turns(nodes: list[Any]) -> list[Any]:
    """The replay turns (``metadata.replay_of``) of ``nodes`` that a provider answered
    live (``--only-stale``'s stale cells, ``--record-misses``'s misses): an llm node of
    the turn recorded another model than the recording's."""
    turns = {n.turn: n for n in nodes if n.kind == "turn" and n.metadata.get(REPLAY_OF)}
    live = {
        n.turn
        for n in nodes
        if n.kind == "llm"
        and n.turn in turns
        and n.metadata.get("model") not in (None, REPLAYED_MODEL)
    }
    return [turns[t] for t in sorted(live)]
