"""A session as a keyless test: ``openprogram sessions export ID --pytest FILE``.

Each agentic call a turn made at its top level (not one nested in another agentic call)
becomes a test: it calls the function again with the recorded inputs inside
:func:`~openprogram.providers.replay_cassette.replaying`, whose LLM calls are answered from
the recorded calls written just above the test (function, own messages, settings, reply),
and asserts the recorded output as a literal.  The functions are imported from where they
are defined (:mod:`openprogram.programs.functions_from`).  A call that ended in an error,
or whose inputs cannot be passed back by name, is left out and said so.

``--record`` first re-runs those calls with a real provider (one turn each, in a new
session, no earlier turn in their prompts) and writes the file from that session.
Text generation is pure; :func:`write_pytest` and :func:`record_again` do the I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from openprogram.errors import UserError
from openprogram.programs.functions_from import is_path
from openprogram.providers.replay import frame_name

PLAIN = (str, int, float, bool, type(None))
WIDTH = 92


@dataclass
class Case:
    """One top-level agentic call of a session and the LLM calls made inside it."""

    function: str
    node_id: str
    turn: int
    inputs: dict[str, Any]
    output: Any
    calls: list[dict[str, Any]] = field(default_factory=list)


def cases_of(nodes: list[Any]) -> tuple[list[Case], list[str]]:
    """The test cases of a session's nodes (in seq order) and what was left out, why."""
    by_id = {node.id: node for node in nodes}
    cases: dict[str, Case] = {}
    left_out: list[str] = []
    for node in sorted(nodes, key=lambda n: n.seq):
        if node.kind == "function" and _top(node, by_id) is node:
            shown = f"turn {node.turn}: {node.name}"
            if node.status != "completed":
                left_out.append(f"{shown} ended {node.status}")
            elif not _named_inputs(node.input) or not node.name.isidentifier():
                left_out.append(f"{shown}: its inputs cannot be passed back by name")
            else:
                cases[node.id] = Case(node.name, node.id, node.turn, dict(node.input), node.output)
        elif node.kind == "llm":
            top = _top(node, by_id)
            case = cases.get(top.id) if top is not None else None
            answered = node.status == "completed" or node.metadata.get("rejected")
            if case is not None and answered and node.output is not None:
                case.calls.append(_call(node, by_id.get(node.caller or "")))
    return list(cases.values()), left_out


def _top(node: Any, by_id: dict[str, Any]) -> Any:
    """The outermost agentic call ``node`` is (or is made in); None: none."""
    top = node if node.kind == "function" else None
    seen: set[str] = set()
    caller = node.caller
    while caller is not None and caller in by_id and caller not in seen:
        seen.add(caller)
        parent = by_id[caller]
        if parent.kind == "function":
            top = parent
        caller = parent.caller
    return top


def _named_inputs(inputs: Any) -> bool:
    return isinstance(inputs, dict) and all(isinstance(k, str) and k.isidentifier() for k in inputs)


def _call(node: Any, frame: Any) -> dict[str, Any]:
    meta = node.metadata
    call: dict[str, Any] = {
        "function": frame_name(frame),
        "messages": meta.get("messages") or [],
        "settings": meta.get("request"),
        "reply": str(node.output),
    }
    if meta.get("tool_calls"):
        call["tool_calls"] = meta["tool_calls"]
    return call


# -- the module's text -------------------------------------------------------------------------
def module_text(cases: list[Case], *, session_id: str, functions: str, refresh: str) -> str:
    """The pytest module of ``cases``; ``functions``: a module name or a path relative to
    the module's folder; ``refresh``: the command that records it again."""
    names = sorted({case.function for case in cases})
    parts = [_header(session_id, refresh), _imports(names, functions)]
    parts.append(f"REFRESH = {_literal('refresh the recording with a real provider: ' + refresh)}")
    counts: dict[str, int] = {}
    for case in cases:
        counts[case.function] = counts.get(case.function, 0) + 1
        parts.append(_test(case, f"{_slug(case.function)}_{counts[case.function]}"))
    return "\n\n\n".join(parts) + "\n"


def _header(session_id: str, refresh: str) -> str:
    return f'''"""Tests recorded from session {session_id} (`openprogram sessions export --pytest`).

Each test calls an agentic function again with the inputs the session recorded.  Its LLM
calls are answered from the recording written above the test (no key, no network, nothing
stored) and its output must be the one recorded.  A prompt that changed (an edited
docstring) fails the test, naming the call and showing the prompt's diff.  Record again
with a real provider:

    {refresh}
"""

from __future__ import annotations'''


def _imports(names: list[str], functions: str) -> str:
    if not is_path(functions):
        lines = ["from openprogram.testing import as_recorded, replaying"]
        if names:
            lines.append(f"from {functions} import {', '.join(names)}")
        return "\n".join(lines)
    lines = [
        "from openprogram.testing import as_recorded, functions_from, replaying",
        "",
        f"defined = functions_from({_literal(functions)}, __file__)",
    ]
    lines += [f"{name} = defined.{name}" for name in names]
    return "\n".join(lines)


def _test(case: Case, slug: str) -> str:
    calls = f"CALLS_{slug.upper()}"
    args = ", ".join(f"{k}={_literal(v)}" for k, v in case.inputs.items())
    made = f"{case.function}({args})"
    if not isinstance(case.output, PLAIN):
        made = f"as_recorded({made})"
    return (
        f"# turn {case.turn} of the session (node {case.node_id})\n"
        f"{calls} = {_literal(case.calls)}\n\n\n"
        f"def test_{slug}() -> None:\n"
        f"    with replaying({calls}, label={_literal('test_' + slug)}, hint=REFRESH):\n"
        f"        assert {made} == {_literal(case.output)}"
    )


def _literal(value: Any, indent: int = 0) -> str:
    """``value`` (JSON data) as a Python literal laid out as ``ruff format`` would: on one
    line when it fits, else one item per line; a long string in pieces (at line ends, then
    at spaces) inside parentheses."""
    flat = _flat(value)
    if indent + len(flat) <= WIDTH:
        return flat
    pad, inner = " " * indent, " " * (indent + 4)
    if isinstance(value, dict):
        items = [f"{inner}{_flat(k)}: {_literal(v, indent + 4).lstrip()}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f",\n{pad}}}"
    if isinstance(value, list | tuple):
        items = [f"{inner}{_literal(v, indent + 4).lstrip()}" for v in value]
        return "[\n" + ",\n".join(items) + f",\n{pad}]"
    if isinstance(value, str):
        pieces = _pieces(value, WIDTH - indent - 6)
        if len(pieces) > 1:
            lines = [f"{inner}{json.dumps(p, ensure_ascii=False)}" for p in pieces]
            return "(\n" + "\n".join(lines) + f"\n{pad})"
    return flat


def _flat(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a Python literal
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_flat(k)}: {_flat(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_flat(v) for v in value) + "]"
    return repr(value)


def _pieces(text: str, width: int) -> list[str]:
    """``text`` cut after its line ends, and lines longer than ``width`` after spaces."""
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        while len(line) > width:
            cut = line.rfind(" ", 0, width) + 1 or width
            out.append(line[:cut])
            line = line[cut:]
        if line:
            out.append(line)
    return out or [text]


def _slug(name: str) -> str:
    return re.sub(r"\W+", "_", name).strip("_").lower() or "call"


# -- I/O ------------------------------------------------------------------------------------------
def write_pytest(
    db: Any, session_id: str, out: Path, functions: str, refresh: str
) -> tuple[int, list[str]]:
    """Write the module of session ``session_id`` to ``out``: (tests written, left out)."""
    cases, left_out = cases_of(db.open(session_id).nodes())
    if not cases:
        why = "; ".join(left_out) or "no agentic function was called at a turn's top level"
        raise UserError(f"session {session_id} has no call to turn into a test ({why})")
    where = functions
    if is_path(functions):
        where = _relative(Path(functions), out.parent)
    text = module_text(cases, session_id=session_id, functions=where, refresh=refresh)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return len(cases), left_out


def _relative(path: Path, folder: Path) -> str:
    import os

    return Path(os.path.relpath(path.resolve(), folder.resolve())).as_posix()


def record_again(db: Any, session_id: str, module: ModuleType, runtime: Any) -> str:
    """Call the test cases of ``session_id`` again with ``runtime`` (a real provider), one
    turn each of a new session; its id.  A call that fails is recorded as usual."""
    from openprogram.store.session.context import session_context

    cases, _ = cases_of(db.open(session_id).nodes())
    missing = [c.function for c in cases if not callable(getattr(module, c.function, None))]
    if missing:
        raise UserError(f"{module.__name__} does not define {', '.join(sorted(set(missing)))}")
    new_id: str | None = None
    for case in cases:
        title = f"recorded again from {session_id}"
        with session_context(new_id, runtime=runtime, db=db, title=title) as handle:
            new_id = handle.session_id
            try:
                getattr(module, case.function)(**case.inputs)
            except Exception:
                pass
    if new_id is None:
        raise UserError(f"session {session_id} has no call to record again")
    return new_id


def export_command(db: Any, session_id: str, out: str, functions: str | None, record: bool) -> int:
    """``openprogram sessions export ID --pytest FILE [--functions WHERE] [--record]``."""
    from openprogram.programs.functions_from import load_functions

    where = functions or _notebook_of(db, session_id)
    target = Path(out)
    if record:
        from openprogram.context.policy import ContextPolicy
        from openprogram.providers import create_runtime

        module = load_functions(where, Path.cwd() / "here")
        runtime = create_runtime(context=ContextPolicy(turns=0))
        fresh = record_again(db, session_id, module, runtime)
        print(f"recorded again with {getattr(runtime.provider, 'name', '?')}: session {fresh}")
        session_id = fresh
    refresh = f"openprogram sessions export {session_id} --pytest {out} --functions {where}"
    refresh += " --record"
    written, left_out = write_pytest(db, session_id, target, where, refresh)
    print(f"wrote {target}: {written} test{'s' if written != 1 else ''} from session {session_id}")
    for note in left_out:
        print(f"  left out: {note}")
    return 0


def _notebook_of(db: Any, session_id: str) -> str:
    """The notebook this machine last ran ``session_id`` from (the default ``--functions``)."""
    place = db.place(session_id) if hasattr(db, "place") else ""
    if place.startswith("notebook ") and Path(place[9:]).is_file():
        return place[9:]
    raise UserError(
        f"where are the functions of session {session_id} defined? pass --functions with a "
        "module name, a .py file or the notebook"
    )
