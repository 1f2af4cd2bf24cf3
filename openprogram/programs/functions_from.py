"""Where the agentic functions of a session are defined: a module, a ``.py`` file or a notebook.

A session records each call's function by name, not where it was defined.  A test exported
from it (``openprogram sessions export ID --pytest FILE --functions WHERE``) imports them
from ``WHERE``:

* a module name (``mypkg.triage``): imported as usual;
* a ``.py`` file: loaded from its path;
* a notebook (``.ipynb``): its **definitions** — the top-level imports, ``def``/``class``
  statements and assignments of literals (``BRIEF = True``) of every code cell — are run
  as one module; the rest of each cell (the calls, what it prints), magic lines
  (``%%openprogram``, ``%load_ext``) and cells that are not Python are left out, so loading
  it makes no LLM call and runs none of the notebook's work.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from openprogram.errors import UserError

KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def is_path(where: str) -> bool:
    return where.endswith((".py", ".ipynb")) or "/" in where or "\\" in where


def load_functions(where: str, relative_to: str | Path | None = None) -> ModuleType:
    """The module ``where`` names (a module name, or a ``.py``/``.ipynb`` path, relative
    to the folder of ``relative_to`` — a test's ``__file__`` — when not absolute)."""
    if not is_path(where):
        return importlib.import_module(where)
    path = Path(where)
    if not path.is_absolute() and relative_to is not None:
        path = Path(relative_to).resolve().parent / path
    if not path.is_file():
        raise UserError(f"the functions' file is not there: {path}")
    name = "openprogram_functions_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if path.suffix == ".ipynb":
        module = ModuleType(name)
        module.__file__ = str(path)
        sys.modules[name] = module  # dataclasses and pickling look their module up
        code = compile(notebook_definitions(path), str(path), "exec")
        exec(code, module.__dict__)
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def notebook_definitions(path: Path) -> str:
    """The definitions of the notebook at ``path`` as one Python source (see above)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the notebook {path}: {exc}") from None
    parts: list[str] = []
    for cell in data.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        parts.extend(cell_definitions(text))
    return "\n\n".join(parts) + "\n"


def cell_definitions(text: str) -> list[str]:
    """The definitions in one cell's text (magic and shell lines left out)."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    source = "\n".join(lines)
    try:
        tree = ast.parse(source)
    except SyntaxError:  # not Python (another language's cell, a half-written one)
        return []
    kept = []
    for node in tree.body:
        if isinstance(node, KEPT) or (isinstance(node, ast.Assign) and _literal(node.value)):
            decorators = getattr(node, "decorator_list", [])
            start = min([node.lineno, *(d.lineno for d in decorators)])
            kept.append("\n".join(lines[start - 1 : node.end_lineno]))
    return kept


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True
