"""A line command's value that is not displayed again under the text it printed.

``x = %openprogram status`` keeps the value; as the cell's last line it is not shown a
second time as ``Out[n]``.
"""

from __future__ import annotations

from typing import Any


class _QuietDict(dict):  # type: ignore[type-arg]
    def _ipython_display_(self) -> None:  # already printed: no second copy as Out[n]
        pass


class _QuietList(list):  # type: ignore[type-arg]
    def _ipython_display_(self) -> None:
        pass


class _QuietStr(str):
    __slots__ = ()

    def _ipython_display_(self) -> None:
        pass


def quiet(value: Any) -> Any:
    """``value`` as an equal dict, list or str that displays nothing (else unchanged)."""
    if isinstance(value, dict):
        return _QuietDict(value)
    if isinstance(value, list):
        return _QuietList(value)
    if isinstance(value, str):
        return _QuietStr(value)
    return value
