"""The live DAG widgets a kernel keeps: the newest finished cells', not every one.

A cell's final output names its live widget (the extension shows the widget instead of the
saved drawing: a click reads the node's whole detail from the kernel).  Each widget holds
its turn's nodes, layout and summaries, and ipywidgets keeps every widget until it is
closed: a kernel that kept them all grew by ~25 KB a cell (issue 36, item 6).

:class:`LiveViews` keeps the newest :data:`KEPT`.  When one more cell finishes, the oldest
one's output is sent again without the widget's id (the extension draws its saved view, as
after a reopen, and a saved notebook names no widget that is gone) and its widget is closed
(its comm goes, in the kernel and in the browser).
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
    """The newest ``limit`` finished cells' live widgets, each with its output's id and data."""

    def __init__(self, limit: int = KEPT) -> None:
        self.limit = limit
        self._kept: deque[_Kept] = deque()
        self._lock = threading.Lock()  # a background cell ends on its own thread

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, widget: Any, display_id: str | None, data: Mapping[str, Any]) -> None:
        """``widget`` is shown live by the output ``display_id`` whose final ``data`` names
        it; the oldest kept ones beyond :attr:`limit` are retired."""
        if display_id is None:  # shown by no output that could be updated: nothing to keep
            close_widget(widget)
            return
        with self._lock:
            self._kept.append(_Kept(widget, display_id, data))
            retired = [self._kept.popleft() for _ in range(len(self._kept) - self.limit)]
        for item in retired:
            _retire(item)


def _retire(item: _Kept) -> None:
    """The output shows its saved view from now on; the widget is closed."""
    from IPython.display import update_display

    try:
        update_display(without_widget(item.data), raw=True, display_id=item.display_id)
    finally:
        close_widget(item.widget)


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
