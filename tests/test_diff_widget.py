"""``%openprogram diff A B --widget`` (issue 24): the comparison side by side in a widget.

In a real kernel played by a fake frontend (only ``jupyter_client``): the widget's model
reaches the frontend with every pair (the edited function's docstring diff on its row, the
unchanged calls too, for the toggle), the output carries the static form and the data the
extension draws (naming the widget's model) but no widget view, and what the browser
toggles (``show_same``, ``opened``) reaches the kernel.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openprogram_magics.diff_widget import DIFF_VIEW_MIME
from tests.browser.agents import AGENTS, LOAD, TRIAGE_DOC
from tests.test_bridge_frontend import REPO, _execute, _stdout

NEW_DOC = "Sort the ticket into bug, feature or question; when unsure, say question."
DIFF_MIME = "application/vnd.openprogram.diff+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def kc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["OPENPROGRAM_HOME"] = str(tmp_path_factory.mktemp("home"))
    cwd: Path = tmp_path_factory.mktemp("nb")
    km, client = start_new_kernel(kernel_name="python3", cwd=str(cwd), env=env)
    try:
        yield client
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)


def run(kc: Any, code: str) -> list[dict]:
    msgs = _execute(kc, code, timeout=60)
    errors = [m for m in msgs if m["msg_type"] == "error"]
    assert not errors, errors[0]["content"]["traceback"]
    return msgs


@pytest.mark.kernel
@pytest.mark.timeout(120)
def test_the_widget_gets_every_pair_and_the_output_keeps_the_static_form(kc: Any) -> None:
    run(kc, LOAD)
    run(kc, AGENTS)
    run(kc, '%%openprogram --no-dag\nhandle("the app crashes on save")')
    run(kc, AGENTS.replace(TRIAGE_DOC, NEW_DOC))
    run(kc, '%%openprogram --no-dag\nhandle("the app crashes on save")')
    msgs = run(kc, "%openprogram diff 1 2 --widget")

    # the frontend is sent the widget's model with the rows
    opens = [
        m["content"]
        for m in msgs
        if m["msg_type"] == "comm_open"
        and m["content"]["data"]["state"].get("_model_name") == "AnyModel"
    ]
    assert len(opens) == 1, [m["msg_type"] for m in msgs]
    state = opens[0]["data"]["state"]
    view = state["view"]
    assert view["counts"] == {"paired": 5, "added": 0, "removed": 0}
    assert any("the docstring of `triage` changed" in f for f in view["findings"])
    by_path = {r["path"]: r for r in view["rows"]}
    assert len(by_path) == 5  # every pair, the unchanged ones too (for the toggle)
    # the answers stayed the same: the docstring's rows differ, the turn's is the same
    assert {r["state"] for r in view["rows"]} == {"differs", "same"}, view["rows"]
    (edited,) = [r for r in view["rows"] if any(t == "docstring" for t, _ in r["sections"])]
    assert "triage" in edited["path"] and edited["state"] == "differs"
    doc = dict(edited["sections"])["docstring"]
    assert f"-{TRIAGE_DOC}" in doc and f"+{NEW_DOC}" in doc
    handle_fn = next(r for r in view["rows"] if r["path"].endswith("› handle"))
    assert not any(t == "docstring" for t, _ in handle_fn["sections"])  # its doc is the same
    assert state["show_same"] is False
    assert state["opened"] == [i for i, r in enumerate(view["rows"]) if r["state"] != "same"]

    # the output: static HTML + text + the report + the extension's data, no widget view
    (result,) = [m["content"]["data"] for m in msgs if m["msg_type"] == "execute_result"]
    assert WIDGET_VIEW not in result
    assert "the docstring of `triage` changed" in result["text/html"]
    assert "<script" not in result["text/html"]
    assert result[DIFF_MIME]["counts"] == view["counts"]
    saved = result[DIFF_VIEW_MIME]
    assert saved["widget"] == opens[0]["comm_id"] and saved["view"] == view

    # what the browser toggles reaches the kernel's widget
    update = kc.session.msg(
        "comm_msg",
        {
            "comm_id": opens[0]["comm_id"],
            "data": {"method": "update", "state": {"show_same": True, "opened": [0]}},
        },
    )
    kc.shell_channel.send(update)
    out = _stdout(run(kc, "import json\nw = _.widget\nprint(json.dumps([w.show_same, w.opened]))"))
    assert json.loads(out) == [True, [0]]
