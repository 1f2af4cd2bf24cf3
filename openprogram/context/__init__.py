"""The DAG: the ``Call`` node, the pure ``Graph`` and prompt rendering."""

from openprogram.context.graph import Graph, Visible
from openprogram.context.nodes import FORMAT_VERSION, KINDS, Call, make_call, new_id, sanitize
from openprogram.context.render import render_messages

__all__ = [
    "FORMAT_VERSION",
    "KINDS",
    "Call",
    "Graph",
    "Visible",
    "make_call",
    "new_id",
    "render_messages",
    "sanitize",
]
