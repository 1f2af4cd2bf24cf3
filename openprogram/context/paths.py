"""Tracebacks without the machine's paths (pure: text in, text out).

A traceback stored on a node travels with the session (a push, a bundle, a replay's
notebook), so its ``File "…"`` lines must not carry where this machine keeps things: the
user's home, a checkout, a virtualenv, a kernel's temporary files.  Each frame's file is
written relative to the import root it was loaded from (``openprogram/providers/replay.py``,
``json/decoder.py``), else to the working folder (a notebook's own modules), else as
``…/<folder>/<file>``.  Only the file names of frames change; the rest of the text is kept.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable

__all__ = ["portable_path", "portable_traceback"]

_FRAME = re.compile(r'^(\s*File ")([^"\n]+)(")', re.MULTILINE)


def _roots(roots: Iterable[str] | None) -> list[str]:
    found = sys.path if roots is None else roots
    out = {os.path.normpath(os.path.abspath(r)) for r in found if r}
    return sorted((r for r in out if r != os.sep), key=len, reverse=True)  # deepest first


def portable_path(path: str, roots: Iterable[str] | None = None, cwd: str | None = None) -> str:
    """``path`` as a stored traceback writes it: relative to the deepest of ``roots``
    (default: ``sys.path``) holding it, else to ``cwd`` (default: the working folder), else
    its last folder and name after ``…/``; a path that is not absolute is kept."""
    if not os.path.isabs(path):
        return path
    norm = os.path.normpath(path)
    here = os.path.normpath(os.path.abspath(cwd if cwd is not None else os.getcwd()))
    for root in [*_roots(roots), here]:
        if root != os.sep and norm.startswith(root + os.sep):
            return os.path.relpath(norm, root)
    parts = [p for p in norm.split(os.sep) if p]
    return "…/" + "/".join(parts[-2:])


def portable_traceback(
    text: str, roots: Iterable[str] | None = None, cwd: str | None = None
) -> str:
    """``text`` (a formatted traceback) with each frame's file made portable
    (:func:`portable_path`)."""
    listed = _roots(roots)
    return _FRAME.sub(lambda m: m[1] + portable_path(m[2], listed, cwd) + m[3], text)
