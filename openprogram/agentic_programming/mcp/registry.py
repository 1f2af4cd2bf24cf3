"""A set of MCP servers by name, their tools, and stopping every server with the process.

``mcp_servers`` is the process's own set — what ``%openprogram mcp add`` fills and every
Runtime without ``mcp=`` uses; ``create_runtime(..., mcp=[...])`` gives a Runtime a set of
its own.  Every server started in the process is stopped at its exit (``atexit``; a
notebook's kernel runs it at shutdown), and a server's stdio ends with its client anyway.
"""

from __future__ import annotations

import atexit
import re
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from openprogram.agentic_programming.mcp.replayed import RecordedCalls
from openprogram.agentic_programming.mcp.server import McpServer
from openprogram.agentic_programming.mcp.spec import spec_of
from openprogram.agentic_programming.mcp.tools import McpTool
from openprogram.errors import McpServerError, UserError

_every: weakref.WeakSet[McpServer] = weakref.WeakSet()
_recordings: weakref.WeakKeyDictionary[Any, RecordedCalls] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def stop_every_server() -> None:
    """Stop every MCP server of the process (registered with ``atexit``)."""
    for server in list(_every):
        server.stop()


atexit.register(stop_every_server)


class McpServers:
    """MCP servers by name (see the module)."""

    def __init__(self, specs: Iterable[Any] = ()) -> None:
        self._servers: dict[str, McpServer] = {}
        self._lock = threading.Lock()
        for spec in specs:
            self.add(spec)

    def add(self, spec: Any) -> McpServer:
        """Add a server (:func:`~.spec.spec_of` reads ``spec``); one of the same name is
        stopped and replaced.  Nothing starts before its tools are listed or called."""
        server = McpServer(spec_of(spec))
        with self._lock:
            old = self._servers.pop(server.name, None)
            self._servers[server.name] = server
        if old is not None:
            old.stop()
        _every.add(server)
        return server

    def remove(self, name: str) -> None:
        """Stop the server ``name`` and forget it."""
        with self._lock:
            server = self._servers.pop(name, None)
        if server is None:
            known = ", ".join(self._servers) or "none"
            raise UserError(f"no MCP server named {name!r} (the servers: {known})")
        server.stop()

    def get(self, name: str) -> McpServer | None:
        return self._servers.get(name)

    def __iter__(self) -> Iterator[McpServer]:
        return iter(list(self._servers.values()))

    def __len__(self) -> int:
        return len(self._servers)

    def __bool__(self) -> bool:
        return bool(self._servers)

    def stop(self) -> None:
        """Stop every server of the set (they start again at their next use)."""
        for server in self:
            server.stop()

    def tools(
        self, *, replay: Any = None, on_error: Callable[[McpServerError], None] | None = None
    ) -> dict[str, McpTool]:
        """Every server's tools by the name the model sees: the tool's own name, or
        ``SERVER_TOOL`` when two servers have a tool of that name.  With ``replay`` (a
        replay provider: ``session_id``) nothing is started: the tools the recorded session
        called answer from it.  A server that cannot start or list its tools raises
        :class:`McpServerError`, or with ``on_error`` is left out after ``on_error(exc)``."""
        found: list[tuple[str, McpTool]] = []
        recorded = recordings_of(replay) if replay is not None else None
        for server in self:
            if recorded is not None:
                found += [(server.name, t) for t in recorded.tools_of(server.name)]
                continue
            try:
                listed = server.list_tools()
            except McpServerError as exc:
                if on_error is None:
                    raise
                on_error(exc)
                continue
            names = [str(t.get("name")) for t in listed]
            found += [
                (server.name, McpTool(server.name, t, server=server, listing=names)) for t in listed
            ]
        seen: dict[str, int] = {}
        for _, tool in found:
            seen[tool.tool] = seen.get(tool.tool, 0) + 1
        out: dict[str, McpTool] = {}
        for owner, tool in found:
            if seen[tool.tool] > 1:
                tool = McpTool(
                    owner,
                    tool.listed,
                    server=tool.server,
                    answer=tool.answer,
                    name=exposed_name(owner, tool.tool),
                    listing=tool.listing,
                )
            out[tool.__name__] = tool
        return out


def tools_of(runtime: Any, *, strict: bool = True) -> dict[str, McpTool]:
    """The MCP tools ``runtime`` offers (its own servers, else the process's); under a
    replay provider, answered from the recording.  Not ``strict``: a server that cannot
    start is left out with one line on stderr (a chat turn goes on without it)."""
    own = getattr(runtime, "_mcp", None)
    servers = own if own is not None else mcp_servers
    provider = getattr(runtime, "provider", None)
    replay = provider if getattr(provider, "name", None) == "replay" else None
    return servers.tools(replay=replay, on_error=None if strict else _left_out)


def _left_out(exc: McpServerError) -> None:
    print(f"openprogram: {exc} (its tools are left out)", file=sys.stderr)


def exposed_name(server: str, tool: str) -> str:
    """``server_tool`` in the characters providers accept in a tool's name (64 at most)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}_{tool}")[:64]


def recordings_of(replay: Any) -> RecordedCalls:
    """The recorded MCP calls of a replay provider's session (read once per provider)."""
    with _lock:
        found = _recordings.get(replay)
        if found is None or found.session_id != replay.session_id:
            found = _recordings[replay] = RecordedCalls(replay.session_id)
        return found


mcp_servers = McpServers()
