"""``replay``: answer from the llm nodes already recorded in a session.

Re-running a shared notebook without an API key: each exec gets the recorded reply of the
earliest unused llm node whose content matches; an exec that was never recorded is a
clear error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openprogram.providers.base import LLMRequest, LLMResponse, ProviderError


class ReplayProvider:
    name = "replay"

    def __init__(self, session_id: str, *, db: Any = None) -> None:
        from openprogram.agent.session_db import default_db

        session = (db or default_db()).open(session_id)
        self.session_id = session_id
        self.model = "replay"
        self._recorded: list[tuple[str, str, str]] = []  # (node id, content, reply)
        for node in session.nodes():
            if node.kind == "llm" and node.status == "completed" and isinstance(node.input, dict):
                self._recorded.append((node.id, str(node.input.get("content")), str(node.output)))
        self._used: set[str] = set()

    def complete(
        self, request: LLMRequest, on_delta: Callable[[str], None] | None = None
    ) -> LLMResponse:
        content = str(request.messages[-1].get("content")) if request.messages else ""
        for node_id, recorded, reply in self._recorded:
            if node_id not in self._used and recorded == content:
                self._used.add(node_id)
                if on_delta is not None:
                    on_delta(reply)
                return LLMResponse(text=reply, model="replay", finish_reason="stop")
        raise ProviderError(
            f"replay: session {self.session_id} has no unused recorded reply for "
            f"{content[:80]!r}; run with a real provider to record one"
        )
