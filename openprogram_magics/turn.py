"""One ``%%openprogram`` cell as one turn: begin (before the body runs) and end (after).

``begin`` enters :func:`openprogram.session_context` for the resolved session, writes the
``turn`` node (its predecessor is this notebook's last turn, so two copies of a notebook
continuing one session fork instead of interleaving), installs the turn state with its
``call_id`` (so the cell's agentic calls hang under it), questioner and echo, and shows the
live DAG of the turn.  ``end`` records
the outcome, leaves the context (one commit per cell), hands the id back to the notebook
and replaces the live view with the final one (static fallback included).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

from openprogram.context.nodes import ERROR, INTERRUPTED, Call, make_call
from openprogram.context.outcome import finish
from openprogram.context.secrets import redact_secrets
from openprogram.settings import current as current_settings
from openprogram_magics import bridge
from openprogram_magics.ask import notebook_ask_handler
from openprogram_magics.notebook import MIME_TYPE, NotebookMeta

if TYPE_CHECKING:
    from openprogram.store.session.context import SessionHandle
    from openprogram.store.vars import AskHandler, TurnState


#: This kernel process (one per start or restart): the whole-session view marks where it
#: changes between turns, i.e. a restart or a re-run of the notebook in a new kernel.
RUN_ID = f"{os.getpid():x}-{int(time.time()):x}"


class CellTurn:
    def __init__(
        self,
        meta: NotebookMeta,
        *,
        source: str,
        execution_count: int | None,
        runtime: Any,
        live: bool = True,
        stream: bool = True,
        title: str | None = None,
        pinned: bool = False,
        ask: AskHandler = notebook_ask_handler,
    ) -> None:
        self.meta = meta
        self.ask = ask  # who answers the turn's ask_user
        self.pinned = pinned  # `--session ID` other than the notebook's: this cell only
        self.title = title  # what the session belongs to, if this turn creates it
        self.source = source
        self.execution_count = execution_count
        self.runtime = runtime
        self.live = live
        self.stream = stream
        self.stack = ExitStack()
        self.handle: SessionHandle | None = None
        self.node: Call | None = None
        self.state: TurnState | None = None  # the cell's turn state (once begun)
        self.forked_from: str | None = None
        self.replay_of: str | None = None  # the session a replay's turn replays
        self.widget: Any = None
        self.display_id: str | None = None
        self._unsubscribe: Any = None

    # -- begin ---------------------------------------------------------------------------
    def begin(self) -> None:
        from openprogram.store.session.context import session_context
        from openprogram.store.vars import current, using
        from openprogram_magics.sessions import place_of, shareable_title

        body = [ln for ln in self.source.strip().splitlines() if not ln.startswith("%%openprogram")]
        first = (body or [""])[0]
        handle = self.stack.enter_context(
            session_context(
                self.meta.session_id,
                runtime=self.runtime,
                source="notebook",
                title=shareable_title(self.title),  # meta.json travels: no home path
                message=f"[{self.execution_count}] {first}" if self.execution_count else first,
            )
        )
        self.handle = handle
        try:
            if self.title and self.title != "notebook":  # where it is used now (`sessions list`)
                handle.writer.session.note_place(place_of(self.title))
            # chain after this notebook's last turn; the store decides, atomically with
            # moving HEAD, whether that is a fork (HEAD had moved on) and records it
            predecessor = chained_after(handle.writer.session, self.meta)
            label = f"cell [{self.execution_count}]" if self.execution_count else "cell"
            node = make_call(
                "turn",
                label,
                input={
                    "text": redact_secrets(self.source),
                    "execution_count": self.execution_count,
                },
                predecessor=predecessor,
            )
            node.metadata["run"] = RUN_ID
            replay = bridge.replay_run()
            if replay is not None and replay.session_id != handle.session_id:
                self.replay_of = replay.session_id  # `openprogram run --replay`: a replay
                node.metadata["replay_of"] = replay.session_id  # session's turn, marked
                mark_replay_session(handle.writer.session, replay.session_id)
            self.node = handle.writer.append(node, turn_level=True)
            if node.metadata.get("forked_from_head") and self.replay_of is None:
                self.forked_from = predecessor  # (a replay branches from the root on purpose)
            echo = None
            if self.stream:  # a plain runtime.exec at the cell's top level streams here
                from openprogram.agentic_programming.echo import Echo
                from openprogram_magics.reply_output import reply_outputs

                # each reply one output updated in place (stdout in a terminal IPython)
                echo = Echo(node.id, per_reply=reply_outputs())
            # the cell's calls hang under its turn node: one replaced turn state
            self.stack.enter_context(using(call_id=node.id, ask=self.ask, echo=echo))
            self.state = current()
            if self.live:
                try:
                    self._show_live()
                except Exception as exc:  # a view must never break a turn
                    self.widget = None
                    print(f"openprogram: live DAG unavailable ({type(exc).__name__}: {exc})")
        except BaseException:
            self.stack.close()
            raise

    @contextmanager
    def joined(self) -> Iterator[None]:
        """Make a call run in this turn from a context that does not see it (an asyncio
        task started in the cell): the turn's state, for that call only."""
        from openprogram.store.vars import using_turn

        assert self.state is not None
        with using_turn(self.state):
            yield

    def _show_live(self) -> None:
        from openprogram.store.session import events

        assert self.handle is not None and self.node is not None
        if not bridge.live_frontend():  # nobody watches (a terminal, nbclient): the final view
            return
        root = {**self.node.to_dict(), "predecessor": None}  # this view shows one turn
        try:
            from IPython.display import display

            from openprogram_magics.live_views import VIEWS

            self.widget = VIEWS.widget(root, self._title(), self.handle.session_id)
        except ImportError:  # no anywidget (the [jupyter] extra): the final view only
            return
        handle = display(self.widget, display_id=True)
        self.display_id = getattr(handle, "display_id", None)
        sid, turn, root_id = self.handle.session_id, self.node.turn, self.node.id

        def on_write(session_id: str, node: dict[str, Any]) -> None:
            if session_id == sid and node.get("turn") == turn and self.widget is not None:
                if node.get("id") == root_id:
                    node = {**node, "predecessor": None}
                self.widget.upsert(node)

        self._unsubscribe = events.subscribe(on_write)

    def _title(self) -> str:
        """``openprogram · session S · turn N · cell [k]``, and a fork when there was one."""
        assert self.handle is not None and self.node is not None
        title = f"openprogram · session {self.handle.session_id} · turn {self.node.turn}"
        title += f" · {self.node.name}"
        if self.replay_of:
            title += f" · replay of session {self.replay_of}"
        elif self.forked_from:
            title += f" · forked from {self.forked_from} (the session had moved on)"
        return title

    # -- end -----------------------------------------------------------------------------
    def end(self, error: BaseException | None = None, result: Any = None) -> NotebookMeta:
        """Record the outcome, commit, and return the metadata the notebook should keep."""
        assert self.handle is not None and self.node is not None
        node, handle = self.node, self.handle
        remote = self.meta.remote if self.meta.session_id == handle.session_id else None
        meta = NotebookMeta(  # kept even if recording fails
            handle.session_id, node.id, remote, self.meta.provider, self.meta.model
        )
        try:
            if error is None:
                finish(node)
                if result is not None:
                    node.output = _short_repr(result)
            elif isinstance(error, KeyboardInterrupt):
                finish(node, INTERRUPTED, exc=error)
            else:
                finish(node, ERROR, exc=error, with_traceback=True)
            handle.writer.update(node)
        finally:
            if self._unsubscribe is not None:
                self._unsubscribe()
            self.stack.close()  # resets the context vars and commits the turn
        try:
            self._show_final(meta)
        except Exception as exc:  # a view must never lose the turn
            print(f"openprogram: could not draw the turn ({type(exc).__name__}: {exc})")
        return meta

    def bundle(self, meta: NotebookMeta) -> dict[str, Any]:
        """The final mime bundle: the turn's DAG as data (drawn by the shipped extension,
        live again if this kernel still has the widget), static HTML and text for every
        other renderer, and the session id.

        The widget's own view is left out on purpose: once the kernel is gone a saved
        widget view only says "model not found", and nbconvert would prefer it over the
        static drawing.  The extension finds the live widget by the id in the DAG data.
        """
        from openprogram.view import compute_layout, render_static_html, render_text_tree
        from openprogram.view.saved import DAG_MIME, mime_value, saved_view
        from openprogram.view.static import usage_text

        assert self.handle is not None and self.node is not None
        nodes = [
            saved_node(c.to_dict()) for c in _turn_nodes(self.handle.writer.session, self.node)
        ]
        for item in nodes:  # this view shows one turn: its link to the previous one is elsewhere
            if item["id"] == self.node.id:
                item["predecessor"] = None
        layout = compute_layout(nodes, self.node.id)
        payload = {**meta.to_json(), "turn": self.node.turn, "status": self.node.status}
        if self.pinned:  # not the notebook's session: readers of saved outputs skip it
            payload["pinned"] = True
        header = self._title()
        widget = getattr(self.widget, "model_id", None) if self.widget is not None else None
        cell = self.node.id
        return {
            # the nodes' tokens in one line (the header's), the cell's text left out (the
            # cell shows it): a one-call turn adds ~2 KB, a re-run changes ~5 lines
            "text/plain": " · ".join(filter(None, (header, usage_text(layout))))
            + "\n"
            + render_text_tree((), None, layout=layout, usage=False, cell=cell),
            "text/html": render_static_html((), None, title=header, layout=layout, cell=cell),
            DAG_MIME: mime_value(saved_view(layout, title=header, widget=widget, cell=cell)),
            MIME_TYPE: payload,
        }

    def _show_final(self, meta: NotebookMeta) -> None:
        try:
            from IPython.display import display, update_display
        except ImportError:
            return
        if self.widget is not None:  # views made from now on (the extension's) start complete
            self.widget.flush()
        data = self.bundle(meta)
        if self.display_id is not None:
            update_display(data, raw=True, display_id=self.display_id)
        else:
            display(data, raw=True)
        if self.widget is not None:  # live for the newest cells only (the rest: saved view)
            from openprogram_magics.live_views import VIEWS

            VIEWS.keep(self.widget, self.display_id, data)


def mark_replay_session(session: Any, source_id: str) -> None:
    """Say in a replay session's ``meta.json`` (written with the turn's commit) what it
    replays, and title it so, once."""
    if session.meta.get("replay_of") == source_id:
        return
    title = str(session.meta.get("title") or "")
    named = f"replay of {source_id}" + (f" · {title}" if title and title != source_id else "")
    session.set_meta(replay_of=source_id, title=named)


#: Node fields a turn's saved output leaves out: when it ran, for how long and in which
#: kernel process change on every run though nothing else did, and in a notebook under git
#: every changed line is a possible merge conflict.  The session keeps them and the live
#: view shows them; ``OPENPROGRAM_SAVED_TIMINGS=1`` keeps them in saved outputs too.
VOLATILE_METADATA = ("run", "duration_ms")


def saved_node(item: dict[str, Any]) -> dict[str, Any]:
    """``item`` (a node's dict) as a turn's saved output shows it (see VOLATILE_METADATA)."""
    if current_settings().saved_timings:
        return item
    out = {k: v for k, v in item.items() if k != "created_at"}
    meta = out.get("metadata")
    if isinstance(meta, dict):
        out["metadata"] = {k: v for k, v in meta.items() if k not in VOLATILE_METADATA}
    return out


def chained_after(session: Any, meta: NotebookMeta) -> str | None:
    """The turn the notebook's next turn follows: its last one, when ``session`` has it as
    a turn; None means after the session's HEAD (a notebook that has not written here)."""
    last = meta.last_turn_id
    return last if last and _is_turn(session, last) else None


def _is_turn(session: Any, node_id: str) -> bool:
    """Whether ``node_id`` is a turn-level node of ``session`` (one lookup, not a scan)."""
    try:
        return session.get(node_id).kind in ("turn", "reply", "root")  # type: ignore[no-any-return]
    except Exception:  # unknown id (another machine's metadata), unreadable file
        return False


def _turn_nodes(session: Any, root: Call) -> list[Call]:
    """``root`` and every node nested under it (by ``caller``), in seq order.

    Walks the session's children map (kept up to date on every write), so the cost is the
    size of this turn, not of the session.
    """
    out: list[Call] = []
    seen: set[str] = set()
    stack = [root.id]
    while stack:
        node_id = stack.pop()
        if node_id in seen:
            continue
        seen.add(node_id)
        try:
            call = root if node_id == root.id else session.get(node_id)
        except Exception:
            continue
        if call.turn != root.turn:
            continue
        out.append(call)
        stack.extend(session.children(node_id))
    out.sort(key=lambda c: c.seq)
    return out


def _short_repr(value: Any) -> str:
    """What a cell's value looked like, for the turn node (a failing ``repr`` included)."""
    try:
        return redact_secrets(repr(value))[:2000]
    except Exception as exc:
        return f"<{type(value).__name__} object: repr failed with {type(exc).__name__}>"
