"""Chat cells in a notebook run by a real kernel (nbclient, as ``openprogram run`` does),
read back from disk (issue 38, item 5): the streamed reply is saved as ONE output, so
nbconvert's HTML shows it as written; the turn's DAG is saved with the tool it called; an
empty reply says so; ``%openprogram stale`` finds the unedited chat cells unchanged.  With
a frontend watching, the chat turn's DAG is live while it runs, as a plain cell's is."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbconvert import HTMLExporter

from openprogram.view.saved import DAG_MIME, read_saved
from openprogram_magics.headless import run_notebook
from openprogram_magics.notebook import MIME_TYPE
from tests.test_chat_cell import TOOLS

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.kernel, pytest.mark.timeout(180)]

USE = """
from openprogram.providers import create_runtime
from openprogram.providers.test import TestProvider

from openprogram_magics import use_runtime
use_runtime(create_runtime(TestProvider({reply}, tool_calls=[("lookup", {{"query": "DAG"}})])))
"""
REPLY = "[test reply] Earlier step: lookup(query='DAG') -> glossary entry for DAG"
EMPTY = "empty reply: the model called lookup (1 tool call), then answered with no text"


def test_a_notebook_saves_each_chat_reply_as_one_output_with_its_dag_and_notes(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [str(REPO), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, paths)))
    path = tmp_path / "chat.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext openprogram_magics\n" + USE.format(reply="None")),
        nbformat.v4.new_code_cell(TOOLS),
        nbformat.v4.new_code_cell("%%openprogram --chat\nWhat is a DAG?"),
        nbformat.v4.new_code_cell(USE.format(reply="''")),
        nbformat.v4.new_code_cell("%%openprogram --chat\nAnd a graph?"),
        nbformat.v4.new_code_cell(f"%openprogram stale --notebook {path}"),
    ]
    nbformat.write(nb, path)
    ran = run_notebook(path, timeout=120)
    assert ran.error is None, ran.error

    saved = nbformat.read(path, as_version=4)
    chat = saved.cells[2].outputs
    streams = [o for o in chat if o.output_type == "stream" and "DAG" in o.text]
    assert streams == []  # no piece of the reply saved as a stream output of its own
    (reply,) = [o for o in chat if o.output_type == "display_data" and MIME_TYPE not in o.data]
    assert reply.data["text/plain"].strip() == REPLY  # the whole reply, in one output
    (turn,) = [o.data for o in chat if MIME_TYPE in o.get("data", {})]
    assert "tool lookup [completed]" in turn["text/plain"] and DAG_MIME in turn
    assert "lookup" in turn["text/html"]

    html, _ = HTMLExporter().from_notebook_node(saved)
    assert "glossary entry for DAG" in html  # one block of text, not a word per output

    empty = saved.cells[4].outputs
    (note,) = [o for o in empty if o.output_type == "display_data" and MIME_TYPE not in o.data]
    assert f"[{EMPTY}]" in note.data["text/plain"]
    (payload,) = [o.data[MIME_TYPE] for o in empty if MIME_TYPE in o.get("data", {})]
    assert payload["note"] == EMPTY

    stale = "".join(o.get("data", {}).get("text/plain", "") for o in saved.cells[5].outputs)
    assert "0 of 2 recorded cell(s) stale" in stale, stale
    assert "no recording" not in stale


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_with_a_live_frontend_a_chat_turn_draws_its_dag_live_then_saves_it(
    op_home: Path,
) -> None:
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ, OPENPROGRAM_HOME=str(op_home))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    km, kc = start_new_kernel(kernel_name="python3", env=env)
    try:

        def run(code: str) -> list[dict[str, Any]]:
            msg = kc.session.msg(  # as Lab sends it: the cell named, so a frontend watches
                "execute_request",
                {"code": code, "silent": False, "store_history": True, "allow_stdin": False},
                metadata={"cellId": "cell-1"},
            )
            kc.shell_channel.send(msg)
            msg_id = msg["header"]["msg_id"]
            out = []
            while True:
                m = kc.get_iopub_msg(timeout=60)
                if m["parent_header"].get("msg_id") != msg_id:
                    continue
                out.append(m)
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    return out

        run("%load_ext openprogram_magics\n" + USE.format(reply="None") + TOOLS)
        msgs = run("%%openprogram --chat\nWhat is a DAG?")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    views = [
        m for m in msgs if m["msg_type"] == "display_data" and WIDGET_VIEW in m["content"]["data"]
    ]
    (live,) = views  # drawn when the turn began
    model = live["content"]["data"][WIDGET_VIEW]["model_id"]
    sent = [  # what the live widget was sent while the turn ran
        json.dumps(m["content"]["data"])
        for m in msgs
        if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == model
    ]
    assert any('"name": "lookup"' in s for s in sent)  # the tool call appeared in the view
    display_id = live["content"]["transient"]["display_id"]
    final = [
        m["content"]["data"]
        for m in msgs
        if m["msg_type"] == "update_display_data"
        and m["content"]["transient"]["display_id"] == display_id
    ][-1]
    assert WIDGET_VIEW not in final and MIME_TYPE in final
    saved = read_saved(final[DAG_MIME])
    assert saved["widget"] == model
    assert [s["kind"] for s in saved["summary"]][:2] == ["turn", "reply"]
