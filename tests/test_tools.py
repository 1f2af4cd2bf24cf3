"""Tool schemas come from the signature (pydantic), and bad arguments never reach the tool."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, Literal, Optional

import pytest

from openprogram import session_context
from openprogram.agent.agent_loop import run_tool
from openprogram.agent.session_db import default_db
from openprogram.agent.tools import ToolArgumentsError, checked_arguments, tool_spec
from openprogram.errors import OpenProgramError

ran: list[dict[str, Any]] = []


def search(
    query: str,
    limit: Optional[int] = None,  # noqa: UP045 (the spelling the issue names)
    tags: list[str] | None = None,
    order: Literal["newest", "oldest"] = "newest",
    runtime: Any = None,
) -> str:
    """Search the notes.

    Longer text that is not part of the description."""
    ran.append({"query": query, "limit": limit, "tags": tags, "order": order})
    return f"{query}:{limit}:{tags}:{order}"


def test_the_schema_follows_the_signature() -> None:
    spec = tool_spec("search", search)
    assert spec["name"] == "search" and spec["description"] == "Search the notes."
    params = spec["parameters"]
    assert params["type"] == "object" and params["required"] == ["query"]
    props = params["properties"]
    assert set(props) == {"query", "limit", "tags", "order"}  # no runtime
    assert props["query"] == {"type": "string"}
    assert {"type": "integer"} in props["limit"]["anyOf"]
    assert {"type": "null"} in props["limit"]["anyOf"]
    tags = next(s for s in props["tags"]["anyOf"] if s.get("type") == "array")
    assert tags["items"] == {"type": "string"}
    assert props["order"]["enum"] == ["newest", "oldest"]


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"limit": 3}, "query: Field required"),
        ({"query": "q", "limit": "many"}, "limit: "),
        ({"query": "q", "tags": "not a list"}, "tags: "),
        ({"query": "q", "order": "random"}, "order: "),
        ({"query": "q", "colour": "red"}, "colour: not a parameter of search"),
    ],
)
def test_a_bad_argument_is_refused_before_the_tool_runs(
    arguments: dict[str, Any], says: str
) -> None:
    ran.clear()
    with pytest.raises(ToolArgumentsError, match=says):
        checked_arguments("search", search, arguments)
    assert ran == []


def test_the_agent_loop_records_the_refusal_and_never_calls_the_tool() -> None:
    ran.clear()
    with session_context("tool_args") as h:
        run_tool(
            {"name": "search", "arguments": {"query": "q", "limit": "x"}}, {"search": search}, print
        )
        run_tool(
            {"name": "search", "arguments": {"query": "q", "limit": 2}}, {"search": search}, print
        )
    tools = [n for n in default_db().open(h.session_id).nodes() if n.kind == "tool"]
    assert [t.status for t in tools] == ["error", "completed"]
    assert (
        "ToolArgumentsError: bad arguments for tool 'search': limit:" in tools[0].metadata["error"]
    )
    assert tools[1].output == "q:2:None:newest"
    assert ran == [{"query": "q", "limit": 2, "tags": None, "order": "newest"}]


def test_every_project_exception_derives_from_the_base_error() -> None:
    import openprogram.agent.process_runner
    import openprogram.agent.tools
    import openprogram.cli
    import openprogram.store.session.sync
    import openprogram.usage  # noqa: F401
    import openprogram_magics.commands
    import openprogram_magics.notebook  # noqa: F401

    def project_classes(cls: type) -> list[type]:
        out = []
        for sub in cls.__subclasses__():
            if sub.__module__.startswith(("openprogram", "openprogram_magics")):
                out.append(sub)
            out += project_classes(sub)
        return out

    # errors, that is: not warnings, and not control flow (``RunStopped`` is a
    # KeyboardInterrupt on purpose, so that ``except Exception`` does not swallow it)
    strays = [
        f"{c.__module__}.{c.__qualname__}"
        for c in set(project_classes(Exception))
        if not issubclass(c, OpenProgramError | Warning)
    ]
    assert sorted(strays) == []


def test_importing_the_engine_does_not_import_pydantic() -> None:
    code = "import sys, openprogram, openprogram.agent.agent_loop; print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
