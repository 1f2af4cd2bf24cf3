"""Helpers shared by several test modules (shared fixtures live in ``conftest.py``).

Import as::

    from helpers import reopen
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wire_server import Reply, WireServer

from openprogram.agentic_programming import function as fn_mod
from openprogram.agentic_programming.function import get_call_id, get_current_runtime
from openprogram.context.nodes import Call
from openprogram.providers.anthropic_provider import AnthropicProvider
from openprogram.providers.openai_provider import OpenAIProvider
from openprogram.store.session.store import SessionStore
from openprogram.store.vars import get_store, get_turn_id

__all__ = [
    "Reply",
    "WireServer",
    "assert_vars_clear",
    "map_shape",
    "reopen",
    "settled",
    "wire_provider",
]


def reopen(home: Path, session_id: str) -> list[Call]:
    """Every node of the session, read by a fresh store (what a later process would see)."""
    store = SessionStore(home)
    try:
        return store.open(session_id).nodes()
    finally:
        store.close()


def settled(home: Path) -> Path:
    """``home`` once nothing of its sessions runs in the background: nothing does after a
    session's close (its repack is ended with it), so ``home`` itself."""
    return home


def assert_vars_clear() -> None:
    """No ContextVar of the per-turn context is left set."""
    assert get_store() is None
    assert get_turn_id() is None
    assert get_current_runtime() is None
    assert get_call_id() is None
    assert fn_mod._depth.get() == 0


def wire_provider(kind: str, server: WireServer, **kwargs: Any) -> Any:
    """An ``openai`` or ``anthropic`` provider pointed at the local wire ``server``."""
    if kind == "openai":
        return OpenAIProvider(base_url=server.openai_base_url, **kwargs)
    return AnthropicProvider(base_url=server.anthropic_base_url, **kwargs)


def map_shape(nodes: list[Call], turn_id: str) -> list[tuple[Any, ...]]:
    """What a map wrote under the turn ``turn_id``, ids, timings and workers aside: per node
    in seq order its depth under the turn, kind, name, status, input, output, prompt, item."""
    by_id = {n.id: n for n in nodes}

    def depth(node: Call) -> int:
        d = 0
        while node.caller is not None and node.caller != turn_id and node.caller in by_id:
            node, d = by_id[node.caller], d + 1
        return d if node.caller == turn_id else -1

    shape = []
    for node in sorted(nodes, key=lambda n: n.seq):
        if node.id == turn_id or depth(node) < 0:
            continue
        meta = node.metadata
        shape.append(
            (
                depth(node),
                node.kind,
                node.name,
                node.status,
                node.input,
                node.output,
                meta.get("messages"),
                _history_shape(meta.get("context")),
                meta.get("item"),
                meta.get("error"),
            )
        )
    return shape


def _history_shape(record: Any) -> Any:
    """An llm node's record of the earlier turns it was given, ids aside."""
    if not isinstance(record, dict):
        return record
    left = record.get("left_out") or {}
    return (
        len(record.get("turns", ())),
        record.get("tokens"),
        record.get("policy"),
        {k: len(v) for k, v in left.items()},
        record.get("earlier"),
    )


def status_shows_nothing(path: Path) -> bool:
    """``git status`` in a session folder lists no file (changed, deleted, untracked): a
    session's repository is bare (no working tree), so git refuses to compare one."""
    import subprocess

    done = subprocess.run(["git", "status", "--porcelain"], cwd=path, capture_output=True)
    if done.returncode == 0:
        return done.stdout == b""
    return b"must be run in a work tree" in done.stderr and done.stdout == b""
