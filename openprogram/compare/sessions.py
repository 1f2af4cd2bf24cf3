"""The adapter the notebook and the CLI call: a comparison of two sides of a stored session
(read through the public Session API: ``nodes()`` and ``head_id``)."""

from __future__ import annotations

from typing import Any

from openprogram.compare.diffs import Report, compare
from openprogram.compare.sides import Nodes, sides


def diff_session(session: Any, a: str | None, b: str | None, mode: str = "turns") -> Report:
    """Compare ``a`` and ``b`` of ``session`` (``mode``: ``turns``, ``lines`` or ``runs``);
    UserError (one line) when a side cannot be found."""
    index = Nodes(session.nodes(), session.head_id)
    side_a, side_b, shared = sides(index, a, b, mode)
    return compare(index, side_a, side_b, shared)


def mode_of(lines: bool, runs: bool) -> str:
    if lines and runs:
        from openprogram.errors import UserError

        raise UserError("diff: --lines and --runs do not go together")
    return "runs" if runs else "lines" if lines else "turns"


def branch_point(session_id: str, spec: str) -> str:
    """The turn a ``%%openprogram --from NODE`` cell follows: NODE's turn-level node
    (NODE may be any node of it, a turn number or ``head``); UserError when the session or
    the node is not there."""
    from openprogram.errors import UserError
    from openprogram.store.session.store import default_db

    db = default_db()
    if not db.exists(session_id):
        raise UserError(f"--from {spec}: session {session_id} has no turns yet")
    session = db.open(session_id)
    index = Nodes(session.nodes(), session.head_id)
    node = index.turn_of(index.find(spec))
    if node.kind not in ("turn", "reply", "root"):
        raise UserError(f"--from {spec}: node {node.id} is in no turn")
    return node.id
