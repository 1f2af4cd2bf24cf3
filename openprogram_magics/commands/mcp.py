"""``%openprogram mcp add NAME -- COMMAND ARGS…`` / ``mcp add NAME URL`` / ``mcp list`` /
``mcp remove NAME``: MCP servers whose tools the notebook's turns may call.

A server added here belongs to the kernel (``openprogram.agentic_programming.mcp``'s
``mcp_servers``): chat cells offer its tools to the model, ``%openprogram call TOOL k=v``
runs one, and a cell passes them on with ``runtime.exec(..., tools=runtime.mcp_tools())``.
It starts at its first use and stops with the kernel (or ``mcp remove``).  ``mcp list``
shows each server and its tools (starting it to list them; in a replay, the tools the
recording called, and nothing starts).
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from openprogram_magics.commands import PROG, CommandError, Host, arg, command

USAGE = f"{PROG} mcp add NAME -- COMMAND ARGS… | add NAME URL | list | remove NAME"


@command(
    "mcp",
    "MCP servers whose tools turns may call: add NAME -- CMD ARGS…, add NAME URL, list, remove",
    arg("action", choices=["add", "list", "remove"]),
    arg("name", nargs="?", metavar="NAME"),
    arg("words", nargs="*", metavar="CMD ARGS"),
)
def mcp(host: Host, args: Namespace) -> Any:
    from openprogram.agentic_programming.mcp import mcp_servers
    from openprogram.agentic_programming.mcp.spec import from_words
    from openprogram.errors import UserError

    try:
        if args.action == "add":
            if not args.name:
                raise CommandError(f"{PROG} mcp add needs a name: {USAGE}")
            server = mcp_servers.add(from_words(args.name, args.words))
            print(
                f"openprogram: MCP server {server.name}: {server.spec.shown} (starts at first use)"
            )
            return None
        if args.action == "remove":
            if not args.name:
                raise CommandError(f"{PROG} mcp remove needs a name: {USAGE}")
            mcp_servers.remove(args.name)
            print(f"openprogram: MCP server {args.name} stopped and removed")
            return None
        return listing(host)
    except CommandError:
        raise
    except UserError as exc:  # a bad spec or name: the same one line
        raise CommandError(str(exc)) from None


def listing(host: Host) -> dict[str, list[str]]:
    """Each server of the kernel and the names of its tools (one line each)."""
    from openprogram.agentic_programming.mcp import mcp_servers
    from openprogram.agentic_programming.mcp.registry import tools_of

    if not mcp_servers:
        print(f"openprogram: no MCP servers; add one with `{PROG} mcp add NAME -- COMMAND ARGS`")
        return {}
    tools = tools_of(host.runtime(), strict=False)  # a server that cannot start: one line
    out: dict[str, list[str]] = {}
    for server in mcp_servers:
        names = [name for name, tool in tools.items() if tool.server_name == server.name]
        out[server.name] = names
        print(f"{server.name}: {server.spec.shown} · tools: {', '.join(names) or 'none'}")
    return out
