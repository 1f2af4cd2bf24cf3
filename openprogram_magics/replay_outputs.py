"""Whether a replay reproduced what a notebook shows (pure: cells in, cells out).

A replay's turns are new nodes in another session, so the parts of an output that name a
session, a turn or a node (a turn's DAG drawing and its session payload, both under the
``application/vnd.openprogram.*`` types) always differ; what a reader sees besides — the
printed text, the values shown, the errors — is what a replay must reproduce.  A replay
that reproduces all of it has nothing to write (`openprogram run --replay` in place then
changes no byte of the notebook).  What describes the session rather than a cell's results
is left out too: openprogram's own notes (lines ``openprogram: …``, e.g. "new session …",
"… skipped") and the outputs of cells made only of ``%openprogram`` commands (``status``,
``log``: the replay's session is another one by design).
"""

from __future__ import annotations

from typing import Any

OPENPROGRAM_PREFIX = "application/vnd.openprogram."
BUNDLE_MIME = "application/vnd.openprogram.bundle+json"  # (sharing.BUNDLE_MIME) kept as is
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"  # a model id: new every run
NOTE = "openprogram: "  # the start of a line openprogram prints about the session

__all__ = ["differing_cells", "session_commands_only", "shown"]


def _text(value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return value


def shown(outputs: Any) -> list[tuple[Any, ...]]:
    """What a reader sees of a cell's ``outputs``: consecutive stream texts joined, the
    data of values and displays (the openprogram parts and widget views left out), and
    each error's name and message (its traceback holds the kernel's file names)."""
    out: list[tuple[Any, ...]] = []
    for output in outputs if isinstance(outputs, list) else ():
        if not isinstance(output, dict):
            continue
        kind = output.get("output_type")
        if kind == "stream":
            name, text = output.get("name"), _text(output.get("text", ""))
            if out and out[-1][0] == "stream" and out[-1][1] == name:
                out[-1] = ("stream", name, out[-1][2] + text)
            else:
                out.append(("stream", name, text))
        elif kind in ("execute_result", "display_data"):
            data = output.get("data")
            data = data if isinstance(data, dict) else {}
            if any(k.startswith(OPENPROGRAM_PREFIX) and k != BUNDLE_MIME for k in data):
                continue  # a turn's DAG and session payload: new ids every run
            parts = tuple((k, _text(v)) for k, v in sorted(data.items()) if k != WIDGET_VIEW)
            if parts:
                out.append((kind, parts))
        elif kind == "error":
            out.append(("error", output.get("ename"), output.get("evalue")))
    kept = []
    for item in out:
        if item[0] == "stream":
            lines = str(item[2]).splitlines(keepends=True)
            text = "".join(ln for ln in lines if not ln.startswith(NOTE))
            if not text:
                continue
            item = ("stream", item[1], text)
        kept.append(item)
    return kept


def session_commands_only(source: Any) -> bool:
    """Whether a cell is made only of ``%openprogram`` line commands (and ``%load_ext``,
    comments, blank lines): what it shows describes the session, not a result."""
    text = _text(source)
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return bool(lines) and all(
        ln.startswith(("%openprogram ", "%load_ext", "#")) or ln == "%openprogram" for ln in lines
    )


def differing_cells(before: list[Any], after: list[Any]) -> list[int]:
    """The indexes of the code cells whose shown outputs differ between ``before`` (the
    notebook as read) and ``after`` (as the replay left it); every cell when the cells
    themselves differ in number."""
    if len(before) != len(after):
        return list(range(len(after)))
    return [
        index
        for index, (old, new) in enumerate(zip(before, after, strict=True))
        if new.get("cell_type") == "code"
        and not session_commands_only(new.get("source", ""))
        and shown(old.get("outputs")) != shown(new.get("outputs"))
    ]
