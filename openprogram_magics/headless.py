"""Running a notebook headless (``openprogram run nb.ipynb``), continuing its session.

A headless runner owns the file, so it does what the browser extension does in a live
frontend: before the first cell it hands the kernel the notebook's ``metadata.openprogram``
(the same silent request the extension sends), and afterwards it writes the session id
found in the turns' outputs back into the metadata.  Like ``nbconvert --execute
--inplace`` the result is saved in place unless ``output`` is given.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openprogram.errors import UserError
from openprogram.settings import Replay
from openprogram.settings import current as current_settings
from openprogram_magics.notebook import (
    METADATA_KEY,
    NotebookMeta,
    last_turn_in_outputs,
    parse_metadata,
    session_from_outputs,
)


@dataclass
class RunResult:
    path: Path
    session_id: str | None
    error: str | None  # the first cell error, if execution stopped
    written: bool = True  # False: a replay in place left the file untouched
    notes: list[str] = field(default_factory=list)  # what a replay says (one line each)


def state_payload(metadata: Any, path: str, replay: dict[str, Any] | None = None) -> str:
    """The base64 payload the kernel's bridge decodes (see ``openprogram_magics.bridge``);
    ``replay`` (``{"session_id", "record_misses"}``) tells the kernel the run is a replay."""
    payload: dict[str, Any] = {"metadata": metadata, "path": path}
    if replay is not None:
        payload["replay"] = replay
    return base64.b64encode(json.dumps(payload).encode()).decode()


def run_notebook(
    path: str | Path,
    output: str | Path | None = None,
    *,
    timeout: int = 600,
    kernel_name: str | None = None,
    replay: bool = False,
    record_misses: bool = False,
    only_stale: bool = False,
) -> RunResult:
    """Execute the notebook, continuing its session; with ``replay`` every LLM call is
    answered from that session's recording (no key needed), the run's turns forming a
    branch from the root of a local replay session forked from it (never the notebook's
    own session: :mod:`openprogram.store.session.remotes`) — so each prompt is rendered
    as in the recorded run — and with ``record_misses`` a call not recorded is answered
    by the provider the notebook asks for (recorded on that branch) instead of failing;
    ``only_stale``: a replay whose stale cells (cell text, a docstring or code, the
    provider or model changed since recorded) run live, every call of them, and the rest
    replay.  A replay writes ``output``, or the notebook in place only when it finished
    and showed something else (:func:`_replay_result`)."""
    import nbformat

    from openprogram_magics.kernels import QuietClient

    source = Path(path)
    try:
        nb = nbformat.read(source, as_version=4)
    except RecursionError:  # json's parser on nesting hundreds deep
        raise UserError(f"{source.name} is not a readable notebook (nested too deeply)") from None
    except ValueError as exc:  # not JSON, not a notebook
        raise UserError(f"{source.name} is not a readable notebook ({exc})") from None
    stored = nb.metadata.get(METADATA_KEY)
    recorded = copy.deepcopy(stored)  # what a replay written in place keeps
    parsed = parse_metadata(stored, where=f"{source.name} metadata.openprogram")  # fail early
    settings = current_settings()  # the kernel is told them in its environment
    mode: dict[str, Any] | None = None  # the kernel skips side-effect commands in a replay
    if only_stale:
        replay = record_misses = True
    if replay:  # its turns go to a local replay session (see store.session.remotes)
        stored, forced = replay_setup(parsed, source.name, record_misses)
        settings = settings.with_changes(replay=dataclasses.replace(forced, stale=only_stale))
        mode = {"session_id": forced.session_id, "record_misses": record_misses}
    else:
        stored = with_last_turn(stored, nb.cells)
    client = QuietClient(
        nb,
        timeout=timeout,
        kernel_name=kernel_name or nb.metadata.get("kernelspec", {}).get("name", "python3"),
        resources={"metadata": {"path": str(source.parent.resolve())}},
        store_widget_state=True,
        record_timing=False,  # no wall-clock stamps per cell: a re-run changes no line for them
    )
    bundles = saved_bundles(nb.cells) if replay else {}  # a replay skips embed: kept
    before = copy.deepcopy(nb.cells) if replay else []  # what a replay must reproduce
    for cell in nb.cells:  # like papermill: the file shows this run only, nothing stale
        if cell.get("cell_type") == "code":
            cell.outputs, cell.execution_count = [], None
    try:
        error = _execute(client, nb, stored, source, mode, settings.environ(os.environ))
    except BaseException:
        if mode is not None:  # a kernel that never ran a turn leaves no replay session
            _drop_unused_fork(stored.get("session_id"))
        raise
    for index, outputs in bundles.items():  # after the note saying embed was skipped
        nb.cells[index].outputs.extend(outputs)
    write_back(nb)
    target = Path(output) if output is not None else source
    if replay:
        return _replay_result(
            nb, before, source, target, output is not None, error, only_stale, recorded
        )
    nbformat.write(nb, target)
    session = nb.metadata.get(METADATA_KEY, {}).get("session_id")
    return RunResult(target, session, error)


def _replay_result(
    nb: Any,
    before: list[Any],
    source: Path,
    target: Path,
    asked: bool,
    error: str | None,
    only_stale: bool,
    recorded: Any = None,
) -> RunResult:
    """Write what a replay showed — to ``-o OUT`` always; in place only when it finished
    and some output differs (a replay that reproduced everything, or failed, leaves the
    notebook as it was: no byte changed, nothing for ``git pull`` to trip over) — and say
    which cells ran live.  Written in place, the notebook keeps naming its own session
    (``recorded``: its metadata before the run).  A replay session nothing refers to
    (nothing written) and that holds nothing to look at (no failure, no call answered
    live) is deleted."""
    import nbformat

    from openprogram.store.session.remotes import live_turns
    from openprogram.store.session.store import default_db
    from openprogram_magics.replay_outputs import differing_cells

    fork = str(nb.metadata.get(METADATA_KEY, {}).get("session_id") or "") or None
    differ = differing_cells(before, nb.cells)
    notes: list[str] = []
    store = default_db()
    live: list[Any] = []
    if fork is not None and store.exists(fork):
        session = store.open(fork)
        session.refresh()  # the kernel wrote its turns
        live = live_turns(session.nodes())
    if only_stale or live:
        which = ", ".join(_cell_label(t) for t in live) or "none (every call was replayed)"
        notes.append(f"ran live ({'stale' if only_stale else 'not recorded'}): {which}")
    written = asked or (error is None and bool(differ))
    if written and not asked and isinstance(recorded, dict):  # in place: the notebook
        nb.metadata[METADATA_KEY] = recorded  # keeps its own session (the replay's is local)
    if written:
        nbformat.write(nb, target)
    elif error is None:
        notes.append(f"{source.name} unchanged: the replay reproduced every output")
    else:
        notes.append(f"{source.name} unchanged (the replay failed; -o OUT keeps what it showed)")
    if fork is not None and store.exists(fork):
        if not written and error is None and not live:  # nothing to look at, nothing paid
            store.delete_session(fork)
            fork = None
        else:
            notes.append(
                f"the replay's turns: session {fork}, kept on this machine "
                "(`sessions push` sends it only with --with-replays)"
            )
    session_id = str(nb.metadata.get(METADATA_KEY, {}).get("session_id") or "") or None
    return RunResult(target, session_id if written else None, error, written, notes)


def _drop_unused_fork(fork: Any) -> None:
    """Delete the replay session ``fork`` if no replay turn reached it (a kernel that did
    not start, a run stopped before its first turn)."""
    from openprogram.store.session.store import default_db

    store = default_db()
    if not isinstance(fork, str) or not store.exists(fork):
        return
    session = store.open(fork)
    session.refresh()  # what the kernel committed
    if not any(n.kind == "turn" and n.metadata.get("replay_of") for n in session.nodes()):
        store.delete_session(fork)


def _cell_label(turn: Any) -> str:
    """``cell [3] (summarize("today"))``: a replay turn by its cell and first line."""
    text = turn.input.get("text", "") if isinstance(turn.input, dict) else ""
    lines = [ln for ln in str(text).splitlines() if ln.strip() and not ln.startswith("%%")]
    first = lines[0].strip() if lines else ""
    first = first if len(first) <= 40 else first[:39] + "…"
    return f"{turn.name} ({first})" if first else str(turn.name)


def saved_bundles(cells: list[Any]) -> dict[int, list[Any]]:
    """The outputs holding a session bundle (``%openprogram embed``), by cell: a replay
    skips embed, so the bundle the file carried stays in it."""
    from openprogram_magics.sharing import BUNDLE_MIME

    found = {}
    for index, cell in enumerate(cells):
        kept = [o for o in cell.get("outputs", []) if BUNDLE_MIME in o.get("data", {})]
        if kept:
            found[index] = kept
    return found


def with_last_turn(stored: Any, cells: list[Any]) -> Any:
    """``stored`` metadata plus the notebook's last turn, found in the turns' outputs, when
    the metadata names none (the file keeps it per turn; see ``openprogram_magics.notebook``)."""
    meta = parse_metadata(stored)
    if meta is None or meta.last_turn_id is not None:  # an older file still has it: use it
        return stored
    last = last_turn_in_outputs(cells, meta.session_id)
    return {**stored, "last_turn_id": last} if last else stored


def replay_setup(meta: Any, name: str, record_misses: bool) -> tuple[dict[str, Any], Replay]:
    """The metadata to hand the kernel — a new local replay session forked from the
    notebook's (:func:`openprogram.store.session.sync.fork_for_replay`), from its root,
    so the replay's turns never enter the notebook's session — and the replay setting that
    makes every provider the replay of the notebook's session."""
    from openprogram.store.session.store import default_db
    from openprogram.store.session.sync import fork_for_replay
    from openprogram_magics.sharing import session_root

    if meta is None:
        raise UserError(f"{name} names no session to replay (metadata.openprogram.session_id)")
    root = session_root(
        meta.session_id, f"`openprogram sessions pull --notebook {name}` fetches it"
    )
    fork = fork_for_replay(default_db(), meta.session_id)
    return NotebookMeta(fork, root, None).to_json(), Replay(meta.session_id, record_misses)


def _execute(
    client: Any,
    nb: Any,
    stored: Any,
    source: Path,
    replay: dict[str, Any] | None,
    env: dict[str, str],
) -> str | None:
    from nbclient.exceptions import CellExecutionError

    error: str | None = None
    with client.setup_kernel(env=env):  # the kernel's environment: the settings in force
        hand_over_state(client.kc, stored, str(source), replay)
        try:
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
        except CellExecutionError as exc:
            if exc.ename:  # the exception's name and its whole message (a replay miss: a diff)
                error = f"{exc.ename}: {exc.evalue}"
            else:
                text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
                error = text.splitlines()[-1] if text else "cell failed"
        finally:
            client.set_widgets_metadata()
    return error


def hand_over_state(
    kc: Any, metadata: Any, path: str, replay: dict[str, Any] | None = None
) -> None:
    """Send the kernel the notebook's metadata, as the browser extension does (and, for a
    replay, that it is one), and wait for the reply so it lands before the first cell."""
    from nbclient.util import run_sync

    from openprogram_magics.bridge import silent_code

    assert kc is not None
    msg_id = kc.execute(
        silent_code(state_payload(metadata, path, replay)), silent=True, store_history=False
    )
    while True:
        reply = run_sync(kc.get_shell_msg)(timeout=60)
        if reply["parent_header"].get("msg_id") == msg_id:
            return


def write_back(nb: Any) -> None:
    """Store the session the turns ran in (found in their outputs) in ``nb``'s metadata
    (without the last turn: the turns' outputs carry it, see ``openprogram_magics.notebook``)."""
    found = session_from_outputs(nb.cells)
    if found is not None:
        meta = parse_metadata(found, where="turn output")
        if meta is not None:
            nb.metadata[METADATA_KEY] = meta.file_json()
