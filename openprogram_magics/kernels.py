"""Kernels for headless runs (``openprogram run``, ``papermill -E openprogram``).

Their kernel talks over unix sockets instead of TCP on localhost: no port is opened, and
ipykernel does not print "Kernel is running over TCP without encryption…" among the run's
own output.  The sockets go in Jupyter's runtime folder, or the temp folder when that path
is too long for a socket name; Windows, or no short enough folder, keeps TCP.  The socket
files are removed by ``jupyter_client`` when the kernel shuts down.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync

from openprogram.errors import RunError

MAX_SOCKET_PATH = 100  # bytes: sun_path holds 104-108 with the NUL; "-<port>" is appended


def use_ipc(km: KernelManager) -> KernelManager:
    """Put ``km``'s (not yet started) kernel on unix sockets when a short enough folder
    exists; otherwise (and on Windows) leave it on TCP."""
    if os.name == "nt":
        return km
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
    """nbclient's ``NotebookClient`` with its kernel on unix sockets.  The kernel's own
    stdout and stderr (where ipykernel echoes what a cell's child processes print, keys
    included) go to a temporary file, not the runner's terminal; a kernel that dies says
    why in one line, with its last line there, masked."""

    _said: Any = None  # the kernel's own stdout and stderr

    async def async_start_new_kernel(self, **kwargs: Any) -> None:
        if self._said is not None:
            self._said.close()
        self._said = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        kwargs.setdefault("stdout", self._said)
        kwargs.setdefault("stderr", self._said)
        await super().async_start_new_kernel(**kwargs)

    async def async_start_new_kernel_client(self) -> Any:
        try:
            return await super().async_start_new_kernel_client()
        except RuntimeError as exc:  # "Kernel died before replying to kernel_info"
            raise self._died(exc) from None

    async def async_execute_cell(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().async_execute_cell(*args, **kwargs)
        except DeadKernelError as exc:
            raise self._died(exc) from None

    start_new_kernel = run_sync(async_start_new_kernel)
    start_new_kernel_client = run_sync(async_start_new_kernel_client)
    execute_cell = run_sync(async_execute_cell)

    def _died(self, exc: BaseException) -> RunError:
        """One line: how the kernel ended, and its last line of output (masked)."""
        from openprogram.context.secrets import redact_secrets

        last = ""
        if self._said is not None:
            self._said.flush()
            self._said.seek(0)
            lines = [line.strip() for line in self._said.read()[-4000:].splitlines()]
            last = next((line for line in reversed(lines) if line), "")
        said = f" (it said: {redact_secrets(last)[:300]})" if last else ""
        return RunError(f"the notebook's kernel ended: {' '.join(str(exc).split())}{said}")
