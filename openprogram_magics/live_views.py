"""The live DAG widgets a kernel keeps: the newest finished cells', reused, not one a cell.

A cell's final output names its live widget (the extension shows the widget instead of the
saved drawing: a click reads the node's whole detail from the kernel).  ipywidgets keeps
every widget until it is closed, and a closed one is freed only by the cyclic collector
(anywidget makes each instance a class of its own; traitlets' observers are bound methods),
which in a kernel holding a long session's index runs a full pass rarely: a kernel that
made one widget a cell grew by ~25 KB a cell (issue 36, item 6).

:class:`LiveViews` keeps the newest :data:`KEPT`.  When one more cell finishes, the oldest
one's output is sent again without the widget's id (the extension draws its saved view, as
after a reopen, and a saved notebook names no widget that is gone) and its widget becomes
the spare that the next cell's live view takes (:meth:`LiveViews.widget`) instead of making
a new one; a second spare is closed.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple

#: Finished cells whose DAG stays live; older cells show their saved DAG.
KEPT = 20


class _Kept(NamedTuple):
    widget: Any
    display_id: str
    data: Mapping[str, Any]


class LiveViews:
    """The newest ``limit`` finished cells' live widgets, each with its output's id and data,
    and at most one spare widget no output shows."""

    def __init__(self, limit: int = KEPT) -> None:
        self.limit = limit
        self._kept: deque[_Kept] = deque()
        self._spare: Any = None
        self._lock = threading.Lock()  # a background cell ends on its own thread

    def __len__(self) -> int:
        return len(self._kept)

    def widget(self, node: Mapping[str, Any], title: str, session_id: str) -> Any:
        """A :class:`~openprogram_magics.widget.DagWidget` showing ``node`` (the head): the
        spare one restarted, else a new one."""
        from openprogram_magics.widget import DagWidget

        with self._lock:
            spare, self._spare = self._spare, None
        if spare is None:
            return DagWidget(nodes=[node], head_id=node["id"], title=title, session_id=session_id)
        spare.restart([node], head_id=node["id"], title=title, session_id=session_id)
        return spare

    def keep(self, widget: Any, display_id: str | None, data: Mapping[str, Any]) -> None:
        """``widget`` is shown live by the output ``display_id`` whose final ``data`` names
        it; the oldest kept ones beyond :attr:`limit` are retired."""
        if display_id is None:  # an output shows it that cannot be updated: not reused
            close_widget(widget)
            return
        with self._lock:
            self._kept.append(_Kept(widget, display_id, data))
            retired = [self._kept.popleft() for _ in range(len(self._kept) - self.limit)]
        for item in retired:
            self._retire(item)

    def _retire(self, item: _Kept) -> None:
        """The output shows its saved view from now on; the widget is free for another."""
        from IPython.display import update_display

        try:
            update_display(without_widget(item.data), raw=True, display_id=item.display_id)
        except BaseException:
            close_widget(item.widget)  # an output may still show it: not reused
            raise
        self._spare_or_close(item.widget)

    def _spare_or_close(self, widget: Any) -> None:
        with self._lock:
            spare = self._spare is None
            if spare:
                self._spare = widget
        if not spare:
            close_widget(widget)


def close_widget(widget: Any) -> None:
    """Close ``widget`` and the layout widget every ipywidgets DOM widget makes for itself."""
    layout = getattr(widget, "layout", None)
    widget.close()
    if layout is not None and hasattr(layout, "close"):
        layout.close()


def without_widget(data: Mapping[str, Any]) -> dict[str, Any]:
    """A final output's ``data`` whose saved DAG names no live widget (the rest as it is)."""
    from openprogram.view.saved import DAG_MIME, mime_value, read_saved

    out = dict(data)
    if DAG_MIME in out:
        saved = dict(read_saved(out[DAG_MIME]))
        saved.pop("widget", None)
        out[DAG_MIME] = mime_value(saved) if isinstance(out[DAG_MIME], str) else saved
    return out


#: This kernel's live views (one per process, as ipywidgets' registry of widgets is).
VIEWS = LiveViews()
