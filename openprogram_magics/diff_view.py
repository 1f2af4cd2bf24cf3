"""``%openprogram diff``'s output: the comparison side by side, kept when the notebook is saved.

A :class:`DiffView` is displayed as a mime bundle: ``text/html`` (the static side-by-side
drawing of :func:`openprogram.compare.render.render_html`: inline styles, no script, so it
shows the same after a reopen without a kernel, untrusted, and in ``nbconvert``),
``text/plain`` (the terminal's text) and the report as data
(``application/vnd.openprogram.diff+json``) for a richer frontend view.
"""

from __future__ import annotations

from typing import Any

from openprogram.compare.diffs import Report
from openprogram.compare.render import DIFF_MIME, render_html, render_text


class DiffView:
    """A displayable comparison (the value ``%openprogram diff`` returns)."""

    def __init__(self, report: Report, *, title: str, all_rows: bool = False) -> None:
        self.report = report
        self.title = title
        self.all_rows = all_rows

    def bundle(self) -> dict[str, Any]:
        return {
            "text/plain": f"{self.title}\n" + render_text(self.report, all_rows=self.all_rows),
            "text/html": render_html(self.report, title=self.title),
            DIFF_MIME: self.report.to_json(),
        }

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.bundle()

    def __repr__(self) -> str:
        return render_text(self.report, all_rows=self.all_rows)
