"""An MCP server's tool as a Python callable the tool loop runs like any other.

:class:`McpTool` carries its spec (the server's JSON schema, as is) in :data:`TOOL_SPEC`,
which the tool loop sends instead of a schema built from a signature and which tells it
not to check the arguments against one (the server checks them and says what is wrong);
and in :data:`NODE_MARKS` what its ``tool`` node records besides the arguments and the
result: ``metadata.mcp = {"server", "tool", "tools"}`` (``tools``: the names its server
listed), which a replay reads to answer the call and to offer the same tools.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from openprogram.agentic_programming.mcp.results import spec_of_tool, value_of
from openprogram.agentic_programming.tool_args import NODE_MARKS, TOOL_SPEC
from openprogram.errors import McpToolError

if TYPE_CHECKING:
    from openprogram.agentic_programming.mcp.server import McpServer

Answer = Callable[[str, str, dict[str, Any]], Any]  # (server, tool, arguments) -> value


class McpTool:
    """``tool(**arguments)`` calls ``tool`` on its server and returns the result's value
    (:func:`~openprogram.agentic_programming.mcp.results.value_of`); an error result raises
    :class:`~openprogram.errors.McpToolError`.  With ``answer`` (a replay) the server is
    never reached: ``answer(server, tool, arguments)`` gives the value."""

    def __init__(
        self,
        server_name: str,
        listed: Mapping[str, Any],
        *,
        server: McpServer | None = None,
        answer: Answer | None = None,
        name: str | None = None,
        listing: list[str] | None = None,
    ) -> None:
        spec = spec_of_tool(listed)
        self.listed = dict(listed)
        self.listing = listing
        self.server_name = server_name
        self.tool = spec["name"]
        self.server = server
        self.answer = answer
        self.__name__ = self.__qualname__ = name or self.tool
        self.__doc__ = spec["description"]
        setattr(self, TOOL_SPEC, {**spec, "name": self.__name__})
        mark = {"server": server_name, "tool": self.tool, "tools": listing or [self.tool]}
        setattr(self, NODE_MARKS, {"mcp": mark})

    def __repr__(self) -> str:
        return f"<MCP tool {self.tool} of server {self.server_name}>"

    def __call__(self, **arguments: Any) -> Any:
        if self.answer is not None:
            return self.answer(self.server_name, self.tool, arguments)
        assert self.server is not None
        value, error = value_of(self.server.call(self.tool, arguments))
        if error is not None:
            raise McpToolError(self.server_name, self.tool, error)
        return value
