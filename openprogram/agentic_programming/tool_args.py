"""Tools the tool loop offers the model: their JSON schema and argument checks, by pydantic.

A tool is a plain callable.  Its annotated parameters (all but ``runtime``, ``*args`` and
``**kwargs``) become a pydantic model, built once per callable: the model's JSON schema is
what providers send (``Optional[int]`` is an integer or null, ``list[str]`` an array of
strings, a ``Literal`` an enum), and the model validates the arguments the model sent
before the tool runs, so a bad argument is refused with a message the model can act on.
An unannotated parameter accepts anything.  pydantic is imported at the first tool.

A callable that carries its own spec in :data:`TOOL_SPEC` (an MCP server's tool: its
JSON schema as the server wrote it) is sent that spec, and its arguments are passed as
the model wrote them (a JSON object; the tool checks them itself).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from openprogram.errors import ToolArgumentsError

if TYPE_CHECKING:
    from pydantic import BaseModel

Tool = Callable[..., Any]
SKIPPED = ("runtime",)
TOOL_SPEC = "__openprogram_tool_spec__"  # a tool's own spec: sent as is, no signature check
NODE_MARKS = "__openprogram_node_marks__"  # metadata its ``tool`` nodes get (the tool loop)


@functools.lru_cache(maxsize=512)
def arguments_model(fn: Tool) -> type[BaseModel]:
    """A pydantic model of ``fn``'s parameters (cached per callable)."""
    from typing import get_type_hints

    from pydantic import ConfigDict, create_model

    try:
        hints = get_type_hints(fn)
    except Exception:  # an annotation that does not resolve: treat it as unannotated
        hints = {}
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.name in SKIPPED or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    name = getattr(fn, "__name__", "tool")
    config = ConfigDict(arbitrary_types_allowed=True)
    return create_model(f"{name}_arguments", __config__=config, **fields)


def tool_spec(name: str, fn: Tool) -> dict[str, Any]:
    """The spec providers get: the docstring's first paragraph describes the tool, the
    parameters' JSON schema (from :func:`arguments_model`) its arguments; a tool's own
    spec (:data:`TOOL_SPEC`) as it is, under ``name``."""
    own = getattr(fn, TOOL_SPEC, None)
    if isinstance(own, Mapping):
        return {**own, "name": name}
    from pydantic.json_schema import GenerateJsonSchema

    class NoTitles(GenerateJsonSchema):
        def field_title_should_be_set(self, schema: Any) -> bool:
            return False

    schema = arguments_model(fn).model_json_schema(schema_generator=NoTitles)
    schema.pop("title", None)
    parameters: dict[str, Any] = {"type": "object", "properties": schema.get("properties", {})}
    parameters["required"] = schema.get("required", [])
    if "$defs" in schema:
        parameters["$defs"] = schema["$defs"]
    doc = (inspect.getdoc(fn) or name).split("\n\n")[0]
    return {"name": name, "description": doc, "parameters": parameters}


def checked_arguments(name: str, fn: Tool, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` validated (and coerced) against ``fn``'s signature; ToolArgumentsError
    names each problem.  Unknown arguments are refused too."""
    from pydantic import ValidationError

    if not isinstance(arguments, Mapping):
        raise ToolArgumentsError(f"bad arguments for tool {name!r}: not a JSON object")
    if isinstance(getattr(fn, TOOL_SPEC, None), Mapping):
        return dict(arguments)  # the tool checks them against its own schema
    model = arguments_model(fn)
    unknown = sorted(set(arguments) - set(model.model_fields))
    problems = [f"{key}: not a parameter of {name}" for key in unknown]
    try:
        parsed = model.model_validate(dict(arguments))
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            where = ".".join(str(p) for p in err["loc"]) or "arguments"
            problems.append(f"{where}: {err['msg']}")
    if problems:
        raise ToolArgumentsError(f"bad arguments for tool {name!r}: " + "; ".join(problems))
    return {key: getattr(parsed, key) for key in model.model_fields if key in arguments}
