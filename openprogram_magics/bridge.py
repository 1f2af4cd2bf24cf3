"""Kernel side of the OpenProgram <-> JupyterLab bridge.

The browser extension ``openprogram-jupyter`` (source in ``labextension/``) and this
module speak a two-way protocol; neither direction ever waits for the other:

1. Kernel -> frontend, fire-and-forget: :func:`push_metadata` opens a comm with target
   ``openprogram.metadata`` and data ``{"action": "set", "metadata": {...}}`` and closes
   it at once. The extension writes ``metadata`` to the notebook's top-level
   ``metadata.openprogram`` (the notebook becomes dirty; the user's save persists it).
2. Frontend -> kernel, in order with cells: when a kernel becomes ready (first start,
   kernel change, restart) the extension sends a *silent* ``execute_request`` whose code
   is exactly::

       try:
           __import__("openprogram_magics.bridge", fromlist=["_"]).receive_frontend_state("<B64>")
       except Exception:
           pass

   where ``<B64>`` is base64 of the UTF-8 JSON ``{"metadata": {...} | null, "path": str}``
   (``path`` relative to the server root). :func:`receive_frontend_state` only stores it;
   :func:`frontend_state` reads it back.  A headless runner adds how it runs the notebook:
   ``"replay": {"session_id": str, "record_misses": bool}`` for ``openprogram run
   --replay`` (:class:`ReplayRun`; the browser extension never sends it).

This module is imported inside the silent request, so it imports nothing heavy at
module level (no IPython, no ipykernel, no comm) and never raises from the receiver.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

__all__ = [
    "COMM_TARGET",
    "MAX_STATE_BYTES",
    "FrontendState",
    "ReplayRun",
    "frontend_state",
    "live_frontend",
    "push_metadata",
    "receive_frontend_state",
    "silent_code",
]

#: Comm target name the frontend extension registers.
COMM_TARGET = "openprogram.metadata"
#: Cap on the encoded state and on pushed metadata (JSON bytes).
MAX_STATE_BYTES = 64 * 1024

_TEMPLATE = (
    "try:\n"
    '    __import__("openprogram_magics.bridge", fromlist=["_"])'
    '.receive_frontend_state("{b64}")\n'
    "except Exception:\n"
    "    pass\n"
)


@dataclass(frozen=True)
class ReplayRun:
    """The notebook is being replayed (``openprogram run --replay``): its LLM calls are
    answered from ``session_id``'s recording, and its side-effect commands are skipped."""

    session_id: str
    record_misses: bool = False


@dataclass(frozen=True)
class FrontendState:
    """What the frontend extension last told this kernel.

    ``metadata`` is the notebook's ``metadata.openprogram`` (or the value this kernel
    later pushed with :func:`push_metadata`); ``path`` is the notebook path relative to
    the server root, as sent -- plain data, never validated or used as a filesystem path
    here. ``problem`` is a one-line description of the last malformed message, if the
    most recent one was rejected (then ``metadata`` and ``path`` are from the last good
    message, or None).
    """

    metadata: dict[str, Any] | None
    path: str | None
    received_at: float
    problem: str | None = None
    replay: ReplayRun | None = None  # the runner replays the notebook (see ReplayRun)


_state: FrontendState | None = None


def frontend_state() -> FrontendState | None:
    """The last state received from the frontend (None if nothing ever arrived)."""
    return _state


def _reject(problem: str) -> None:
    """Keep the last good state's data but remember why the latest message was refused."""
    global _state
    prev = _state
    _state = FrontendState(
        metadata=prev.metadata if prev else None,
        path=prev.path if prev else None,
        received_at=prev.received_at if prev else time.time(),
        problem=" ".join(problem.split())[:300],
        replay=prev.replay if prev else None,
    )


def _parse(b64: object) -> tuple[dict[str, Any] | None, str | None, ReplayRun | None] | str:
    """Decode the extension's payload: ``(metadata, path, replay)``, or a problem string."""
    import base64
    import binascii
    import json

    if not isinstance(b64, str):
        return f"state is {type(b64).__name__}, not str"
    if len(b64) > (MAX_STATE_BYTES * 4) // 3 + 4:
        return f"state too large ({len(b64)} base64 chars)"
    try:
        raw = base64.b64decode(b64.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
        return f"state is not valid base64: {exc}"
    if len(raw) > MAX_STATE_BYTES:
        return f"state too large ({len(raw)} bytes)"
    try:
        payload = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return f"state is not UTF-8 JSON: {exc}"
    if not isinstance(payload, dict):
        return f"state is a JSON {type(payload).__name__}, not an object"
    metadata = payload.get("metadata")
    path = payload.get("path")
    if metadata is not None and not isinstance(metadata, dict):
        return f"metadata is a JSON {type(metadata).__name__}, not an object"
    if path is not None and not isinstance(path, str):
        return f"path is a JSON {type(path).__name__}, not a string"
    replay = payload.get("replay")
    if replay is None:
        return metadata, path, None
    sid = replay.get("session_id") if isinstance(replay, dict) else None
    misses = replay.get("record_misses", False) if isinstance(replay, dict) else None
    if not isinstance(sid, str) or not sid or not isinstance(misses, bool):
        return "replay is not {session_id: str, record_misses: bool}"
    return metadata, path, ReplayRun(sid, misses)


def receive_frontend_state(b64: str) -> None:
    """Decode and store the state sent by the extension's silent execute_request.

    Never raises; on any malformation nothing new is stored and ``problem`` is set.
    Does no I/O and imports only the standard library's ``base64``/``binascii``/``json``
    — except that a notebook whose metadata names a session gets the IPython extension
    loaded (:func:`load_extension`), so after a restart its first ``%%openprogram`` cell
    works without ``%load_ext``.
    """
    global _state
    try:
        parsed = _parse(b64)
    except Exception as exc:  # pragma: no cover - belt and braces: never fail loudly
        parsed = f"unexpected error: {type(exc).__name__}: {exc}"
    if isinstance(parsed, str):
        _reject(parsed)
        return
    metadata, path, replay = parsed
    _state = FrontendState(metadata=metadata, path=path, received_at=time.time(), replay=replay)
    if metadata is not None and metadata.get("session_id"):
        load_extension()


def load_extension() -> bool:
    """Load ``openprogram_magics`` into the running IPython shell if it is not loaded;
    False (never an exception) when there is no shell or the load fails."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is None:
            return False
        if "openprogram_magics" not in shell.extension_manager.loaded:
            shell.extension_manager.load_extension("openprogram_magics")
        return True
    except Exception:
        return False


def replay_run() -> ReplayRun | None:
    """How the runner replays this notebook (``openprogram run --replay``), or None."""
    return _state.replay if _state is not None else None


def silent_code(b64: str) -> str:
    """The exact code the extension sends (for tests and non-Lab frontends)."""
    return _TEMPLATE.format(b64=b64)


def in_kernel() -> bool:
    """True when running inside an IPython kernel (not plain IPython or a script)."""
    import sys

    if "ipykernel" not in sys.modules:
        return False
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except Exception:
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def live_frontend() -> bool:
    """Whether someone may be looking at this kernel's outputs live (worth a live widget).

    A kernel started by a Jupyter server (Lab, Notebook 7, nbclassic: ``JPY_SESSION_NAME``),
    by VS Code (``__vsc_ipynb_file__``), or asked by a frontend that names its cells
    (``cellId`` in the request's metadata) has one; nbclient, papermill and
    ``nbconvert --execute`` have none: there a live widget would only add saved widget
    state (and nbconvert's widget manager script from a CDN) to the notebook.
    """
    import os

    if not in_kernel():
        return False
    if os.environ.get("JPY_SESSION_NAME"):
        return True
    from IPython import get_ipython

    shell = get_ipython()
    if "__vsc_ipynb_file__" in getattr(shell, "user_ns", {}):
        return True
    try:
        parent = shell.kernel.get_parent()  # type: ignore[union-attr]
    except Exception:
        return False
    meta = parent.get("metadata") if isinstance(parent, dict) else None
    return isinstance(meta, dict) and bool(meta.get("cellId"))


def push_metadata(metadata: dict[str, Any]) -> bool:
    """Ask the frontend to store ``metadata`` as the notebook's ``metadata.openprogram``.

    Fire-and-forget: opens and closes a comm; never waits for the browser. Returns False
    (without raising) outside a kernel, when ``metadata`` is not a JSON object under
    64 KB, or when the comm cannot be opened. On success the local
    :func:`frontend_state` is updated so later reads in this kernel see the new value.
    """
    global _state
    if not isinstance(metadata, dict) or not in_kernel():
        return False
    import json

    try:
        # Round-trip so we store exactly what the frontend will receive.
        encoded = json.dumps(metadata)
        if len(encoded.encode("utf-8")) >= MAX_STATE_BYTES:
            return False
        value = json.loads(encoded)
    except (TypeError, ValueError):
        return False
    try:
        import comm

        c = comm.create_comm(target_name=COMM_TARGET, data={"action": "set", "metadata": value})
        c.close()
    except Exception:
        return False
    prev = _state
    _state = FrontendState(
        metadata=value,
        path=prev.path if prev else None,
        received_at=prev.received_at if prev else time.time(),
        problem=None,
        replay=prev.replay if prev else None,
    )
    return True
