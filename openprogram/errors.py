"""Every exception openprogram raises on purpose, in one tree (after pydantic-ai's
boundaries: what the user fixes, what a run ended with, what is a bug).

::

    OpenProgramError
    ├── UserError                 a mistake the user can fix; the message says how
    │   ├── InvalidSessionId (ValueError), NoProviderConfigured, ModelRequestsBlocked
    │   ├── CliError, CommandError, MetadataError (the notebook's metadata), SyncError
    │   └── LiteratureError (a paper that cannot be read)
    ├── SessionError              data on disk that is missing, locked or damaged
    │   ├── SessionNotFound (KeyError), CorruptedFile (.path), NodeFormatError (ValueError)
    │   ├── RefusedFile (OSError), RefChanged, RefLocked (RuntimeError)
    │   └── StoreError (OSError: disk full, read-only, ``ulimit -f``; one line)
    ├── RunError                  how a run ended, with structured fields
    │   ├── ChoiceError (.choices, .answers), ResponseFormatError (.problems)
    │   ├── BudgetExceeded (also a UserError: raise the budget), AgenticRecursionError
    │   ├── ToolArgumentsError, ProcessRunError (.target, .error) → ProcessRunCancelled
    │   ├── ToolRefused (.tool: a call the approval rules' question was refused)
│   ├── McpServerError (.server: an MCP server that cannot start, died or hung)
│   ├── McpToolError (.server, .tool: an MCP tool that answered with an error)
    │   ├── ExecutorLost (.executor, .waited, .results: a map's cluster had no worker)
    │   ├── RemoteError (a worker's exception that could not travel as itself)
    │   └── ProviderError (RuntimeError)
    │       └── MissingCredentials, TransientProviderError, UnsupportedParameter
    │           (.parameter), ReplayMiss
    └── InternalError             a bug in openprogram: please report it

    RunStopped (KeyboardInterrupt) → RunKilled    a stop, not an error: ``except
                                                   Exception`` in user code lets it pass
    CorruptedFileWarning (UserWarning)             a damaged node skipped while reading

Import them from here (``from openprogram.errors import SyncError``): the modules that
raised them before no longer re-export them (the session store's last few go with its
redesign).
"""

from __future__ import annotations


class OpenProgramError(Exception):
    """Base class of every error openprogram raises on purpose."""


class UserError(OpenProgramError):
    """A usage or configuration mistake; the message says what to do."""


class SessionError(OpenProgramError):
    """A session on disk is missing, locked or damaged."""


class RunError(OpenProgramError):
    """How a run (an LLM call, a tool, a child process, a worker) ended, when not with an
    answer; the fields say what happened."""


class InternalError(OpenProgramError):
    """A bug in openprogram (an invariant broken): please report it."""


# -- user errors --------------------------------------------------------------------------
class InvalidSessionId(UserError, ValueError):
    """A session id that is not a short safe name (path traversal, separators, too long...)."""


class NoProviderConfigured(UserError):
    """``runtime.exec`` was called with no LLM provider configured."""

    def __init__(self, detail: str = "") -> None:
        message = (
            "No LLM provider configured: set OPENAI_API_KEY (or OPENAI_BASE_URL for Ollama, "
            "vLLM, LM Studio) or ANTHROPIC_API_KEY, or choose one explicitly with "
            "OPENPROGRAM_PROVIDER=test|openai|anthropic (`openprogram research|chat "
            "--provider test`; in a notebook: `%openprogram provider test`)."
        )
        super().__init__(f"{message} {detail}".strip())


class ModelRequestsBlocked(UserError, RuntimeError):
    """A real model request was attempted while model requests are blocked."""


class CliError(UserError):
    """A command line that cannot be carried out; printed as one line."""


class CommandError(UserError):
    """A ``%openprogram`` command that cannot be carried out; shown as one line."""


class MetadataError(UserError):
    """The notebook's ``metadata.openprogram`` is unusable; the message says how to recover."""


class SyncError(UserError):
    """Something that arrived from elsewhere (or a remote) was refused; says what and why."""


class LiteratureError(UserError):
    """A paper or page that cannot be fetched or read; the message says which and why."""


# -- data on disk -------------------------------------------------------------------------
class SessionNotFound(SessionError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "session not found"


class CorruptedFile(SessionError):
    """A node file or ``meta.json`` that cannot be parsed; ``path`` names it."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"corrupted session file {path}: {reason}")


class NodeFormatError(SessionError, ValueError):
    """A node's JSON does not have the node format."""


class RefusedFile(SessionError, OSError):
    """A session file that is not read or written: a symlink, a FIFO, a device, too big."""

    def __str__(self) -> str:  # the reason only: the caller names the file
        return str(self.strerror)


class RefChanged(SessionError, RuntimeError):
    """A compare-and-swap of a ref failed: it no longer points where the caller read it."""


class RefLocked(SessionError, RuntimeError):
    """Another writer holds ``<ref>.lock`` (and kept it past the wait)."""


class StoreError(SessionError, OSError):
    """A session's state could not be written (disk full, a read-only folder, ``ulimit
    -f``): one line naming the session and the cause; every committed turn is intact and
    the turn in flight is recovered at the next open."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "the session store failed"


# -- how a run ended ----------------------------------------------------------------------
class ChoiceError(RunError):
    """The model never picked one of the allowed ``choices`` within the retry bound."""

    def __init__(self, choices: list[str], answers: list[str]) -> None:
        self.choices = choices
        self.answers = answers
        shown = ", ".join(repr(a[:60]) for a in answers)
        super().__init__(
            f"the model did not pick one of {choices} after {len(answers)} attempts "
            f"(answers: {shown})"
        )


class ResponseFormatError(RunError):
    """The model's reply never matched ``response_format`` within the retry bound."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            f"the model's reply did not match the response format after {len(problems)} "
            f"attempts; last problem: {problems[-1] if problems else '?'}"
        )


class BudgetExceeded(RunError, UserError):
    """The next call would exceed the budget; it was not sent."""


class AgenticRecursionError(RunError, RecursionError):
    """Agentic calls nested past the recursion cap."""


class ToolArgumentsError(RunError):
    """The model called a tool with arguments that do not fit its signature."""


class ToolRefused(RunError):
    """A tool call the approval rules hold was not approved (refused, declined, nobody
    there to say yes); the model gets it back as the tool's error."""

    def __init__(self, tool: str, why: str) -> None:
        self.tool = tool
        super().__init__(f"the call of tool {tool!r} was not approved: {why}")


class ExecutorLost(RunError):
    """A map's executor (a Dask cluster) had no worker for longer than the setting allows:
    one line naming it and how long; ``results`` holds what finished (recorded) and each
    other item's error."""

    def __init__(self, executor: str, waited: float, message: str) -> None:
        self.executor = executor
        self.waited = waited
        self.results: list[object] = []
        super().__init__(message)


class McpServerError(RunError):
    """An MCP server that could not be started or reached, died, or did not answer in
    time; one line naming the server (and the tool when a call ended it)."""

    def __init__(self, server: str, message: str) -> None:
        self.server = server
        super().__init__(message)


class McpToolError(RunError):
    """An MCP tool answered with an error (``isError``); the model gets it back as the
    tool's error."""

    def __init__(self, server: str, tool: str, message: str) -> None:
        self.server = server
        self.tool = tool
        super().__init__(message)


class ProcessRunError(RunError):
    """The function raised in the child (or the child died); names the original error."""

    def __init__(self, target: str, error: str, traceback: str = "") -> None:
        self.target = target
        self.error = error
        self.traceback = traceback
        super().__init__(f"{target} failed in its child process: {error}")


class ProcessRunCancelled(ProcessRunError):
    """The child was stopped (``stop()``, Ctrl-C) before it finished."""


class RemoteError(RunError, RuntimeError):
    """An exception raised on a worker that could not be sent back as itself."""


class ProviderError(RunError, RuntimeError):
    """The provider failed for good (bad request, auth, malformed reply)."""

    # output modes the server refused in this attempt before it failed (a retry starts
    # from the mode that was accepted: the call's node still records the refusals)
    output_refused: list[str] | None = None


class MissingCredentials(ProviderError):
    """The provider needs a key the environment does not have; the message names it."""


class TransientProviderError(ProviderError):
    """The provider failed in a way worth retrying (rate limit, 5xx, timeout, reset)."""

    retry_after: float | None = None  # seconds the server asked to wait (Retry-After)


class UnsupportedParameter(ProviderError):
    """The server refused a request parameter for good (``parameter`` names it)."""

    def __init__(self, message: str, parameter: str) -> None:
        super().__init__(message)
        self.parameter = parameter


class ReplayMiss(ProviderError):
    """Replay found no recorded answer for a call; the message names the cell, the
    function and the closest recording."""


# -- not errors -----------------------------------------------------------------------------
class RunStopped(KeyboardInterrupt):
    """The run was asked to stop; raised before its next LLM call.  A KeyboardInterrupt,
    so open nodes end ``cancelled`` and ``except Exception`` in user code lets it pass."""


class RunKilled(RunStopped):
    """The run was stopped a second time; raised in its thread at once."""


class CorruptedFileWarning(UserWarning):
    """A damaged node file was skipped while reading a session (it is listed in
    ``problems``)."""
