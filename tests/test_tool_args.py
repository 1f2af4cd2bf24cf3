"""The tools the tool loop offers a model (``agentic_programming/tool_args.py``): the spec a
provider is sent comes from the function's signature and docstring, and the arguments a
model sends are checked (and coerced) before the tool runs, each problem named."""

from __future__ import annotations

from typing import Literal

import pytest

from openprogram.agentic_programming.tool_args import TOOL_SPEC, checked_arguments, tool_spec
from openprogram.errors import ToolArgumentsError


def search(query: str, limit: int = 5, kind: Literal["issue", "pr"] = "issue", runtime=None):  # type: ignore[no-untyped-def]
    """Search the tracker.

    Longer notes the model is not sent."""
    return [query] * limit


def test_the_spec_is_the_signature_and_the_docstrings_first_paragraph() -> None:
    spec = tool_spec("search", search)
    assert spec["name"] == "search" and spec["description"] == "Search the tracker."
    params = spec["parameters"]
    assert params["required"] == ["query"]
    assert set(params["properties"]) == {"query", "limit", "kind"}  # runtime is not offered
    assert params["properties"]["kind"]["enum"] == ["issue", "pr"]
    assert params["properties"]["limit"]["type"] == "integer"


def test_arguments_are_coerced_and_the_defaults_left_to_the_function() -> None:
    assert checked_arguments("search", search, {"query": "crash", "limit": "3"}) == {
        "query": "crash",
        "limit": 3,
    }


def test_every_problem_with_the_arguments_is_named_in_one_error() -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        checked_arguments("search", search, {"limit": "many", "colour": "red", "kind": "x"})
    said = str(caught.value)
    assert said.startswith("bad arguments for tool 'search': ")
    for problem in ("colour: not a parameter of search", "query:", "limit:", "kind:"):
        assert problem in said
    with pytest.raises(ToolArgumentsError, match="not a JSON object"):
        checked_arguments("search", search, ["crash"])  # type: ignore[arg-type]


def test_a_tool_with_its_own_spec_is_sent_it_and_checks_its_own_arguments() -> None:
    def remote(**kwargs: object) -> None:
        return None

    own = {"description": "a server's tool", "parameters": {"type": "object"}}
    setattr(remote, TOOL_SPEC, own)
    assert tool_spec("srv.remote", remote) == {**own, "name": "srv.remote"}
    assert checked_arguments("srv.remote", remote, {"anything": 1}) == {"anything": 1}
