"""Agentic functions: ``@agentic_function``, the ``Runtime``, ``llm()`` and ``ask_user``."""

from openprogram.agentic_programming.ask_user import (
    ask_user,
    set_default_ask_user_handler,
    using_ask_user_handler,
)
from openprogram.agentic_programming.function import (
    agentic_function,
    current_node,
    get_current_runtime,
)
from openprogram.agentic_programming.parallel import ContextThreadPoolExecutor
from openprogram.agentic_programming.provider import Reply, ToolCall, ToolRun
from openprogram.agentic_programming.runtime import Runtime, llm

__all__ = [
    "ContextThreadPoolExecutor",
    "Reply",
    "Runtime",
    "ToolCall",
    "ToolRun",
    "agentic_function",
    "ask_user",
    "current_node",
    "get_current_runtime",
    "llm",
    "set_default_ask_user_handler",
    "using_ask_user_handler",
]
