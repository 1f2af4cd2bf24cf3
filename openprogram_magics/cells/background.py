"""``%%openprogram --background``: the cell's body runs on a thread as one turn.

The cell returns at once.  Under it: a progress line (state, stage, calls, tokens,
elapsed) refreshed on every node the run writes and twice a second, and the turn's live
DAG.  The thread runs in a copy of the cell's context, so whatever the run prints or
displays (and a streamed reply) lands under its own cell even while other cells execute.
The body runs in the notebook's namespace: names it assigns are there for later cells.
``%openprogram stop`` stops it after the call in flight; a second stop kills it.

Why a thread and not the process runner: the body is notebook code (functions defined in
cells, closures, open objects) that a spawned process could not unpickle, its results are
meant for the namespace, and one process stays the session's only writer.
"""

from __future__ import annotations

import ast
import asyncio
import contextvars
import html
import inspect
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from openprogram.agent.background import BackgroundRun, Progress

if TYPE_CHECKING:
    from openprogram_magics.cells import CellHost
    from openprogram_magics.cells.options import CellOptions

TICK = 0.5  # seconds between refreshes of the progress line while nothing is written
MIME_PROGRESS = "application/vnd.openprogram.progress+json"


class ProgressLine:
    """One display under the cell, updated in place by display id."""

    def __init__(self, label: str) -> None:
        from IPython.display import display

        self.label = label
        handle = display(self._bundle(Progress()), raw=True, display_id=True)
        self.display_id = getattr(handle, "display_id", None)
        self._lock = threading.Lock()
        self.error = ""

    def _bundle(self, p: Progress) -> dict[str, Any]:
        text = f"openprogram background {self.label}: {p.line()}"
        if getattr(self, "error", ""):
            text += f" — {self.error}"
        return {
            "text/plain": text,
            "text/html": (
                f'<pre class="op-progress" data-state="{p.state}">{html.escape(text)}</pre>'
            ),
            MIME_PROGRESS: {
                "state": p.state,
                "stage": p.stage,
                "calls": p.calls,
                "tokens": p.tokens,
                "elapsed": round(p.elapsed, 3),
            },
        }

    def update(self, p: Progress) -> None:
        from IPython.display import update_display

        if self.display_id is None:
            return
        with self._lock:
            update_display(self._bundle(p), raw=True, display_id=self.display_id)


def start_background_cell(
    host: CellHost, opts: CellOptions, body: str, source: str
) -> BackgroundRun:
    """Begin the cell's turn on a thread, return its run once the turn exists."""
    from IPython.core.error import UsageError

    from openprogram.errors import UserError
    from openprogram_magics.ask import request_ask_handler
    from openprogram_magics.turn import CellTurn

    turns = host.turns
    try:
        meta, pinned = turns.cell_session(opts.session)
    except UserError as exc:
        raise UsageError(str(exc)) from None
    shell = host.shell
    assert shell is not None
    ask = request_ask_handler(shell)  # this cell's stdin, while the cell still runs
    count = turns.cell_count  # the frontend's In [n] (IPython has counted on by now)
    label = f"[{count}]" if count else ""
    # top-level `await` is allowed, as in any cell; a SyntaxError stops the cell now
    code = compile(body, f"<background cell {label}>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    runtime = turns.runtime()
    line = ProgressLine(label)
    namespace = shell.user_ns
    begun: dict[str, str] = {}

    def target(run: BackgroundRun) -> None:
        turn = CellTurn(
            meta,
            source=source,
            execution_count=count,
            runtime=runtime,
            live=turns.settings.live_dag and not opts.no_dag,
            stream=turns.settings.stream,
            pinned=pinned,
            ask=ask,
        )
        turn.begin()
        assert turn.handle is not None and turn.node is not None
        begun["turn_id"] = turn.node.id
        run.attach(turn.handle.session_id, turn.node.turn)
        announced.wait()  # the cell says it runs in the background before the body prints
        error: BaseException | None = None
        try:
            if code.co_flags & inspect.CO_COROUTINE:  # awaits: on an event loop of this thread
                asyncio.run(eval(code, namespace))
            else:
                exec(code, namespace)
        except BaseException as exc:
            error = exc
            line.error = f"{type(exc).__name__}: {exc}"[:300]
            raise
        finally:
            turn.end(error)

    announced = threading.Event()
    run = BackgroundRun(target, label=label)
    run.on_progress(line.update)
    run.start(contextvars.copy_context())
    try:
        run.wait_attached(30)
        if "turn_id" in begun:  # the notebook's next cell chains after this turn (unless pinned)
            turns.turn_done(replace(meta, last_turn_id=begun["turn_id"]), pinned)
        print("openprogram: running in the background; `%openprogram stop` stops it")
    finally:
        announced.set()

    def tick() -> None:
        while run.running:
            line.update(run.progress())
            run.thread.join(TICK)
        line.update(run.progress())

    threading.Thread(target=tick, name="openprogram-bg-progress", daemon=True).start()
    return run
