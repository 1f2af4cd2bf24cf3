"""Sharing the notebook's session from a cell: push, pull, export, import, embed.

Plain functions (the ``%openprogram`` commands are one line each on top of them), tested
without a shell.  Nothing here runs unless the user types the command: opening a notebook
never fetches, pushes or imports anything.

**Embedding** goes through the channel the session id already uses: the kernel never
rewrites an ``.ipynb``, so ``%openprogram embed`` *displays* the session as a git bundle in
an output part of its own (``BUNDLE_MIME``: base64 of the bundle, its size, its sha256),
which the notebook keeps when it is saved — by JupyterLab, VS Code or a headless runner.
``%openprogram import --embedded`` reads the saved notebook and imports the last such
part, after the same checks as any bundle — and only the session the part names (a bundle
carrying another is refused).  The cap (``DEFAULT_EMBED_CAP``, or
``--max-mb``) is checked on both sides.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openprogram.errors import UserError

if TYPE_CHECKING:
    from openprogram.store.session.sync import Received
    from openprogram_magics.notebook import NotebookMeta

BUNDLE_MIME = "application/vnd.openprogram.bundle+json"
DEFAULT_EMBED_CAP = 10 * 1024 * 1024  # bytes of bundle; a notebook carrying more is unwieldy
BUNDLE_HEADERS = (b"# v2 git bundle\n", b"# v3 git bundle\n")


def notebook_dir() -> Path:
    """The folder of the notebook this kernel runs (its working directory by default)."""
    path = notebook_file()
    return path.parent if path is not None else Path.cwd()


def notebook_file(explicit: str | None = None) -> Path | None:
    """The saved notebook: ``explicit``, else what the frontend or server says it is."""
    from openprogram_magics import bridge

    candidates: list[str | None] = [explicit] if explicit else []
    state = bridge.frontend_state()
    if state is not None and state.path:
        candidates.append(state.path)
    candidates.append(os.environ.get("JPY_SESSION_NAME"))
    for candidate in candidates:
        if candidate and candidate.endswith(".ipynb") and Path(candidate).is_file():
            return Path(candidate).resolve()
    if explicit:
        raise UserError(f"no notebook {explicit}")
    return None


def elsewhere_note(session_id: str, remote: str | None) -> str | None:
    """One line for a notebook whose session is not on this machine but lives where the
    notebook says (its recorded remote, an embedded bundle): what to run to continue it.
    Nothing is fetched: the user runs it."""
    from openprogram.agent.session_db import default_db

    if default_db().exists(session_id):
        return None
    ways = [f"`%openprogram pull` (from {remote})"] if remote else []
    if not ways and _has_origin(notebook_dir()):
        ways.append("`%openprogram pull` (from the notebook repository's origin)")
    try:  # a note: a damaged or unreadable notebook file never stops the cell
        path = notebook_file()
        if path is not None:
            find_embedded(path)
            ways.append("`%openprogram import --embedded`")
    except (UserError, OSError):
        pass
    if not ways:
        return (
            f"session {session_id} of this notebook was made on another machine and is not "
            "on this one: this turn starts it here (a later pull of its history joins both)"
        )
    return (
        f"session {session_id} of this notebook is not on this machine: run {' or '.join(ways)} "
        "to continue its history (a turn run first starts a line of its own, which that "
        "pull joins as a branch)"
    )


def _has_origin(where: Path) -> bool:
    from openprogram.errors import SyncError
    from openprogram.sharing import resolve_remote

    try:
        resolve_remote(None, where)  # reads the repository's config; contacts nothing
    except SyncError:
        return False
    return True


def push_session(session_id: str, remote: str | None, recorded: str | None) -> tuple[str, str]:
    """Push; returns the message and the URL to record in the notebook ('' if none)."""
    from openprogram.agent.session_db import default_db
    from openprogram.sharing import SAFE_SCHEMES, record_remote, resolve_remote
    from openprogram.store.session.remotes import url_scheme
    from openprogram.store.session.sync import push

    where = notebook_dir()
    url, protocols = resolve_remote(remote, where, recorded=recorded)
    message = push(default_db(), session_id, url, protocols)
    # a URL typed by the user is remembered (without credentials; a local path relative
    # to the notebook's repository) so the next pull needs no argument; a remote *name*
    # needs no remembering
    typed_url = remote is not None and url_scheme(remote) in SAFE_SCHEMES and "/" in remote
    return message, record_remote(url, where) if typed_url else ""


def pull_session(session_id: str, remote: str | None, recorded: str | None) -> Received:
    from openprogram.agent.session_db import default_db
    from openprogram.sharing import resolve_remote
    from openprogram.store.session.sync import pull

    url, protocols = resolve_remote(remote, notebook_dir(), recorded=recorded)
    return pull(default_db(), session_id, url, protocols)


def export_session(session_id: str, output: str) -> Path:
    from openprogram.agent.session_db import default_db
    from openprogram.store.session.sync import export_bundle

    return export_bundle(default_db(), session_id, Path(output).expanduser())


def import_session(bundle: str, as_id: str | None, join: bool = False) -> Received:
    from openprogram.agent.session_db import default_db
    from openprogram.store.session.sync import import_bundle

    return import_bundle(default_db(), Path(bundle).expanduser(), as_id=as_id, join=join)


def session_root(session_id: str, how_to_fetch: str) -> str | None:
    """The root node of a stored session (the point a replay branches from)."""
    from openprogram.agent.session_db import default_db

    db = default_db()
    if not db.exists(session_id):
        raise UserError(f"session {session_id} is not on this machine: {how_to_fetch}")
    return next((e["id"] for e in db.open(session_id).index() if e["kind"] == "root"), None)


def replay_from_root(session_id: str, meta: NotebookMeta | None) -> NotebookMeta:
    """The next turns as a new branch from the root of ``session_id``, which the replay
    provider answers from (the caller builds it with that id), so every prompt is rendered
    as in the recorded run."""
    from openprogram_magics.notebook import NotebookMeta

    root = session_root(session_id, "`%openprogram pull` fetches it")
    print(f"openprogram: replaying session {session_id}; the next turns branch from its root")
    remote = meta.remote if meta is not None and meta.session_id == session_id else None
    return NotebookMeta(session_id, root, remote)


# -- embedding -------------------------------------------------------------------------------
class EmbeddedBundle:
    """The output part ``%openprogram embed`` displays (saved with the notebook)."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload

    def _repr_mimebundle_(self, **_: Any) -> dict[str, Any]:
        size = self.payload["bytes"]
        text = (
            f"session {self.payload['session_id']} embedded: {size / 1024:.1f} KiB git bundle "
            "(save the notebook to keep it; `%openprogram import --embedded` brings it back)"
        )
        return {BUNDLE_MIME: self.payload, "text/plain": text}


def embed_payload(session_id: str, cap: int = DEFAULT_EMBED_CAP) -> dict[str, Any]:
    """The session as an embeddable part: base64 of its bundle; refused over ``cap``."""
    from openprogram.agent.session_db import default_db
    from openprogram.store.session.sync import export_bundle

    db = default_db()
    db.root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=db.root, prefix=f".embed-{os.getpid()}-") as tmp:
        data = export_bundle(db, session_id, Path(tmp) / "s.bundle").read_bytes()
    if len(data) > cap:
        raise UserError(
            f"session {session_id} is {len(data) / 1048576:.1f} MiB as a bundle, over the "
            f"embed cap of {cap / 1048576:.1f} MiB: push it instead (`%openprogram push`), "
            "or raise the cap with --max-mb"
        )
    return {
        "session_id": session_id,
        "format": "git-bundle",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "data": base64.b64encode(data).decode(),
    }


def find_embedded(notebook: Path) -> dict[str, Any]:
    """The last embedded bundle part saved in ``notebook``'s outputs."""
    from openprogram_magics.notebook import MAX_NOTEBOOK_BYTES

    if notebook.stat().st_size > MAX_NOTEBOOK_BYTES:
        raise UserError(f"{notebook.name} is too large to read ({notebook.stat().st_size} bytes)")
    try:
        cells = json.loads(notebook.read_bytes()).get("cells", [])
    except (ValueError, AttributeError, RecursionError) as exc:
        raise UserError(f"{notebook.name} is not a notebook: {exc}") from None
    found = None
    for cell in cells if isinstance(cells, list) else []:
        outputs = cell.get("outputs") if isinstance(cell, dict) else None
        for out in outputs if isinstance(outputs, list) else []:
            data = out.get("data") if isinstance(out, dict) else None
            if isinstance(data, dict) and isinstance(data.get(BUNDLE_MIME), dict):
                found = data[BUNDLE_MIME]
    if found is None:
        raise UserError(
            f"{notebook.name} has no embedded session (run `%openprogram embed` and save)"
        )
    return found


def decode_embedded(payload: dict[str, Any], cap: int = DEFAULT_EMBED_CAP) -> bytes:
    """The bundle bytes of an embedded part, checked: size under ``cap``, base64, sha256,
    a git bundle header (the bundle itself is then checked like any other)."""
    encoded = payload.get("data")
    if not isinstance(encoded, str):
        raise UserError("refused embedded session: no bundle data")
    if len(encoded) > (cap * 4) // 3 + 4:
        raise UserError(
            f"refused embedded session: {len(encoded) * 3 // 4} bytes, over the cap of {cap}"
        )
    try:
        data = base64.b64decode(encoded, validate=True)
    except ValueError as exc:
        raise UserError(f"refused embedded session: not base64 ({exc})") from None
    if payload.get("sha256") != hashlib.sha256(data).hexdigest():
        raise UserError("refused embedded session: its sha256 does not match its data")
    if not data.startswith(BUNDLE_HEADERS):
        raise UserError("refused embedded session: not a git bundle")
    return data


def embedded_session_id(payload: dict[str, Any]) -> str:
    """The session an embedded part names (the only one it may import)."""
    from openprogram.store.session.files import validate_session_id

    named = payload.get("session_id")
    try:
        return validate_session_id(named)
    except UserError:
        raise UserError("refused embedded session: its part names no valid session id") from None


def import_embedded(
    notebook: str | None, as_id: str | None, cap: int = DEFAULT_EMBED_CAP, join: bool = False
) -> Received:
    """Import the session embedded in the saved notebook (never done automatically): the
    one its part names, nothing else (a bundle carrying another session is refused)."""
    from openprogram.agent.session_db import default_db
    from openprogram.store.session.sync import import_bundle

    path = notebook_file(notebook)
    if path is None:
        raise UserError("which notebook? pass --notebook PATH (the saved .ipynb)")
    payload = find_embedded(path)
    named = embedded_session_id(payload)
    data = decode_embedded(payload, cap)
    db = default_db()
    db.root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=db.root, prefix=f".embed-{os.getpid()}-") as tmp:
        bundle = Path(tmp) / "embedded.bundle"
        bundle.write_bytes(data)
        return import_bundle(db, bundle, as_id=as_id, expect_id=named, join=join)
