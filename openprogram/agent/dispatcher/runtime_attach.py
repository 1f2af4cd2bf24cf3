"""``_wrap_agentic_runtime_block``: a chat turn's agentic tool run in a child process.

With ``TurnRequest.tools_in_process`` each ``@agentic_function`` tool that a fresh
interpreter can import (a top-level function of a module) runs through
:mod:`openprogram.agent.process_runner` as a *runtime block*: the tool node is recorded
by the tool loop as always, the function's execution tree is written by the child under
that node and streams into the live DAG (and the turn's ``on_event``) while it runs, and a
stop — the run's stop flag, or Ctrl-C — ends that child process alone: SIGINT first (its
frames end ``cancelled``), then the kill of its process group; the parent refreshes the
session, which closes what a killed child left ``running`` (``interrupted``).  The tool
node ends ``cancelled`` and the turn with it, so nothing is left ``running``.

The listener hears ``{"type": "runtime_block", "node_id", "target", "pid"}`` when a block
starts.  HEAD is never touched here: the child's nodes hang under the tool node (not turn-level).
Tools that cannot run in a child (a notebook cell's function, a plain callable) run in
the kernel as before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from openprogram.agent.dispatcher.types import emit
from openprogram.agent.process_runner import ProcessRun, target_of
from openprogram.agentic_programming.stopping import stop_requested
from openprogram.agentic_programming.tool_loop import EventCallback
from openprogram.errors import RunStopped, UserError
from openprogram.store.vars import get_call_id

if TYPE_CHECKING:
    from openprogram.agent.dispatcher.types import TurnRequest

Tool = Callable[..., Any]
POLL_S = 0.05  # how soon a stop reaches the child
STOP_GRACE_S = 3.0  # how long a stopped child may take to end its frames before the kill
BLOCK_MARK = "__openprogram_runtime_block__"


def is_agentic(fn: Any) -> bool:
    return bool(getattr(fn, "__agentic__", False))


def _wrap_agentic_runtime_block(fn: Tool, *, on_event: EventCallback | None = None) -> Tool:
    """``fn`` as a tool whose every call runs in a child process (see the module)."""
    target = target_of(fn)  # refuses what a fresh interpreter cannot import

    @functools.wraps(fn)  # same signature and docstring: the same tool spec
    def block(**kwargs: Any) -> Any:
        run = ProcessRun(target, (), kwargs, on_event=on_event)
        run.start()
        if on_event is not None:
            _announce(target, run, on_event)
        try:
            while not run.poll(POLL_S):
                if stop_requested():
                    run.stop(STOP_GRACE_S)
                    raise RunStopped(f"stopped by request: {target}'s child process was ended")
        except KeyboardInterrupt:
            run.stop(STOP_GRACE_S)
            raise
        return run.wait()

    setattr(block, BLOCK_MARK, target)
    return block


def _announce(target: str, run: ProcessRun, notify: EventCallback) -> None:
    """Tell the turn's listener which process runs the block under which tool node."""
    pid = run.process.pid if run.process is not None else None
    notify({"type": "runtime_block", "node_id": get_call_id(), "target": target, "pid": pid})


def runtime_blocks(request: TurnRequest) -> dict[str, Tool]:
    """The request's tools, its agentic ones wrapped as runtime blocks when
    ``tools_in_process`` is set (the rest, and every tool otherwise, as they are)."""
    tools = dict(request.tools)
    if not request.tools_in_process:
        return tools
    for name, fn in tools.items():
        if is_agentic(fn) and not hasattr(fn, BLOCK_MARK):
            try:
                tools[name] = _wrap_agentic_runtime_block(
                    fn, on_event=lambda event: emit(request, event)
                )
            except UserError:  # defined in a cell or another function: runs in the kernel
                pass
    return tools
