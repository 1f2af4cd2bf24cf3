"""What a ``%%openprogram --chat`` cell shows: its reply, as ONE output updated in place,
and its turns' DAG, drawn like every other cell's turn (live while it runs when a frontend
watches, then the final drawing with the session's mime part).

The reply streams into one ``display_data`` output
(:class:`~openprogram_magics.reply_output.ReplyOutput`, the text sink the turn's echo
writes to, as a plain cell's streamed replies do): a frontend shows it grow, and a notebook
saved by any client holds the whole reply as one output.  In a terminal IPython the reply
streams to stdout instead.

The DAG (:class:`ChatDag`) covers the cell's turns: the user message and, with a goal,
its continuation turns, each with its reply, the reply's model calls and the tools it ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openprogram_magics import bridge


class ChatDag:
    """The DAG of a chat cell's turns: live while they run (when ``live``), final at the end.

    :meth:`on_event` hears the dispatcher's events (``user`` opens each turn); a view must
    never break a turn, so a failure to draw is one printed line."""

    def __init__(self, live: bool) -> None:
        self.live = live
        self.session_id: str | None = None
        self.turn_ids: list[str] = []
        self.turns: set[int] = set()  # their turn numbers (what the live view listens for)
        self.widget: Any = None
        self.display_id: str | None = None
        self._unsubscribe: Any = None

    def on_event(self, event: Mapping[str, Any]) -> None:
        if event.get("type") != "user":
            return
        from openprogram.agent.session_db import default_db

        self.session_id = str(event["session_id"])
        node = default_db().open(self.session_id).get(str(event["node_id"]))
        self.turn_ids.append(node.id)
        self.turns.add(node.turn)
        if not self.live:
            return
        try:
            self._show_live(node.to_dict())
        except Exception as exc:  # a view must never break a turn
            self.live, self.widget = False, None
            print(f"openprogram: live DAG unavailable ({type(exc).__name__}: {exc})")

    def _show_live(self, node: dict[str, Any]) -> None:
        from IPython.display import display

        from openprogram.store.session import events
        from openprogram_magics.live_views import VIEWS

        if self.widget is not None:  # a continuation turn: the view follows it
            self.widget.upsert(node, head_id=node["id"])
            return
        assert self.session_id is not None
        self.widget = VIEWS.widget(
            {**node, "predecessor": None},  # this view shows the cell's turns
            f"openprogram · session {self.session_id} · chat turn",
            self.session_id,
        )
        handle = display(self.widget, display_id=True)
        self.display_id = getattr(handle, "display_id", None)
        first, sid = node["id"], self.session_id

        def on_write(session_id: str, item: dict[str, Any]) -> None:
            if session_id == sid and item.get("turn") in self.turns and self.widget is not None:
                self.widget.upsert({**item, "predecessor": None} if item["id"] == first else item)

        self._unsubscribe = events.subscribe(on_write)

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def show(self, header: str, payload: dict[str, Any]) -> None:
        """The final view: the turns' DAG, headed by ``header``, with ``payload`` (the
        session's mime part, which readers of the saved notebook use)."""
        from IPython.display import display, update_display

        self.close()
        data = self.bundle(header, payload)
        if self.widget is not None:  # views made from now on (the extension's) start complete
            self.widget.flush()
        if self.display_id is not None:
            update_display(data, raw=True, display_id=self.display_id)
        else:
            display(data, raw=True)
        if self.widget is not None:  # live for the newest cells only (the rest: saved view)
            from openprogram_magics.live_views import VIEWS

            VIEWS.keep(self.widget, self.display_id, data)

    def bundle(self, header: str, payload: dict[str, Any]) -> dict[str, Any]:
        from openprogram_magics.notebook import MIME_TYPE

        if self.session_id is None or not self.turn_ids:  # no turn was written
            return {"text/plain": header, MIME_TYPE: payload}
        from openprogram.view import compute_layout, render_static_html, render_text_tree
        from openprogram.view.saved import DAG_MIME, mime_value, saved_view

        nodes = self.nodes()
        layout = compute_layout(nodes, self.turn_ids[-1])
        widget = getattr(self.widget, "model_id", None) if self.widget is not None else None
        return {
            "text/plain": header + "\n" + render_text_tree((), None, layout=layout),
            "text/html": render_static_html((), None, title=header, layout=layout),
            DAG_MIME: mime_value(saved_view(layout, title=header, widget=widget)),
            MIME_TYPE: payload,
        }

    def nodes(self) -> list[dict[str, Any]]:
        """The cell's turns and every node under them, as their saved output shows them."""
        from openprogram.agent.session_db import default_db
        from openprogram_magics.turn import _turn_nodes, saved_node

        assert self.session_id is not None
        session = default_db().open(self.session_id)
        out: list[dict[str, Any]] = []
        for turn_id in self.turn_ids:
            out += [saved_node(c.to_dict()) for c in _turn_nodes(session, session.get(turn_id))]
        for item in out:  # the link to the turn before the cell's is drawn elsewhere
            if item["id"] == self.turn_ids[0]:
                item["predecessor"] = None
        return out


def live_view(magics: Any) -> bool:
    """Whether a chat cell draws its DAG live (the notebook's setting, a watching frontend)."""
    return bool(getattr(magics, "live_dag", True)) and bridge.live_frontend()
