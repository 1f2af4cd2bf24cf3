"""The git-backed session store: one git repository per session.

::

    $OPENPROGRAM_HOME/sessions/<session_id>/
      .git/          one commit per turn (a bare repository: no working tree)
      meta.json      id, title, agent_id, source, created_at, updated_at, head_id, turns, v
                     (HEAD's, also on disk for listing sessions)
      workdir/       per-session scratch space
      .state/        live.db (SQLite, WAL: counters, HEAD, the nodes table)

    A commit's tree: .gitignore, meta.json and
      history/<bucket>/<turn>/<seq>-<role letter>-<id>.json   one file per node

Why each module of the store exists: ``docs/store-modules.md``.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import threading
import time
import weakref
from contextlib import suppress
from pathlib import Path
from typing import Any

from openprogram.context.nodes import make_call
from openprogram.errors import CorruptedFile, SessionNotFound
from openprogram.settings import current as current_settings
from openprogram.store.session.files import dumps, read_bytes, validate_session_id
from openprogram.store.session.history import Repository
from openprogram.store.session.index import node_relpath, read_meta
from openprogram.store.session.live import discard, opened
from openprogram.store.session.records import current_author
from openprogram.store.session.safegit import init_repository, is_real_dir
from openprogram.store.session.session import MAX_PLACE_BYTES, META_VERSION, PLACE_FILE, Session

__all__ = ["Session", "SessionStore", "default_db"]

GITIGNORE = b".state/\nworkdir/\n.*.tmp\n"


def _place(folder: Path) -> str:
    if not is_real_dir(folder / ".state"):
        return ""
    try:
        data = read_bytes(str(folder / ".state" / PLACE_FILE), MAX_PLACE_BYTES)
    except OSError:
        return ""
    return " ".join(data.decode("utf-8", "replace").split())


class SessionStore:
    """All sessions under ``<home>/sessions``; hands out one :class:`Session` per id."""

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        default = current_settings().home
        self.home = Path(home if home is not None else default).expanduser().resolve()
        self.root = self.home / "sessions"
        self._open: dict[str, Session] = {}
        self._mu = threading.Lock()
        _stores.add(self)  # closed at exit (one hook for every store, none kept alive by it)

    def session_path(self, session_id: str) -> Path:
        return self.root / validate_session_id(session_id)

    def exists(self, session_id: str) -> bool:
        path = self.session_path(session_id)
        return (path / "meta.json").exists() or (path / ".git").is_dir()

    def create_session(
        self,
        session_id: str,
        agent_id: str = "main",
        *,
        source: str = "python",
        title: str | None = None,
    ) -> Session:
        """Create ``session_id`` (or return it if another writer just created it)."""
        target = self.session_path(session_id)
        if self.exists(session_id):
            return self.open(session_id)
        self.root.mkdir(parents=True, exist_ok=True)
        self.remove_debris()
        tmp = self.root / f".creating-{session_id}-{os.getpid()}-{os.urandom(3).hex()}"
        tmp.mkdir()
        try:
            init_repository(tmp)
            now = time.time()
            root = make_call("root", "root", status="completed")
            root.seq, root.turn = 0, 0
            meta = json.dumps(
                {"v": META_VERSION, "id": session_id, "title": title or session_id,
                 "agent_id": agent_id, "source": source, "created_at": now,
                 "updated_at": now, "head_id": root.id, "turns": 0},
                indent=1,
            ).encode()  # fmt: skip
            (tmp / "meta.json").write_bytes(meta)
            node = dumps(root.to_dict())
            files: dict[str, bytes | None] = {
                ".gitignore": GITIGNORE, "meta.json": meta, node_relpath(root): node
            }  # fmt: skip
            repo = Repository(tmp)
            try:
                repo.commit(files, f"session {session_id} created", author=current_author().ident)
            finally:
                repo.close()  # (a roll-up it started is waited for, then ended)
            (tmp / ".state").mkdir()
            with opened(tmp / ".state", keep=False) as live:  # (the folder moves next)
                live.write(1, 1, root.id)
            try:
                os.rename(tmp, target)
            except OSError:  # somebody else created it first: theirs wins
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return self.open(session_id)

    def remove_debris(self) -> None:
        """Remove what dead processes left: half-made sessions (``.creating-<id>-<pid>-…``),
        a pull's or import's quarantine (``.incoming-<pid>-…``), bundles (``.embed-…``)."""
        items = [self.root.glob(f".{kind}-*") for kind in ("creating", "incoming", "embed")]
        for item in (i for found in items for i in found):
            try:
                pid = int(item.name.rsplit("-", 2)[-2])
                os.kill(pid, 0)
                continue  # still being created
            except ProcessLookupError:
                pass
            except (ValueError, IndexError, PermissionError):
                continue  # not ours, or another user's live process
            if os.path.islink(item):
                os.unlink(item)
            else:
                shutil.rmtree(item, ignore_errors=True)

    def open(self, session_id: str) -> Session:
        """Open an existing session (recovering it if a writer died mid-turn)."""
        path = self.session_path(session_id)
        with self._mu:
            session = self._open.get(session_id)
            if session is not None and session.pid == os.getpid():
                return session
            if os.path.islink(path):
                raise CorruptedFile(str(path), "a symbolic link (not followed)")
            if self.root.is_dir():  # (a process's first open of it: what a killed one left)
                self.remove_debris()
            if not (path / ".git").is_dir():
                raise SessionNotFound(
                    f"no session {session_id!r} under {self.root}; "
                    "`openprogram sessions list` shows the ones there are"
                )
            session = Session(session_id, path)
            self._open[session_id] = session
            return session

    def list_sessions(self) -> list[dict[str, Any]]:
        """``meta.json`` of every session, most recently updated first."""
        out: list[dict[str, Any]] = []
        if not self.root.is_dir():
            return out
        self.remove_debris()
        for item in self.root.iterdir():
            if item.name.startswith(".") or not is_real_dir(item / ".git"):
                continue
            if os.path.islink(item):
                out.append({"id": item.name, "problem": "a symbolic link (not followed)"})
                continue
            try:
                meta, dropped = read_meta(item / "meta.json")
                if dropped:
                    meta["problem"] = "meta.json fields ignored: " + ", ".join(dropped)
            except (OSError, ValueError) as exc:
                meta = {"id": item.name, "problem": f"meta.json unreadable: {exc}"}
            meta["id"] = item.name
            meta.pop("place", None)  # only this machine's own record says where it is used
            place = _place(item)
            if place:
                meta["place"] = place
            out.append(meta)
        out.sort(key=lambda m: m.get("updated_at") or 0, reverse=True)
        return out

    def place(self, session_id: str) -> str:
        """Where this machine last used the session (``Session.note_place``; "": unknown)."""
        return _place(self.session_path(session_id))

    def delete_session(self, session_id: str) -> None:
        path = self.session_path(session_id)
        with self._mu:
            session = self._open.pop(session_id, None)
        if session is not None:
            session._dirty.clear()
            session.close()
        discard(path / ".state")  # (this process's connection to it, kept since a close)
        if os.path.islink(path):  # only the link goes, never what it points to
            os.unlink(path)
            return
        if not path.is_dir():
            raise SessionNotFound(f"no session {session_id!r} under {self.root}")
        shutil.rmtree(path)

    def close(self) -> None:
        with self._mu:
            sessions = list(self._open.values())
            self._open.clear()
        for session in sessions:
            if session.pid == os.getpid():
                with suppress(Exception):
                    session.close()


_stores: weakref.WeakSet[SessionStore] = weakref.WeakSet()


@atexit.register
def _close_stores() -> None:
    for store in list(_stores):
        store.close()


_db: SessionStore | None = None
_db_home: str | None = None
_db_lock = threading.Lock()


def default_db() -> SessionStore:
    """The process's store under ``$OPENPROGRAM_HOME`` (made again if that changed)."""
    global _db, _db_home
    home = str(current_settings().home)
    with _db_lock:
        if _db is None or _db_home != home:
            if _db is not None:
                _db.close()
            _db = SessionStore(home)
            _db_home = home
        return _db
