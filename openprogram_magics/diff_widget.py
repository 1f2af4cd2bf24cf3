"""``%openprogram diff A B --widget``: the comparison side by side in a live widget.

The view (``openprogram/view/assets/diff.js``, anywidget) draws every pair of the report —
A's side left, B's right — as a row that opens and closes on a click, and hides the
unchanged calls until "show unchanged calls" is ticked.  Synced traits: ``view`` (the
rows, :func:`widget_view`), ``show_same`` and ``opened`` (row indexes; the browser changes
them locally and tells the kernel).

What is displayed is a :class:`SavedDiff`: the static form of
:class:`~openprogram_magics.diff_view.DiffView` (``text/html``, ``text/plain``, the
report's ``application/vnd.openprogram.diff+json``) plus :data:`DIFF_VIEW_MIME` — the same
rows with the widget's model id — and no widget view.  The notebook extension draws that
part with the same ``diff.js`` at once (so a reopen with no kernel shows the interactive
view, never "model not found") and hands over to the live widget while this kernel has
it; without the extension, and in ``nbconvert``, the static HTML shows.
"""

from __future__ import annotations

from typing import Any, Final

import anywidget
import traitlets

from openprogram.compare.diffs import Report, Row
from openprogram.compare.render import delta_text, row_sections, summary_lines
from openprogram.view.page import ASSETS
from openprogram_magics.diff_view import DiffView

DIFF_VIEW_MIME: Final = "application/vnd.openprogram.diff-view+json"
MAX_WIDGET_ROWS: Final = 2_000  # rows a widget holds (the rest are counted)

__all__ = ["DIFF_VIEW_MIME", "DiffWidget", "SavedDiff", "widget_view"]


def _state(row: Row) -> str:
    """added / removed; changed (another answer); differs (its prompt, docstring, cell or
    arguments differ, the same answer); same."""
    if row.state != "paired":
        return row.state
    return "changed" if row.changed else "differs" if row.interesting else "same"


def widget_view(report: Report, *, title: str) -> dict[str, Any]:
    """The widget's data: the summary, the findings and every row (the unchanged ones too,
    for the toggle) with its sections' diffs, at most :data:`MAX_WIDGET_ROWS`."""
    rows = [
        {
            "path": r.path,
            "state": _state(r),
            "kind": r.pair.node.kind,
            "note": r.note,
            "sections": [[t, d] for t, d in row_sections(r)],
            "deltas": " · ".join(delta_text(k, *v) for k, v in r.deltas.items()),
        }
        for r in report.rows[:MAX_WIDGET_ROWS]
    ]
    return {
        "v": 1,
        "title": title,
        "a": report.a.label,
        "b": report.b.label,
        "summary": [line.strip() for line in summary_lines(report)],
        "findings": report.findings,
        "counts": {s: report.count(s) for s in ("paired", "added", "removed")},
        "rows": rows,
        "omitted": max(len(report.rows) - MAX_WIDGET_ROWS, 0),
    }


class DiffWidget(anywidget.AnyWidget):  # type: ignore[misc]
    """Two lines compared side by side: click a pair to open or close it."""

    # text, not paths: anywidget ties every instance to a path's change signal, for good
    _esm = (ASSETS / "diff.js").read_text(encoding="utf-8")
    _css = (ASSETS / "diff.css").read_text(encoding="utf-8")

    view = traitlets.Dict().tag(sync=True)
    show_same = traitlets.Bool(False).tag(sync=True)
    opened = traitlets.List(traitlets.Int()).tag(sync=True)

    def __init__(self, report: Report, *, title: str, **kwargs: Any) -> None:
        self.report = report
        self.title = title
        view = widget_view(report, title=title)
        # the rows that say something start open: changed, added, removed
        opened = [i for i, r in enumerate(view["rows"]) if r["state"] != "same"]
        super().__init__(view=view, opened=opened, **kwargs)

    def saved(self) -> dict[str, Any]:
        """The :data:`DIFF_VIEW_MIME` payload: what the extension draws without a kernel."""
        return {
            "view": self.view,
            "show_same": self.show_same,
            "opened": list(self.opened),
            "widget": self.model_id,
        }


class SavedDiff:
    """Displays a :class:`DiffWidget` by its data and static form (see the module)."""

    def __init__(self, widget: DiffWidget, *, all_rows: bool = False) -> None:
        self.widget = widget
        self.static = DiffView(widget.report, title=widget.title, all_rows=all_rows)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {**self.static.bundle(), DIFF_VIEW_MIME: self.widget.saved()}

    def __repr__(self) -> str:
        return repr(self.static)
