"""Whether a replay reproduced what a notebook shows (``replay_outputs``), as data: what a
reader sees counts (printed text, values, errors); what names a session, a turn or a
node, openprogram's own notes and the outputs of session-command cells do not."""

from __future__ import annotations

from typing import Any

from openprogram_magics.replay_outputs import differing_cells, shown


def stream(text: str, name: str = "stdout") -> dict[str, Any]:
    return {"output_type": "stream", "name": name, "text": text}


def turn_drawing(turn_id: str) -> dict[str, Any]:
    data = {"application/vnd.openprogram.session+json": {"last_turn_id": turn_id}}
    return {"output_type": "display_data", "data": data, "metadata": {}}


def value(text: str) -> dict[str, Any]:
    return {"output_type": "execute_result", "data": {"text/plain": text}, "metadata": {}}


def code(source: str, *outputs: dict[str, Any]) -> dict[str, Any]:
    return {"cell_type": "code", "source": source, "outputs": list(outputs)}


def test_a_reader_sees_the_text_values_and_errors_not_the_sessions_parts() -> None:
    error = {"output_type": "error", "ename": "ValueError", "evalue": "boom", "traceback": ["x"]}
    outputs = [
        stream("openprogram: new session nb_1\n"),
        stream("bug\n"),
        stream(["feat", "ure\n"]),
        turn_drawing("n_1"),
        value("'bug'"),
        error,
    ]
    assert shown(outputs) == [
        ("stream", "stdout", "bug\nfeature\n"),
        ("execute_result", (("text/plain", "'bug'"),)),
        ("error", "ValueError", "boom"),
    ]


def test_only_cells_whose_shown_outputs_changed_differ() -> None:
    before = [
        code("%%openprogram\ntriage('a')", stream("bug\n"), turn_drawing("n_1")),
        code("%openprogram status", stream("session: nb_1\n")),
        code("print(2)", stream("2\n")),
        {"cell_type": "markdown", "source": "notes"},
    ]
    after = [
        code("%%openprogram\ntriage('a')", stream("bug\n"), turn_drawing("n_9")),  # same
        code("%openprogram status", stream("session: nb_9\n")),  # the session's: ignored
        code("print(2)", stream("3\n")),  # a different result
        {"cell_type": "markdown", "source": "notes"},
    ]
    assert differing_cells(before, after) == [2]
    assert differing_cells(before, after[:2]) == [0, 1]  # the cells differ in number
