"""``%openprogram stale``: the turns whose cell, docstring, code, model or provider changed
since they were recorded (:mod:`openprogram.compare.stale`, the rule ``openprogram run
--only-stale`` follows), and ``%openprogram dag`` with those turns marked ``stale``.

What runs now is read from the kernel: the ``@agentic_function``s defined in the
notebook's namespace (their ``__agentic_hashes__``), the provider and model of the
notebook's runtime, and the cells of the saved notebook (``--notebook``, else the one the
frontend or the server names; without one the cell check is left out and the report says
so).
"""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from openprogram.compare.stale import Now, StaleReport, cell_hash, stale_turns
from openprogram_magics.commands import CommandError, Host, arg, command, session_or_current

MARKED_MAX = 5_000  # `dag` marks stale turns of sessions up to this many nodes (read whole)


def kernel_functions(host: Host) -> dict[str, dict[str, Any]]:
    """The agentic functions defined in the kernel now, by the name their nodes get."""
    namespace = getattr(getattr(host, "shell", None), "user_ns", None) or {}
    out: dict[str, dict[str, Any]] = {}
    for value in list(namespace.values()):
        hashes = getattr(value, "__agentic_hashes__", None)
        if isinstance(hashes, dict) and callable(value):
            name = getattr(value, "__agentic_name__", None) or getattr(value, "__name__", "")
            out[str(name)] = hashes
    return out


def kernel_model(host: Host) -> tuple[str, Any] | None:
    """(provider, model) the notebook's next call would use (a replay: its fallback's)."""
    try:
        runtime = host.runtime()
    except Exception:  # no provider configured: the model check is left out
        return None
    provider = getattr(runtime, "provider", None)
    if getattr(provider, "name", None) == "replay":
        provider = getattr(provider, "fallback", None)
        return (provider.name, getattr(provider, "model", None)) if provider else None
    if provider is None:
        return None
    return (str(provider.name), runtime.model or getattr(provider, "model", None))


def notebook_cells(host: Host, explicit: str | None) -> list[str] | None:
    """The turn cells of the saved notebook (``%%openprogram`` ones; every code cell in
    ``auto`` mode), or None when no notebook file is known."""
    found = _turn_cells(host, explicit)
    return None if found is None else [str(c.get("source", "")) for c in found]


def _turn_cells(host: Host, explicit: str | None) -> list[dict[str, Any]] | None:
    import nbformat

    from openprogram_magics.sharing import notebook_file

    path = notebook_file(explicit)
    if path is None:
        return None
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:
        raise CommandError(f"stale: cannot read {path}: {exc}") from None
    auto = bool(getattr(host, "auto", False))
    codes = [c for c in nb.cells if c.get("cell_type") == "code"]
    return [c for c in codes if str(c.source).lstrip().startswith("%%openprogram") or auto]


def shown_turns(cells: list[dict[str, Any]], session_id: str) -> dict[str, str]:
    """The turn of ``session_id`` each saved cell's output shows (the ``MIME_TYPE`` part a
    turn writes under its cell), by the hash of the cell's text."""
    from openprogram_magics.notebook import MIME_TYPE

    out: dict[str, str] = {}
    for cell in cells:
        outputs = cell.get("outputs")
        for output in outputs if isinstance(outputs, list) else ():
            data = output.get("data") if isinstance(output, dict) else None
            part = data.get(MIME_TYPE) if isinstance(data, dict) else None
            if not isinstance(part, dict) or part.get("session_id") != session_id:
                continue
            turn = part.get("last_turn_id")
            if isinstance(turn, str) and turn:
                out[cell_hash(str(cell.get("source", "")))] = turn
    return out


def notebook_now(host: Host, session_id: str, explicit: str | None) -> Now:
    """What would run now, and the turn each saved cell shows (:class:`Now`)."""
    cells = _turn_cells(host, explicit)
    texts = None if cells is None else [str(c.get("source", "")) for c in cells]
    shown = {} if cells is None else shown_turns(cells, session_id)
    return Now(texts, kernel_functions(host), kernel_model(host), shown)


def kernel_stale(host: Host, session_id: str, notebook: str | None = None) -> StaleReport:
    from openprogram.agent.session_db import default_db

    db = default_db()
    if not db.exists(session_id):
        raise CommandError(f"session {session_id} has no turns yet")
    return stale_turns(db.open(session_id).nodes(), notebook_now(host, session_id, notebook))


class StaleView:
    """What ``%openprogram stale`` returns: the report, shown as its lines."""

    def __init__(self, report: StaleReport, session_id: str) -> None:
        self.report = report
        self.session_id = session_id

    def __repr__(self) -> str:
        return f"session {self.session_id}: " + "\n".join(self.report.lines())

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(repr(self))


@command(
    "stale",
    "the turns whose cell, docstring, code, model or provider changed since recorded",
    arg("--notebook", metavar="NB", help="the notebook file whose cells to check"),
    arg("--session", default=None, metavar="ID", help="another session than the notebook's"),
)
def stale(host: Host, args: Namespace) -> StaleView:
    sid = session_or_current(host, args.session)
    return StaleView(kernel_stale(host, sid, args.notebook), sid)


def marked_dag(host: Host, session_id: str, last_turns: int | None) -> Any:
    """``%openprogram dag``'s widget, its stale turns marked (``metadata.stale``: why) on
    the drawn copies of the nodes; a session above :data:`MARKED_MAX` nodes unmarked."""
    from openprogram.agent.session_db import default_db
    from openprogram_magics.widget import show_dag

    db = default_db()
    if not db.exists(session_id):
        return show_dag(session_id, last_turns=last_turns)
    session = db.open(session_id)
    if session.totals()["nodes"] > MARKED_MAX:
        return show_dag(session_id, last_turns=last_turns)
    calls = session.nodes()
    why = stale_turns(calls, notebook_now(host, session_id, None)).by_turn()
    nodes = [c.to_dict() for c in calls]
    for node in nodes:
        if node["id"] in why:
            node["metadata"] = {**(node.get("metadata") or {}), "stale": why[node["id"]]}
    named = session.meta.get("title")
    title = f"{session_id} · {named}" if named and named != session_id else session_id
    return show_dag(
        session_id, nodes=nodes, head_id=session.head_id, last_turns=last_turns, title=title
    )
