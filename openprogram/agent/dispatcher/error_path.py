"""The except branch: the failure lands on the reply node, the caller gets an error result.

Which node records it and where HEAD stays is ``TurnWriter.record_failure``'s business.
Why the turn failed is :func:`classify`'s: the one place that maps the exceptions of
:mod:`openprogram.errors` (and anything else) onto the taxonomy of ``TurnResult.reason``
(:data:`~openprogram.agent.dispatcher.types.REASONS`), with whether the same request may
succeed as it is (``retryable``) and how long the provider asked to wait first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from openprogram import errors
from openprogram.agent.dispatcher.compaction import is_context_overflow
from openprogram.agent.dispatcher.types import TurnResult
from openprogram.agentic_programming.function import is_cancellation
from openprogram.context.nodes import CANCELLED, ERROR
from openprogram.context.outcome import error_text

if TYPE_CHECKING:
    from openprogram.agent.dispatcher.prep import PreparedTurn


class Reason(NamedTuple):
    reason: str
    retryable: bool = False
    retry_after_s: float | None = None


def classify(exc: BaseException) -> Reason:
    """The taxonomy entry of ``exc`` (first match wins: a budget error is also a user
    error, a missing key also a provider error)."""
    if is_cancellation(exc) or isinstance(exc, errors.ProcessRunCancelled):
        return Reason("cancelled")
    if isinstance(exc, errors.BudgetExceeded):
        return Reason("budget")
    if is_context_overflow(exc):
        return Reason("context_overflow", retryable=True)  # after compaction
    if isinstance(exc, errors.MissingCredentials | errors.ReplayMiss):
        return Reason("user_error")
    if isinstance(exc, errors.TransientProviderError):
        return Reason("provider", True, _retry_after(exc))
    if isinstance(exc, errors.ChoiceError | errors.ResponseFormatError):
        return Reason("provider", retryable=True)  # the model may answer better next time
    if isinstance(exc, errors.ProviderError):
        return Reason("provider")
    if isinstance(exc, errors.ToolArgumentsError | errors.ToolRefused | errors.ProcessRunError):
        return Reason("tool")
    if isinstance(exc, errors.RefLocked | errors.RefChanged):
        return Reason("user_error", retryable=True, retry_after_s=1.0)  # another writer
    if isinstance(exc, errors.UserError | errors.SessionError | errors.AgenticRecursionError):
        return Reason("user_error")
    return Reason("bug")  # InternalError, RemoteError, anything not raised on purpose


def _retry_after(exc: BaseException) -> float | None:
    value = getattr(exc, "retry_after", None) or getattr(exc, "retry_after_s", None)
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def handle_turn_error(prepared: PreparedTurn, exc: BaseException) -> TurnResult:
    status = CANCELLED if is_cancellation(exc) else ERROR
    error = error_text(exc)
    node = prepared.writer.record_failure(error, status)
    why = classify(exc)
    node.metadata["reason"] = why.reason
    prepared.writer.nodes.update(node)
    writer = prepared.writer
    return TurnResult(
        session_id=prepared.session_id,
        user_node_id=writer.head_for_finalize(),
        reply_node_id=writer.reply.id if writer.reply is not None else None,
        text=str(node.output or ""),
        status=status,
        error=error,
        created=prepared.created,
        reason=why.reason,
        retryable=why.retryable,
        retry_after_s=why.retry_after_s,
    )
