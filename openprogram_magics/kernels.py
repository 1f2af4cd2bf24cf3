"""Kernels for headless runs (``openprogram run``, ``papermill -E openprogram``).

Their kernel talks over unix sockets instead of TCP on localhost: no port is opened, and
ipykernel does not print "Kernel is running over TCP without encryption…" among the run's
own output.  The sockets go in Jupyter's runtime folder, or the temp folder when that path
is too long for a socket name; Windows, or no short enough folder, keeps TCP.  The socket
files are removed by ``jupyter_client`` when the kernel shuts down.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

MAX_SOCKET_PATH = 100  # bytes: sun_path holds 104-108 with the NUL; "-<port>" is appended


def use_ipc(km: KernelManager) -> KernelManager:
    """Put ``km``'s (not yet started) kernel on unix sockets when a short enough folder
    exists; otherwise (and on Windows) leave it on TCP."""
    if os.name == "nt":
        return km
    import tempfile

    from jupyter_core.paths import jupyter_runtime_dir

    name = f"openprogram-{uuid.uuid4().hex[:12]}-ipc"
    for folder in (Path(jupyter_runtime_dir()), Path(tempfile.gettempdir())):
        prefix = str(folder / name)
        if len(prefix.encode()) + 7 <= MAX_SOCKET_PATH:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            km.transport = "ipc"
            km.ip = prefix
            break
    return km


class IpcKernelMixin:
    """For a ``NotebookClient`` subclass: its kernel manager uses :func:`use_ipc`."""

    def create_kernel_manager(self) -> Any:
        return use_ipc(super().create_kernel_manager())  # type: ignore[misc]


class QuietClient(IpcKernelMixin, NotebookClient):  # type: ignore[misc]
    """nbclient's ``NotebookClient`` with its kernel on unix sockets."""
