"""Pure views of the session DAG: layout, per-node summaries, static HTML/SVG and text.

Nothing here imports Jupyter: the CLI prints the text tree, a turn's output and an export
carry the static HTML, and :mod:`openprogram_magics.widget` builds the live widget on it.
"""

from openprogram.view.layout import (
    KNOWN_KINDS,
    KNOWN_STATUSES,
    compute_layout,
    node_kind,
    node_status,
)
from openprogram.view.placed import Layout, Placed
from openprogram.view.static import render_static_html, render_text_tree
from openprogram.view.summary import (
    DETAIL_FIELDS,
    DETAIL_LIMIT,
    MORE_LIMIT,
    content_summary,
    node_detail,
    node_summary,
    position_summary,
    summarize,
)

__all__ = [
    "DETAIL_FIELDS",
    "DETAIL_LIMIT",
    "KNOWN_KINDS",
    "KNOWN_STATUSES",
    "MORE_LIMIT",
    "Layout",
    "Placed",
    "compute_layout",
    "content_summary",
    "node_detail",
    "node_kind",
    "node_status",
    "node_summary",
    "position_summary",
    "render_static_html",
    "render_text_tree",
    "summarize",
]
