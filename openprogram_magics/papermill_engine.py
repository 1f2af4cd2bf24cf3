"""A papermill engine that continues the notebook's session: ``papermill -E openprogram``.

papermill runs cells itself and never tells the kernel what the notebook's metadata holds,
so with its default engine every run starts a new session.  This engine does what
``openprogram run`` does: it hands the kernel ``metadata.openprogram`` before the first
cell and writes the session id found in the turns' outputs back into the output notebook.
"""

from __future__ import annotations

from typing import Any

from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine

from openprogram_magics.headless import hand_over_state, with_last_turn, write_back
from openprogram_magics.kernels import IpcKernelMixin
from openprogram_magics.notebook import METADATA_KEY, parse_metadata


class _Client(IpcKernelMixin, PapermillNotebookClient):  # type: ignore[misc]
    def papermill_execute_cells(self) -> None:
        stored = self.nb.metadata.get(METADATA_KEY)
        parse_metadata(stored, where="input notebook metadata.openprogram")
        stored = with_last_turn(stored, self.nb.cells)
        hand_over_state(self.kc, stored, self.nb_man.input_path or "")
        try:
            super().papermill_execute_cells()
        finally:
            write_back(self.nb)


class OpenProgramEngine(NBClientEngine):  # type: ignore[misc]
    @classmethod
    def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, **kwargs: Any) -> Any:
        nb_man.input_path = kwargs.pop("input_path", None)
        kwargs.pop("startup_timeout", None)
        execution_timeout = kwargs.pop("execution_timeout", None)
        start_timeout = kwargs.pop("start_timeout", 60)
        timeout = execution_timeout or kwargs.pop("timeout", None)
        kwargs.pop("timeout", None)
        from papermill.engines import logger

        return _Client(
            nb_man,
            timeout=timeout,
            startup_timeout=start_timeout,
            kernel_name=kernel_name,
            log=logger,
            **kwargs,
        ).execute()
