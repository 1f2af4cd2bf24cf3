"""Running agentic calls in parallel threads without leaving the turn.

Threads do not inherit ContextVars, so a call made from a plain ``ThreadPoolExecutor``
would not know the session, the runtime or its caller.  This executor runs every task in
a copy of the submitting context: the calls land in the current turn, under the frame that
submitted them, with the ambient runtime.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class ContextThreadPoolExecutor(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` whose tasks see the submitter's session context."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        context = contextvars.copy_context()
        return super().submit(context.run, fn, *args, **kwargs)
