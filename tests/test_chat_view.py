"""What a ``%%openprogram --chat`` cell shows (issue 38, item 5): a reply with no text says
so (in the cell and on the reply node), the turn's DAG is drawn as every cell's turn is
(its tool calls visible), the reply is ONE display updated in place, and ``%openprogram
stale`` judges chat cells by their text.  In a real IPython shell with the offline
``test`` provider; the saved notebook of a real kernel run is checked in
``test_chat_notebook_outputs.py``."""

from __future__ import annotations

import copy
import io
import itertools
from pathlib import Path

import nbformat
import pytest

from openprogram.agent.chat import chat_turn
from openprogram.agent.session_db import default_db
from openprogram.compare.stale import Now, stale_turns
from openprogram.providers import create_runtime
from openprogram.providers.test import TestProvider
from openprogram.view.saved import DAG_MIME, read_saved
from openprogram_magics import reply_output
from openprogram_magics.notebook import MIME_TYPE
from tests.test_chat_cell import TOOLS, final_displays, replies
from tests.test_magics import Shell

LOOKUP = [("lookup", {"query": "DAG"})]
EMPTY_NOTE = "empty reply: the model called lookup (1 tool call), then answered with no text"


@pytest.fixture
def shell(bare_shell: Shell) -> Shell:
    bare_shell.run(TOOLS)
    return bare_shell


def chat(shell: Shell, cell: str) -> tuple[list[str], dict]:
    """Run a chat cell: the replies it shows and its final turn bundle."""
    before = len(shell.display.outputs)
    shell.run(cell)
    published = shell.display.outputs[before:]
    (bundle,) = [d for d in final_displays(published) if MIME_TYPE in d]
    return replies(published), bundle


def test_a_reply_with_no_text_after_a_tool_call_says_so_in_the_cell_and_on_the_node(
    shell: Shell,
) -> None:
    shell.use_runtime(TestProvider(reply="", tool_calls=LOOKUP))
    (shown,), bundle = chat(shell, "%%openprogram --chat\nWhat is a DAG?")
    assert f"[{EMPTY_NOTE}]" in shown  # under the cell, where the reply would be
    header = bundle["text/plain"].splitlines()[0]
    assert header.endswith(f"chat turn · completed · {EMPTY_NOTE}")
    assert bundle[MIME_TYPE]["note"] == EMPTY_NOTE
    assert shell.magics.turns.kernel_meta is not None
    nodes = default_db().open(shell.magics.turns.kernel_meta.session_id).nodes()
    (reply,) = [n for n in nodes if n.kind == "reply"]
    assert (reply.output, reply.metadata["note"]) == ("", EMPTY_NOTE)


def test_a_reply_with_text_has_no_note(shell: Shell) -> None:
    shell.use_runtime(TestProvider(tool_calls=LOOKUP))
    (shown,), bundle = chat(shell, "%%openprogram --chat\nWhat is a DAG?")
    assert "glossary entry for DAG" in shown and "empty reply" not in shown
    assert "note" not in bundle[MIME_TYPE]


def test_a_terminal_chat_says_an_empty_reply_too() -> None:
    out = io.StringIO()
    result, _ = chat_turn(
        "hello?", session_id=None, runtime=create_runtime(TestProvider(reply="")), out=out
    )
    assert result.note == "empty reply: the model answered with no text"
    assert "[empty reply: the model answered with no text]" in out.getvalue()


def test_a_chat_turn_draws_its_dag_with_the_tool_it_called(shell: Shell) -> None:
    shell.use_runtime(TestProvider(tool_calls=LOOKUP))
    shell.run("%%openprogram\nx = 1")
    _, bundle = chat(shell, "%%openprogram --chat\nWhat is a DAG?")
    assert {"text/html", DAG_MIME, MIME_TYPE} <= set(bundle)
    lines = bundle["text/plain"].splitlines()
    assert lines[0].endswith("turn 2 · chat turn · completed")
    tree = "\n".join(lines[1:])
    assert "user [completed]" in tree and "tool lookup [completed]" in tree
    assert "lookup" in bundle["text/html"]
    drawn = [s["name"] for s in read_saved(bundle[DAG_MIME])["summary"]]
    assert drawn[0] == "user" and "lookup" in drawn  # this turn only: not the code cell's
    assert shell.magics.turns.kernel_meta is not None
    assert bundle[MIME_TYPE]["last_turn_id"] == shell.magics.turns.kernel_meta.last_turn_id


def test_a_streamed_reply_is_one_display_updated_in_place(
    shell: Shell, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(reply_output, "UPDATE_EVERY_S", 0.0)  # every piece shown as it comes
    shell.use_runtime(TestProvider(reply="one two three four five"))
    before = len(shell.display.outputs)
    capsys.readouterr()
    shell.run("%%openprogram --chat\nCount to five.")
    assert "three" not in capsys.readouterr().out  # no piece went to stdout
    published = [o for o in shell.display.outputs[before:] if MIME_TYPE not in o["data"]]
    ids = {o["transient"]["display_id"] for o in published}
    assert len(ids) == 1  # one display ...
    assert [o["update"] for o in published] == [False] + [True] * (len(published) - 1)
    assert len(published) >= 5  # ... updated as the words came
    texts = [o["data"]["text/plain"] for o in published]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))
    assert texts[-1] == "one two three four five \n"


def write_notebook(path: Path, *cells: str) -> str:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, path)
    return str(path)


def test_stale_judges_an_unedited_chat_cell_unchanged_and_an_edited_one_gone(
    shell: Shell, tmp_path: Path
) -> None:
    shell.use_runtime(TestProvider(tool_calls=LOOKUP))
    cells = ["%%openprogram\nx = 1", "%%openprogram --chat\nWhat is a DAG?"]
    for cell in cells:
        shell.run(cell)
    path = write_notebook(tmp_path / "nb.ipynb", TOOLS, *cells)
    report = shell.line(f"stale --notebook {path}").report
    assert (report.stale, report.checked, report.unrecorded) == ([], 2, 0)

    edited = write_notebook(tmp_path / "edited.ipynb", TOOLS, cells[0], cells[1] + " Briefly.")
    report = shell.line(f"stale --notebook {edited}").report
    (gone,) = report.stale
    assert gone.gone and gone.turn.name == "user" and "What is a DAG?" in gone.label
    assert report.unrecorded == 1


def test_a_chat_turn_recorded_before_the_cell_was_kept_is_known_by_its_message(
    shell: Shell,
) -> None:
    """Sessions recorded by earlier versions hold the message only: read as the usual
    ``%%openprogram --chat`` cell of it."""
    shell.use_runtime(TestProvider())
    shell.run("%%openprogram --chat\nWhat is a DAG?")
    assert shell.magics.turns.kernel_meta is not None
    nodes = default_db().open(shell.magics.turns.kernel_meta.session_id).nodes()
    older = []
    for node in nodes:
        node = copy.copy(node)
        node.metadata = {k: v for k, v in node.metadata.items() if k != "cell"}
        older.append(node)
    same = stale_turns(older, Now(cells=["%%openprogram --chat\nWhat is a DAG?\n"]))
    assert (same.stale, same.checked, same.unrecorded) == ([], 1, 0)
    edited = stale_turns(older, Now(cells=["%%openprogram --chat\nWhat is a graph?"]))
    assert [s.gone for s in edited.stale] == [True]


def test_an_interrupted_chat_turn_is_drawn_and_the_next_turn_follows_it(shell: Shell) -> None:
    from openprogram.providers.base import LLMResponse, ToolCall
    from openprogram.providers.test import FunctionProvider

    def model(request: object) -> LLMResponse:
        if len(provider.requests) == 1:
            return LLMResponse("", tool_calls=[ToolCall("c1", "lookup", {"query": "DAG"})])
        raise KeyboardInterrupt  # Ctrl-C while the model answers after the tool

    provider = FunctionProvider(model)
    shell.use_runtime(provider)
    before = len(shell.display.outputs)
    shell.run("%%openprogram --chat\nWhat is a DAG?", error=KeyboardInterrupt)
    (bundle,) = [d for d in final_displays(shell.display.outputs[before:]) if MIME_TYPE in d]
    assert bundle["text/plain"].splitlines()[0].endswith("chat turn · cancelled")
    assert "tool lookup [completed]" in bundle["text/plain"]  # what ran before the stop
    cancelled = bundle[MIME_TYPE]["last_turn_id"]
    shell.use_runtime(TestProvider())
    shell.run("%%openprogram --chat\nTry again.")
    assert shell.magics.turns.kernel_meta is not None
    session = default_db().open(shell.magics.turns.kernel_meta.session_id)
    assert session.get(shell.magics.turns.kernel_meta.last_turn_id or "").predecessor == cancelled


def test_a_finished_reply_line_is_shown_at_once_between_throttled_updates(
    shell: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pieces arriving faster than the update interval wait for the next update, but a
    finished line (the reply's end) is shown at once, before the turn goes on (a tool that
    runs long, a question to the user)."""
    monkeypatch.setattr(reply_output, "UPDATE_EVERY_S", 3600.0)  # no update is ever due
    out = reply_output.ReplyOutput()
    before = len(shell.display.outputs)
    for piece in ("one ", "two ", "three"):
        out.write(piece)
        out.flush()
    shown = [o["data"]["text/plain"] for o in shell.display.outputs[before:]]
    assert shown == ["one "]  # the first piece opens the display; the others wait
    out.write("\n")
    out.flush()
    shown = [o["data"]["text/plain"] for o in shell.display.outputs[before:]]
    assert shown == ["one ", "one two three\n"]
    out.close()  # nothing new: no update
    assert len(shell.display.outputs) - before == 2


def test_in_a_terminal_ipython_the_reply_streams_to_stdout_once(
    shell: Shell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A terminal prints every display (an update would print the reply again): there the
    reply streams to stdout, each piece once."""
    from IPython.core.displaypub import DisplayPublisher

    monkeypatch.setattr(reply_output, "UPDATE_EVERY_S", 0.0)  # were it a display: every piece
    shell.ip.display_pub = DisplayPublisher(shell=shell.ip)
    shell.use_runtime(TestProvider(reply="one two three four five"))
    capsys.readouterr()
    shell.run("%%openprogram --chat\nCount to five.")
    reply, drawn = capsys.readouterr().out.split("openprogram · session", 1)
    assert reply.count("one two") == 1 and reply.count("one two three four five") == 1
    assert "chat turn · completed" in drawn  # the turn's DAG, printed after the reply
