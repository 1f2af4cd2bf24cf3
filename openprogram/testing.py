"""What a test exported from a session (``openprogram sessions export ID --pytest FILE``)
imports: :func:`replaying` (a block whose LLM calls are answered from recorded calls),
:func:`functions_from` (the module, ``.py`` file or notebook that defines the functions)
and :func:`as_recorded` (a value as a session records it: JSON data, secrets masked)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from openprogram.context.nodes import sanitize
from openprogram.programs.functions_from import load_functions
from openprogram.providers.replay_cassette import CassetteProvider, replaying

__all__ = ["CassetteProvider", "as_recorded", "functions_from", "replaying"]


def functions_from(where: str, test_file: str | Path) -> ModuleType:
    """The module ``where`` names (a module name, or a ``.py``/``.ipynb`` path relative to
    the folder of ``test_file``)."""
    return load_functions(where, test_file)


def as_recorded(value: Any) -> Any:
    """``value`` as a session records a call's output (what an exported test compares)."""
    return sanitize(value)
