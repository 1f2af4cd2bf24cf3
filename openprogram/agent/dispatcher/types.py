"""What goes into a chat turn and what comes out of it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from openprogram.agentic_programming.tool_loop import Event, EventCallback

if TYPE_CHECKING:
    from openprogram.agentic_programming.runtime import Runtime

Tool = Callable[..., Any]

DEFAULT_SYSTEM = (
    "You are a helpful assistant in a chat. Answer the user's last message, using the "
    "conversation so far; call a tool when it gives you something you cannot know yourself."
)


@dataclass
class TurnRequest:
    """One user message.  ``session_id=None`` starts a new session (its id is on the result);
    passing it back continues that session.  ``fork_from`` links the message after that
    node instead of HEAD (a branch).  ``tools`` maps a name to a Python callable."""

    session_id: str | None
    text: str
    agent_id: str = "main"
    runtime: Runtime | None = None
    on_event: EventCallback | None = None
    fork_from: str | None = None
    system: str = DEFAULT_SYSTEM
    tools: dict[str, Tool] = field(default_factory=dict)
    max_iterations: int = 8
    # a goal (text or ``goal.Goal``): after each turn a judge decides whether it is met and,
    # if not, a continuation turn follows (``dispatcher/goal.py``)
    goal: Any = None
    continuation: dict[str, Any] | None = None  # set on a continuation turn: {"goal", "n"}
    # the agentic tools (``@agentic_function``s importable by module path) run each call
    # in a child process (``runtime_attach``): killable on a stop, the turn consistent
    tools_in_process: bool = False
    # the notebook cell the message was typed in (its whole text, ``%%openprogram`` line
    # included): kept on the turn node (``metadata.cell``), by which ``stale`` knows the cell
    cell: str | None = None


#: Why a turn failed (``TurnResult.reason``): one taxonomy, mapped in ``error_path``.
REASONS = ("provider", "budget", "context_overflow", "tool", "cancelled", "user_error", "bug")


@dataclass
class TurnResult:
    """How the turn ended: ``status`` is ``completed``, ``error`` or ``cancelled``; its
    ``text`` and ``error`` with every known secret masked (``***``).

    A turn that did not complete says why: ``reason`` is one of :data:`REASONS`,
    ``retryable`` whether the same request may succeed as it is, and ``retry_after_s``
    how long to wait first when the provider said so."""

    session_id: str
    user_node_id: str
    reply_node_id: str | None
    text: str
    status: str
    error: str | None = None
    created: bool = False  # the turn created the session
    goal: dict[str, Any] | None = None  # the goal's state after this turn (goal.GoalState)
    compacted: str | None = None  # the summary node written for this turn's prompt
    reason: str | None = None
    retryable: bool = False
    retry_after_s: float | None = None
    note: str | None = None  # what the reply node's ``metadata.note`` says (an empty reply)

    def __post_init__(self) -> None:
        # what a caller shows or prints: a secret the model or a tool echoed is masked
        # here as in the session's files (the turn's values stay whole in the program)
        from openprogram.context.secrets import redact_secrets

        self.text = redact_secrets(self.text)
        if self.error:
            self.error = redact_secrets(self.error)


def emit(request: TurnRequest, event: Event) -> None:
    """Hand ``event`` to the caller; a broken listener never breaks the turn."""
    if request.on_event is None:
        return
    try:
        request.on_event(event)
    except Exception:
        pass
