"""openprogram: agentic programming with git-backed sessions.

An ``@agentic_function``'s docstring is the prompt; every turn, function call, LLM call and
question to the user is a node of one DAG persisted in a per-session git repository.

The public names are imported when first used (PEP 562): ``import openprogram`` is cheap,
so a command that only reads a session (``openprogram sessions show``) does not load the
agentic layer, the dispatcher and the providers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from openprogram.store.vars import set_runtime_factory

if TYPE_CHECKING:
    from openprogram.agent.background import BackgroundRun, background
    from openprogram.agent.chat import tool
    from openprogram.agentic_programming import (
        ContextThreadPoolExecutor,
        Runtime,
        agentic_function,
        ask_user,
        llm,
    )
    from openprogram.context.nodes import Call
    from openprogram.context.policy import ContextPolicy
    from openprogram.errors import NoProviderConfigured, OpenProgramError, UserError
    from openprogram.providers import create_runtime
    from openprogram.providers import environment_runtime as environment_runtime
    from openprogram.scale import map as map
    from openprogram.scale.evals import EvalResult, evaluate
    from openprogram.store.session.context import SessionHandle, session_context

__version__ = "0.1.0"

# where each public name lives
_PUBLIC = {
    "BackgroundRun": "openprogram.agent.background",
    "background": "openprogram.agent.background",
    "tool": "openprogram.agent.chat",
    "ContextThreadPoolExecutor": "openprogram.agentic_programming",
    "Runtime": "openprogram.agentic_programming",
    "agentic_function": "openprogram.agentic_programming",
    "ask_user": "openprogram.agentic_programming",
    "llm": "openprogram.agentic_programming",
    "Call": "openprogram.context.nodes",
    "ContextPolicy": "openprogram.context.policy",
    "NoProviderConfigured": "openprogram.errors",
    "OpenProgramError": "openprogram.errors",
    "UserError": "openprogram.errors",
    "create_runtime": "openprogram.providers",
    "environment_runtime": "openprogram.providers",
    "map": "openprogram.scale",
    "evaluate": "openprogram.scale.evals",
    "EvalResult": "openprogram.scale.evals",
    "SessionHandle": "openprogram.store.session.context",
    "session_context": "openprogram.store.session.context",
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'openprogram' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later reads are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


def _environment_runtime() -> Any:
    from openprogram.providers import environment_runtime

    return environment_runtime()


# The composition root: the one place the layers are wired.  A turn entered without a
# runtime (a script's ``session_context()``, a bare call) gets the environment's; the
# store and the agentic layer sit below the providers and are told, not importing them.
set_runtime_factory(_environment_runtime)

# `map` is public (`openprogram.map`) but not in __all__: `from openprogram import *`
# must not shadow the builtin.
__all__ = [
    "BackgroundRun",
    "Call",
    "ContextPolicy",
    "ContextThreadPoolExecutor",
    "EvalResult",
    "NoProviderConfigured",
    "OpenProgramError",
    "Runtime",
    "SessionHandle",
    "UserError",
    "__version__",
    "agentic_function",
    "ask_user",
    "background",
    "create_runtime",
    "evaluate",
    "llm",
    "session_context",
    "tool",
]
