"""The kinds of ``%%openprogram`` cell, each in its own module, and how a cell reaches them.

- :mod:`.transform`: the input transformer that replaces the ``%%openprogram …`` line by one
  guard call (the body stays the user's, line for line);
- :mod:`.guard`: what that call runs — it finds the notebook's :class:`CellHost` (the
  magics object) and hands the cell to its kind;
- :mod:`.options`: the cell's options (``--session``, ``--from``, ``--no-dag``, ``-b``,
  ``--chat``), parsed once for every kind and for ``%%openprogram?``;
- the kinds: :mod:`.plain` (the body runs in place as a turn), :mod:`.background` (on a
  thread, the cell returns at once), :mod:`.chat` (the body is a chat message).

A cell kind reads the notebook's state through :class:`CellHost` and never imports the
magics module, so the magics (which parse and hand off) and the kinds import no circle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from openprogram_magics.cellturn import NotebookTurns


class CellHost(Protocol):
    """What a cell kind reads and sets of the notebook's extension (the magics object)."""

    shell: InteractiveShell | None
    turns: NotebookTurns
    background: Any  # the latest --background run (``%openprogram stop`` stops it)
