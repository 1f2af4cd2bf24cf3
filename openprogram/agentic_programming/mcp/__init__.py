"""MCP servers as tools (issue 39 item 1), through the official ``mcp`` SDK.

A server (:class:`ServerSpec`: a name and a command over stdio, or a URL over streamable
HTTP) starts at its first use on an event loop of its own (:mod:`.server`); its tools are
callables the tool loop runs like Python tools, each call a ``tool`` node (:mod:`.tools`);
a replay answers them from the recording without starting anything (:mod:`.replayed`);
:mod:`.registry` holds servers by name and stops them all when the process exits.
The SDK is imported at a server's start, not here.
"""

from openprogram.agentic_programming.mcp.registry import (
    McpServers,
    mcp_servers,
    stop_every_server,
)
from openprogram.agentic_programming.mcp.server import McpServer
from openprogram.agentic_programming.mcp.spec import ServerSpec, parse_assignment, spec_of
from openprogram.agentic_programming.mcp.tools import McpTool

__all__ = [
    "McpServer",
    "McpServers",
    "McpTool",
    "ServerSpec",
    "mcp_servers",
    "parse_assignment",
    "spec_of",
    "stop_every_server",
]
