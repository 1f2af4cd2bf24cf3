"""openprogram: agentic programming with git-backed sessions.

An ``@agentic_function``'s docstring is the prompt; every turn, function call, LLM call and
question to the user is a node of one DAG persisted in a per-session git repository.
"""

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
from openprogram.providers import create_runtime, environment_runtime
from openprogram.scale import map as map
from openprogram.store.session.context import SessionHandle, session_context
from openprogram.store.vars import set_runtime_factory

__version__ = "0.1.0"

# The composition root: the one place the layers are wired.  A turn entered without a
# runtime (a script's ``session_context()``, a bare call) gets the environment's; the
# store and the agentic layer sit below the providers and are told, not importing them.
set_runtime_factory(environment_runtime)

# `map` is public (`openprogram.map`) but not in __all__: `from openprogram import *`
# must not shadow the builtin.
__all__ = [
    "BackgroundRun",
    "Call",
    "ContextPolicy",
    "ContextThreadPoolExecutor",
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
    "llm",
    "session_context",
    "tool",
]
