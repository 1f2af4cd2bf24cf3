"""A tiny MCP server (the SDK's ``MCPServer``, FastMCP's successor) for the MCP tests:
``echo`` answers, ``die`` ends the process mid-call (saying its arguments), ``hang``
never answers, ``fail`` answers with an error.  Run as ``python tests/mcp_flaky_server.py``
(stdio), or with ``--http PORT`` to serve streamable HTTP at ``http://127.0.0.1:PORT/mcp``."""

from __future__ import annotations

import os
import sys
import threading

from mcp.server.mcpserver import MCPServer

app = MCPServer("flaky")


@app.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return f"echo: {text}"


@app.tool()
def die() -> str:
    """End the server's process in the middle of the call."""
    print("flaky: dying on purpose", *sys.argv[1:], file=sys.stderr, flush=True)  # (its token)
    os._exit(3)


@app.tool()
def hang() -> str:
    """Never answer."""
    threading.Event().wait()
    return "never"


@app.tool()
def fail(reason: str) -> str:
    """Raise, so the server answers with an error result."""
    raise ValueError(reason)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
