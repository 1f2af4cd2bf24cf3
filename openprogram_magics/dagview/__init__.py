"""Pure views of the session DAG: layout, per-node summaries, static HTML/SVG and text.

Nothing here imports Jupyter; :mod:`openprogram_magics.widget` builds the live widget on it.
"""

from openprogram_magics.dagview.layout import (
    KNOWN_KINDS,
    KNOWN_STATUSES,
    Layout,
    Placed,
    compute_layout,
    node_kind,
    node_status,
)
from openprogram_magics.dagview.sample import sample_nodes

__all__ = [
    "KNOWN_KINDS",
    "KNOWN_STATUSES",
    "Layout",
    "Placed",
    "compute_layout",
    "node_kind",
    "node_status",
    "sample_nodes",
]
