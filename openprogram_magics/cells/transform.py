"""The input transformer: a ``%%openprogram`` cell's first line becomes one guard call.

IPython then compiles and runs the body itself, exactly as a plain cell (display of the
last value, tracebacks, top-level ``await``); the guard (:mod:`.guard`) begins the turn, or
takes the body of a ``--background`` or ``--chat`` cell, which is not run in place.
"""

from __future__ import annotations

import re

MAGIC = "%%openprogram"
_GUARDS = '__import__("openprogram_magics.cells.guard", fromlist=["_"])'
GUARD = _GUARDS + "._cell_guard({args!r})\n"
# cells whose body is not run in place: --background (on a thread), --chat (a message),
# --eval (the cases of an evaluation)
BODY_GUARD = _GUARDS + "._body_guard({args!r}, {body!r})\n"
BODY_FLAGS = ("--background", "-b", "--chat", "--eval")


def transform_cell(lines: list[str]) -> list[str]:
    """Replace the ``%%openprogram`` line by the guard (the body is left untouched, so
    line numbers stay the user's; the guard puts the magic line back for tracebacks)."""
    if not lines:
        return lines
    lines = _without_own_load_ext(lines)
    first = lines[0].strip()
    if first.startswith(MAGIC) and not first.endswith("?"):
        rest = first[len(MAGIC) :]
        if rest and not rest[0].isspace():
            return lines  # %%openprogramsomething: not ours
        if any(flag in rest.split() for flag in BODY_FLAGS):
            return [BODY_GUARD.format(args=rest.strip(), body="".join(lines[1:]))]
        return [GUARD.format(args=rest.strip()), *lines[1:]]
    return lines


_OWN_LOAD_EXT = re.compile(r"^\s*%load_ext\s+openprogram_magics\s*$")


def _without_own_load_ext(lines: list[str]) -> list[str]:
    """``%load_ext openprogram_magics`` says nothing when the extension is loaded already.

    A reopened notebook's kernel has it loaded before the first cell runs (the frontend's
    request handing over the notebook's metadata loads it), so that cell's ``%load_ext``
    would print IPython's "already loaded… use %reload_ext" every time.  This transformer
    is installed only while the extension is loaded, so the line is blanked (line numbers
    kept); IPython's ``%load_ext`` itself is never wrapped (IPython 9.19 registers it lazily,
    and a wrapper of the lazy entry resolved back to itself: RecursionError).  A cell that
    also unloads or reloads an extension is left alone."""
    if not any(_OWN_LOAD_EXT.match(line) for line in lines):
        return lines
    if any("%unload_ext" in line or "%reload_ext" in line for line in lines):
        return lines
    return ["\n" if _OWN_LOAD_EXT.match(line) else line for line in lines]
