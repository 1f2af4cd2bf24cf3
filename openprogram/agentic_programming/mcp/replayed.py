"""MCP calls answered from a recorded session (a replay): no server is started.

The recorded session's ``tool`` nodes that an MCP tool wrote (``metadata.mcp``) answer the
replay's calls of the same server, tool and arguments, each once, in the order they were
made; a recorded error is raised again as :class:`~openprogram.errors.McpToolError`.  The
tools a replay offers are the ones the server listed when the recording called it (each
call's node names them) with the specs its ``llm`` nodes' requests offered, so the replayed
request offers what the recorded one did; a server the recording never called offers none.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from openprogram.agentic_programming.mcp.tools import McpTool
from openprogram.errors import McpToolError, ReplayMiss
from openprogram.store.session.store import default_db

ERROR_PREFIX = f"{McpToolError.__name__}: "


def _key(server: str, tool: str, arguments: Any) -> str:
    return json.dumps([server, tool, arguments], sort_keys=True, default=str)


class RecordedCalls:
    """The MCP calls recorded in session ``session_id``, answering a replay's calls."""

    def __init__(self, session_id: str, db: Any = None) -> None:
        self.session_id = session_id
        nodes = (db or default_db()).open(session_id).nodes()
        self._lock = threading.Lock()
        self._queues: dict[str, list[Any]] = {}
        self.tools: dict[str, list[str]] = {}  # server -> the tools it listed
        self.specs: dict[str, dict[str, Any]] = {}  # tool name -> the spec a request offered
        for node in nodes:
            if node.kind == "llm":
                offered = (node.metadata.get("request") or {}).get("tools") or ()
                self.specs.update({str(t.get("name")): t for t in offered if isinstance(t, dict)})
            mark = node.metadata.get("mcp") if node.kind == "tool" else None
            if not isinstance(mark, dict) or node.status not in ("completed", "error"):
                continue
            server, tool = str(mark.get("server")), str(mark.get("tool"))
            self._queues.setdefault(_key(server, tool, node.input), []).append(node)
            listed = self.tools.setdefault(server, [])
            for name in [*(mark.get("tools") or ()), tool]:
                if name not in listed:
                    listed.append(str(name))

    def answer(self, server: str, tool: str, arguments: dict[str, Any]) -> Any:
        """The recorded value of this call (its recorded error raised again)."""
        with self._lock:
            queue = self._queues.get(_key(server, tool, arguments))
            node = queue.pop(0) if queue else None
        if node is None:
            raise ReplayMiss(
                f"replay: session {self.session_id} records no (more) call of MCP tool "
                f"{tool} of server {server} with arguments {json.dumps(arguments, default=str)} "
                "(run with the server and a real provider to record one)"
            )
        if node.status == "error":
            error = str(node.metadata.get("error") or "the tool failed")
            raise McpToolError(server, tool, error.removeprefix(ERROR_PREFIX))
        return node.output

    def tools_of(self, server: str) -> list[McpTool]:
        """The server's tools as the recording saw them, each answered from the recording."""
        names = self.tools.get(server, [])
        return [
            McpTool(server, self._listed(tool), answer=self.answer, listing=names) for tool in names
        ]

    def _listed(self, tool: str) -> dict[str, Any]:
        """The tool as its server listed it, rebuilt from the spec a request offered."""
        spec = self.specs.get(tool)
        if spec is None:
            return {"name": tool, "description": f"{tool} (replayed)"}
        return {
            "name": tool,
            "description": spec.get("description"),
            "inputSchema": spec.get("parameters"),
        }
