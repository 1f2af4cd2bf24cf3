"""How the project's own errors look in a notebook: two lines, the full traceback a `%tb`
away.

No provider, missing credentials, a provider that failed, a session that is not there, a
budget spent: these are :class:`~openprogram.errors.OpenProgramError` or
:class:`~openprogram.providers.base.ProviderError`, and their message already says what to
do.  A traceback through the library's frames would bury it, so the extension registers an
IPython custom exception handler that shows the message and how to see the rest; it sets
``sys.last_*`` so ``%tb`` prints the whole traceback.  Every other exception gets exactly
IPython's own traceback (with the library's wrapper frames hidden by
``__tracebackhide__``).  The handler takes every ``Exception`` and decides when one
happens, so ``%load_ext`` does not import the engine to name its error classes.
"""

from __future__ import annotations

import sys
import weakref
from types import TracebackType
from typing import Any

MAX_MESSAGE = 600  # characters of the message shown (the rest is in `%tb`)
HINT = "(`%tb` shows the full traceback)"


def short_lines(exc: BaseException) -> list[str]:
    """The two lines shown for one of the project's errors."""
    text = " ".join(str(exc).split())
    if len(text) > MAX_MESSAGE:
        text = text[: MAX_MESSAGE - 1] + "…"
    return [f"{type(exc).__name__}: {text}" if text else type(exc).__name__, HINT]


def is_ours(exc: BaseException) -> bool:
    """One of the project's errors (only possible once the engine is imported)."""
    kinds = []
    for module, name in (
        ("openprogram.errors", "OpenProgramError"),
        ("openprogram.providers.base", "ProviderError"),
    ):
        found = getattr(sys.modules.get(module), name, None)
        if isinstance(found, type):
            kinds.append(found)
    return bool(kinds) and isinstance(exc, tuple(kinds))


def _show(
    shell: Any,
    etype: type[BaseException],
    value: BaseException,
    tb: TracebackType | None,
    tb_offset: int | None = None,
) -> list[str] | None:
    if not is_ours(value):  # still inside run_code's except: IPython's own display
        shell.showtraceback(running_compiled_code=True)
        return None
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb
    if sys.version_info >= (3, 12):
        sys.last_exc = value
    stb = short_lines(value)
    shell._showtraceback(etype, value, stb)  # a kernel sends it as the cell's error
    return stb


_shortened: weakref.WeakSet[Any] = weakref.WeakSet()  # shells whose handler is ours


def install(shell: Any) -> bool:
    """Show the project's errors short in ``shell`` — unless another handler is set."""
    if shell.custom_exceptions and shell not in _shortened:
        return False
    shell.set_custom_exc((Exception,), _show)
    _shortened.add(shell)
    return True


def uninstall(shell: Any) -> None:
    if shell in _shortened:
        shell.set_custom_exc((), None)
        _shortened.discard(shell)
