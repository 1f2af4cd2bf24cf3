"""The DAG: the ``Call`` node, the pure ``Graph`` and prompt rendering."""

from openprogram.context.graph import Graph, Visible
from openprogram.context.nodes import FORMAT_VERSION, KINDS, Call, make_call, new_id, sanitize
from openprogram.context.policy import ContextPolicy
from openprogram.context.render import full_messages, render_messages

__all__ = [
    "FORMAT_VERSION",
    "KINDS",
    "Call",
    "ContextPolicy",
    "Graph",
    "Visible",
    "full_messages",
    "make_call",
    "new_id",
    "render_messages",
    "sanitize",
]
