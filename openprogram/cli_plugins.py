"""Commands other packages add to the ``openprogram`` console script.

The engine names no plugin: a package that ships commands (the notebook extension ships
``run``, ``git-setup`` and ``git-merge-notebook``) declares an entry point in the group
:data:`GROUP` naming a module or object with

- ``add_parsers(sub)``: adds its subcommands to the CLI's subparsers, each parser with
  ``set_defaults(handler=<function(args) -> exit code>)`` as the engine's own;
- optionally ``before_command(command, argv)``: called before any command runs (``command``
  is the subcommand's name, None for none; ``argv`` the words after ``openprogram``).

::

    [project.entry-points."openprogram.cli"]
    notebook = "openprogram_magics.cli"

:func:`register` adds one in-process (a test, a program embedding the CLI).  A plugin that
fails to load is named in one line on stderr and left out; the other commands still work.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Protocol

GROUP = "openprogram.cli"

_registered: list[Any] = []


class CliPlugin(Protocol):
    """What a plugin offers (``before_command(command, argv)`` is optional)."""

    def add_parsers(self, sub: Any) -> None: ...


def register(plugin: CliPlugin) -> None:
    """Add ``plugin``'s commands to the CLI of this process (after the installed ones)."""
    if plugin not in _registered:
        _registered.append(plugin)


def unregister(plugin: CliPlugin) -> None:
    if plugin in _registered:
        _registered.remove(plugin)


def plugins() -> list[CliPlugin]:
    """The installed plugins (entry point group :data:`GROUP`), then the registered ones."""
    from importlib.metadata import entry_points

    found: list[Any] = []
    for entry in entry_points(group=GROUP):
        try:
            plugin = entry.load()
        except Exception as exc:  # a broken plugin never takes the engine's commands down
            print(
                f"openprogram: plugin {entry.name} ({entry.value}) not loaded: {exc}",
                file=sys.stderr,
            )
            continue
        if plugin not in found:
            found.append(plugin)
    return [*found, *(p for p in _registered if p not in found)]


def before_command(active: Sequence[CliPlugin], command: str | None, argv: Sequence[str]) -> None:
    """Tell each plugin a command is about to run."""
    for plugin in active:
        hook = getattr(plugin, "before_command", None)
        if hook is not None:
            hook(command, list(argv))
