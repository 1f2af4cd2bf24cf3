"""Tools' JSON schemas and argument checks — defined with the tool loop in
:mod:`openprogram.agentic_programming.tool_args`, re-exported here (the seed's import path)."""

from openprogram.agentic_programming.tool_args import (
    SKIPPED,
    Tool,
    arguments_model,
    checked_arguments,
    tool_spec,
)
from openprogram.errors import ToolArgumentsError

__all__ = [
    "SKIPPED",
    "Tool",
    "ToolArgumentsError",
    "arguments_model",
    "checked_arguments",
    "tool_spec",
]
