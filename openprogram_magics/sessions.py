"""The notebook's session as plain functions: which one a turn uses, its status, list, log.

The magics call these; tests call them without a shell.  The engine is imported inside
each function so that ``%load_ext`` stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openprogram.agentic_programming.runtime import Runtime
    from openprogram_magics.notebook import NotebookMeta, Resolution


def frontend_meta() -> NotebookMeta | None:
    """What the frontend handed this kernel, validated (MetadataError if unusable).

    A message the bridge refused (not an object, too large...) stops turns too, rather
    than quietly minting a session whose id would then overwrite the notebook's.
    """
    from openprogram.errors import MetadataError
    from openprogram_magics import bridge
    from openprogram_magics.notebook import parse_metadata

    state = bridge.frontend_state()
    if state is None:
        return None
    if state.problem is not None:
        raise MetadataError(
            f"the notebook's metadata.openprogram is unusable ({state.problem}); "
            "run `%openprogram new` to start a fresh session for this notebook"
        )
    return parse_metadata(state.metadata) if state.metadata is not None else None


def notebook_title(user_ns: Mapping[str, Any]) -> str:
    """What a session a notebook creates belongs to: ``notebook <path>`` (the path the
    frontend or the headless runner sent, else the one the environment names)."""
    from openprogram_magics import bridge
    from openprogram_magics.notebook import notebook_path_from_env

    state = bridge.frontend_state()
    path = state.path if state is not None and state.path else None
    if path is None:
        found = notebook_path_from_env(dict(user_ns))
        path = str(found) if found is not None else None
    return f"notebook {path}" if path else "notebook"


def place_of(title: str, cwd: Path | None = None) -> str:
    """``title`` (``notebook <path>``) with the path made absolute, for ``sessions list``
    (``Session.note_place``): the path is as the frontend or ``openprogram run`` sent it —
    relative to the Jupyter server's root or to the folder the command was typed in, both
    meaningless later — and the kernel runs in the notebook's folder (``cwd``), so the
    notebook is the file of that name there.  Unchanged when no such file is found."""
    kind, _, path = title.partition(" ")
    if kind != "notebook" or not path:
        return title
    given = Path(path).expanduser()
    if given.is_absolute():
        return f"notebook {given}"
    try:
        here = Path.cwd() if cwd is None else cwd
        for candidate in (here / given.name, here / given):
            if candidate.is_file():
                return f"notebook {candidate.resolve()}"
    except OSError:  # the working folder was removed
        pass
    return title


def shareable_title(title: str | None, home: str | None = None) -> str | None:
    """``title`` as it may travel (``meta.json`` goes with a push or an export): the user's
    home folder in a path written ``~`` (``notebook /home/ada/work/nb.ipynb`` →
    ``notebook ~/work/nb.ipynb``), so no user name or home path leaves the machine."""
    from openprogram.context.secrets import without_home

    return without_home(title, home) if title else title


def resolve_session(
    pinned: str | None, kernel: NotebookMeta | None, user_ns: Mapping[str, Any]
) -> Resolution:
    """Which session a turn continues (see :mod:`openprogram_magics.notebook` for the order).

    The frontend's and the saved file's metadata are read only when the kernel has no
    session of its own (``use``/``new``/an earlier turn wins).  Unusable metadata raises
    MetadataError, unless the cell pins ``--session ID``, which replaces it.
    """
    from openprogram.errors import MetadataError
    from openprogram_magics.notebook import (
        notebook_path_from_env,
        parse_metadata,
        read_file_metadata,
        resolve,
    )

    frontend = file_meta = None
    if kernel is None:
        try:
            frontend = frontend_meta()
            if frontend is None:
                path = notebook_path_from_env(dict(user_ns))
                if path is not None:
                    file_meta = parse_metadata(
                        read_file_metadata(path), where=f"{path.name} metadata"
                    )
        except MetadataError:
            if pinned is None:
                raise
        frontend, file_meta = (
            _last_turn_from_file(frontend, user_ns),
            _last_turn_from_file(file_meta, user_ns),
        )
    return resolve(pinned=pinned, kernel=kernel, frontend=frontend, file=file_meta)


def _last_turn_from_file(
    meta: NotebookMeta | None, user_ns: Mapping[str, Any]
) -> NotebookMeta | None:
    """``meta`` with the notebook's last turn read from the saved file's turn outputs, when
    the metadata names none (files keep it per turn; see ``openprogram_magics.notebook``)."""
    from dataclasses import replace

    from openprogram_magics.notebook import last_turn_in_file, notebook_path_from_env

    if meta is None or meta.last_turn_id is not None:
        return meta
    path = notebook_path_from_env(dict(user_ns))
    last = last_turn_in_file(path, meta.session_id) if path is not None else None
    return replace(meta, last_turn_id=last) if last else meta


def session_status(session_id: str | None, runtime: Runtime, auto: bool) -> dict[str, Any]:
    """Id, provider, model, auto and — when stored — path (the home folder written ``~``),
    turns and HEAD of a session."""
    from openprogram.agent.session_db import default_db
    from openprogram.context.secrets import without_home

    info: dict[str, Any] = {
        "session_id": session_id,
        "provider": runtime.provider.name if runtime.provider is not None else None,
        "model": runtime.model or None,
        "auto": auto,
    }
    db = default_db()
    if session_id and db.exists(session_id):
        session = db.open(session_id)
        info.update(
            path=without_home(str(session.path)),  # printed into the notebook: no home
            turns=session.totals()["turns"],  # counted as everywhere (index.counts_as_turn)
            head=session.head_id,
        )
        title = session.meta.get("title")
        if title and title != session.id:
            info["title"] = title
        goal = session.meta.get("goal")
        if isinstance(goal, dict):  # the last goal run (%openprogram goal shows more)
            info["goal"] = f"{goal.get('status')} after {goal.get('continuations')} continuation(s)"
        from openprogram.store.session.sync import lines

        others = lines(session)  # another person's (or notebook copy's) line of the session
        if others:
            info["other lines"] = "; ".join(
                f"{line.turns} turn(s) ending at {line.tip}" for line in others
            )
    elif session_id:
        info["path"] = f"{without_home(str(db.root / session_id))} (created at the first turn)"
    return info


def list_sessions() -> list[dict[str, Any]]:
    """Every stored session's meta, newest first."""
    from openprogram.agent.session_db import default_db

    return default_db().list_sessions()


def session_log(session_id: str) -> list[str]:
    """The session's git log, newest first: ``<short sha> <summary>`` per commit (the
    summary's control characters escaped: it may come from anyone's commit; a turn number
    several people made labelled by author, ``turn 5@alice``)."""
    from openprogram.agent.session_db import default_db
    from openprogram.compare.labels import relabel_log
    from openprogram.store.session.history import commit_log
    from openprogram.view.inert import terminal_text

    entries = commit_log(default_db().open(session_id).path)
    summaries = relabel_log((e.summary, e.author, e.email) for e in entries)  # `turn 5@bob`
    return [f"{e.sha[:8]} {terminal_text(s)}" for e, s in zip(entries, summaries, strict=True)]
