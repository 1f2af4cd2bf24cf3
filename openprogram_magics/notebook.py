"""Where a notebook's session id comes from, and where it goes (pure logic + small reads).

The id lives in the notebook's top-level ``metadata.openprogram``::

    {"session_id": "nb_3f9c2a71d0", "version": 1}

(plus ``remote``, ``provider`` and ``model`` once set).  The notebook's last turn is not
kept there — every run would change that one line, and two people who each run a cell of
the same notebook would conflict on it in ``git merge`` — but in each turn's output
(``MIME_TYPE``: that turn's own id and number, changing only when its cell re-runs);
:func:`last_turn_in_outputs` finds it again.  Kernels still exchange it in memory and
through the headless runner's hand-over (``NotebookMeta.to_json``); files get
``NotebookMeta.file_json``.

Resolution order when a ``%%openprogram`` cell starts a turn (first match wins):

1. ``--session ID`` on the cell (pinned in code);
2. ``%openprogram use ID`` / ``%openprogram new`` earlier in this kernel;
3. what the JupyterLab/Notebook 7 extension handed the kernel when it started
   (``openprogram_magics.bridge``: the live, possibly unsaved metadata);
4. what a headless runner (``openprogram run``) handed the kernel the same way;
5. the saved file: ``JPY_SESSION_NAME`` (Jupyter server) or ``__vsc_ipynb_file__`` (VS Code)
   — its metadata, else the session part of its last turn's output; lags unsaved changes;
6. otherwise a new session is minted.

The kernel never rewrites an ``.ipynb``: the id goes back through the extension (a
fire-and-forget comm), through a JSON mime part in every turn's output (``MIME_TYPE``),
and through headless runners, which own the file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openprogram.errors import InvalidSessionId, MetadataError
from openprogram.store.session.files import validate_session_id

METADATA_KEY = "openprogram"
METADATA_VERSION = 1
MIME_TYPE = "application/vnd.openprogram.session+json"
MAX_METADATA_BYTES = 64 * 1024
MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024
MAX_REMOTE_CHARS = 500


@dataclass(frozen=True)
class NotebookMeta:
    session_id: str
    last_turn_id: str | None = None
    remote: str | None = None  # where `%openprogram push URL` sent it (never a password)
    provider: str | None = None  # the provider and model this notebook uses (never a key)
    model: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"session_id": self.session_id, "version": METADATA_VERSION}
        if self.last_turn_id:
            out["last_turn_id"] = self.last_turn_id
        if self.remote:
            out["remote"] = self.remote
        if self.provider:
            out["provider"] = self.provider
            if self.model:
                out["model"] = self.model
        return out

    def file_json(self) -> dict[str, Any]:
        """What the saved file's ``metadata.openprogram`` holds: :meth:`to_json` without
        ``last_turn_id`` (it lives in the turns' outputs; see the module docstring)."""
        out = self.to_json()
        out.pop("last_turn_id", None)
        return out


@dataclass(frozen=True)
class Resolution:
    meta: NotebookMeta | None  # None: mint a new session
    source: str  # "pinned" | "kernel" | "frontend" | "file" | "new"
    note: str = ""  # something the user should be told (a conflict), or ""
    stored: NotebookMeta | None = None  # the notebook's own session, when a cell pins another


_RECOVER = "run `%openprogram new` to start a fresh session for this notebook"


def parse_metadata(
    value: Any, *, where: str = "notebook metadata.openprogram"
) -> NotebookMeta | None:
    """Validate the stored metadata.  ``None``/missing → None; anything bad → MetadataError."""
    if value is None:
        return None
    try:
        size = len(json.dumps(value))
    except (TypeError, ValueError, RecursionError):
        size = MAX_METADATA_BYTES + 1
    if size > MAX_METADATA_BYTES:
        raise MetadataError(f"{where} is too large ({size} bytes); {_RECOVER}")
    if not isinstance(value, dict):
        raise MetadataError(f"{where} must be an object, not {type(value).__name__}; {_RECOVER}")
    version = value.get("version", METADATA_VERSION)
    if type(version) is not int or not 1 <= version <= METADATA_VERSION:  # not bool, not < 1
        raise MetadataError(f"{where} has unsupported version {version!r}; {_RECOVER}")
    sid = value.get("session_id")
    if sid is None:
        return None
    try:
        validate_session_id(sid)
    except InvalidSessionId as exc:
        raise MetadataError(f"{where}: {str(exc).split(';')[0]}; {_RECOVER}") from None
    last = value.get("last_turn_id")
    if last is not None and not (isinstance(last, str) and len(last) <= 64):
        last = None
    remote = value.get("remote")  # checked when used: only an explicit push/pull reads it
    if not (isinstance(remote, str) and 0 < len(remote) <= MAX_REMOTE_CHARS):
        remote = None
    elif "@" in remote or "=" in remote:  # a token an older file kept in the URL goes no further
        from openprogram.store.session.remotes import redact_url

        remote = redact_url(remote)
    provider, model = value.get("provider"), value.get("model")
    if not (isinstance(provider, str) and _PROVIDER.fullmatch(provider)):
        provider = model = None  # ignored, like a bad remote: the environment decides
    if not (isinstance(model, str) and _MODEL.fullmatch(model)):
        model = None
    return NotebookMeta(sid, last, remote, provider, model)


_PROVIDER = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}")


def resolve(
    *,
    pinned: str | None,
    kernel: NotebookMeta | None,
    frontend: NotebookMeta | None,
    file: NotebookMeta | None,
) -> Resolution:
    """Pick the session for the next turn (see the module docstring for the order)."""
    if pinned is not None:
        validate_session_id(pinned)
        stored = kernel or frontend or file
        note = ""
        if stored is not None and stored.session_id != pinned:
            note = (
                f"this cell runs in session {pinned}; the notebook stays with "
                f"{stored.session_id} (`%openprogram use {pinned}` re-points it)"
            )
        same = stored is not None and stored.session_id == pinned
        last, remote = (stored.last_turn_id, stored.remote) if stored and same else (None, None)
        return Resolution(NotebookMeta(pinned, last, remote), "pinned", note, stored)
    for meta, source in ((kernel, "kernel"), (frontend, "frontend"), (file, "file")):
        if meta is not None:
            return Resolution(meta, source)
    return Resolution(None, "new")


def notebook_path_from_env(user_ns: dict[str, Any]) -> Path | None:
    """The notebook file this kernel was started for, when a frontend says so."""
    vscode = user_ns.get("__vsc_ipynb_file__")
    if isinstance(vscode, str) and vscode.endswith(".ipynb"):
        return Path(vscode)
    jpy = os.environ.get("JPY_SESSION_NAME")
    if jpy and jpy.endswith(".ipynb"):
        return Path(jpy)
    return None


def read_file_metadata(path: Path) -> Any:
    """What a saved notebook says about its session: ``metadata.openprogram``, else the
    session part of its last turn's output (frontends without the extension — VS Code,
    a Lab without it — save outputs but not our metadata).  None if absent or unreadable."""
    try:
        if path.stat().st_size > MAX_NOTEBOOK_BYTES:
            return None
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):  # unreadable, not JSON, nested too deeply
        return None
    if not isinstance(data, dict) or not isinstance(data.get("metadata"), dict):
        return None
    stored = data["metadata"].get(METADATA_KEY)
    if stored is None and isinstance(data.get("cells"), list):
        return session_from_outputs([c for c in data["cells"] if isinstance(c, dict)])
    return stored


def session_from_outputs(cells: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last turn's ``MIME_TYPE`` payload found in saved cell outputs (headless write-back)."""
    found = None
    for cell in cells:
        outputs = cell.get("outputs")
        for output in outputs if isinstance(outputs, list) else ():  # a damaged file: skip
            data = output.get("data") if isinstance(output, dict) else None
            part = data.get(MIME_TYPE) if isinstance(data, dict) else None
            if isinstance(part, dict) and part.get("pinned") is not True:  # one cell's own
                found = part
    return found


def last_turn_in_outputs(cells: list[dict[str, Any]], session_id: str) -> str | None:
    """The notebook's last turn in ``session_id`` as its saved outputs say: the turn id of
    the ``MIME_TYPE`` part with the highest turn number (the later cell on a tie); parts
    of pinned cells and of other sessions are skipped.  None when no output names one."""
    best: tuple[int, int] | None = None
    found = None
    for index, cell in enumerate(cells):
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        for output in outputs if isinstance(outputs, list) else ():
            data = output.get("data") if isinstance(output, dict) else None
            part = data.get(MIME_TYPE) if isinstance(data, dict) else None
            if not isinstance(part, dict) or part.get("pinned") is True:
                continue
            turn, last = part.get("turn"), part.get("last_turn_id")
            if part.get("session_id") != session_id or not isinstance(last, str):
                continue
            rank = (turn if type(turn) is int else -1, index)
            if best is None or rank >= best:
                best, found = rank, last
    return found if found is not None and len(found) <= 64 else None


def last_turn_in_file(path: Path, session_id: str) -> str | None:
    """:func:`last_turn_in_outputs` of the saved notebook at ``path`` (None if unreadable)."""
    try:
        if path.stat().st_size > MAX_NOTEBOOK_BYTES:
            return None
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        return None
    return last_turn_in_outputs([c for c in cells if isinstance(c, dict)], session_id)
