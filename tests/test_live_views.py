"""openprogram_magics.live_views: a kernel keeps the live DAG widgets of its newest cells only.

The kernel test plays a Jupyter server's kernel (``JPY_SESSION_NAME`` set, so a frontend may
watch and each ``%%openprogram`` cell shows its DAG live) with nothing but jupyter_client.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openprogram.view.saved import DAG_MIME, read_saved
from openprogram_magics.live_views import without_widget

REPO = Path(__file__).resolve().parents[1]


def test_a_retired_output_names_no_widget_and_keeps_the_rest() -> None:
    data = {
        "text/plain": "openprogram · turn 3",
        DAG_MIME: {"title": "t", "nodes": [{"id": "n_1"}], "widget": "abc123"},
        "application/vnd.openprogram.session+json": {"session_id": "s"},
    }
    out = without_widget(data)
    assert out[DAG_MIME] == {"title": "t", "nodes": [{"id": "n_1"}]}
    assert out["text/plain"] == data["text/plain"]
    assert out["application/vnd.openprogram.session+json"] == {"session_id": "s"}
    assert data[DAG_MIME]["widget"] == "abc123"  # the kept data is not changed


def test_a_large_view_saved_as_text_stays_text() -> None:
    data = {DAG_MIME: json.dumps({"title": "big", "widget": "abc123", "rows": [1, 2]})}
    out = without_widget(data)
    assert isinstance(out[DAG_MIME], str)
    assert read_saved(out[DAG_MIME]) == {"title": "big", "rows": [1, 2]}


def test_an_output_without_a_dag_is_left_as_it_is() -> None:
    assert without_widget({"text/plain": "x"}) == {"text/plain": "x"}


# --------------------------------------------------------------------------- kernel


class Kernel:
    def __init__(self, km: Any, kc: Any) -> None:
        self.km, self.kc = km, kc

    def run(self, code: str) -> list[dict[str, Any]]:
        """Run a cell; its iopub messages (until idle)."""
        msg_id = self.kc.execute(code, store_history=True, allow_stdin=False)
        while True:
            reply = self.kc.get_shell_msg(timeout=60)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        assert reply["content"]["status"] == "ok", reply["content"]
        out = []
        while True:
            msg = self.kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            out.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return out

    def value(self, expression: str) -> Any:
        msgs = self.run(f"print(__import__('json').dumps({expression}))")
        text = "".join(m["content"]["text"] for m in msgs if m["msg_type"] == "stream")
        return json.loads(text)


@pytest.fixture
def kernel(op_home: Path) -> Iterator[Kernel]:
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ)
    env["OPENPROGRAM_HOME"] = str(op_home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["JPY_SESSION_NAME"] = str(op_home.parent / "live.ipynb")  # as a Jupyter server does
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(op_home.parent), env=env)
    k = Kernel(km, kc)
    try:
        k.run("%load_ext openprogram_magics\n%openprogram provider test")
        yield k
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


AGENT = '''
from openprogram import agentic_function

@agentic_function
def triage(ticket: str, runtime=None) -> str:
    """Classify the support ticket as bug, feature or question."""
    return runtime.exec(ticket, choices=["bug", "feature", "question"])

import openprogram_magics.live_views as _lv
_lv.VIEWS.limit = 3
'''

WIDGETS = "len(__import__('ipywidgets').widgets.widget._instances)"
DAG_OBJECTS = (  # what the kernel's memory still holds, registered or not
    "[__import__('gc').collect(),"
    " sum(type(o).__name__ == 'DagWidget' for o in __import__('gc').get_objects())][1]"
)
TITLES = (  # each live DAG widget's title, by its model id
    "{k: w.title for k, w in __import__('ipywidgets').widgets.widget._instances.items()"
    " if type(w).__name__ == 'DagWidget'}"
)


def saved(data: dict[str, Any]) -> dict[str, Any]:
    return read_saved(data[DAG_MIME])


@pytest.mark.kernel
@pytest.mark.timeout(180)
def test_a_kernel_keeps_the_live_dags_of_its_newest_cells_only(kernel: Kernel) -> None:
    kernel.run(AGENT)
    opened: list[str] = []  # the DAG widgets the kernel made, oldest first
    closed: set[str] = set()
    outputs: dict[str, dict[str, Any]] = {}  # each cell's output: its latest data, in order
    for i in range(8):
        for msg in kernel.run(f'%%openprogram\ntriage("ticket {i}")'):
            content = msg["content"]
            if msg["msg_type"] == "comm_open" and content.get("target_name") == "jupyter.widget":
                if content["data"]["state"]["_model_name"] == "AnyModel":
                    opened.append(content["comm_id"])
            elif msg["msg_type"] == "comm_close":
                closed.add(content["comm_id"])
            elif msg["msg_type"] in ("display_data", "update_display_data"):
                display_id = content.get("transient", {}).get("display_id")
                if display_id and DAG_MIME in content["data"]:
                    outputs[display_id] = content["data"]
    assert len(outputs) == 8  # one DAG output a cell, each drawn live while its cell ran
    final = list(outputs.values())
    # the older five now show their saved view (named by no widget), the newest three live
    assert [saved(data).get("widget") is None for data in final] == [True] * 5 + [False] * 3
    # by widgets the kernel still has, each showing its own cell's turn
    titles = kernel.value(TITLES)
    assert {saved(d)["widget"]: saved(d)["title"] for d in final[5:]}.items() <= titles.items()
    # four widgets were ever made (the newest three and one spare reused for each new cell),
    # none closed, and the kernel holds no other
    assert len(opened) == 4 and not closed & set(opened)
    assert kernel.value(DAG_OBJECTS) == 4
    assert kernel.value(WIDGETS) == 4 * 2  # (each DOM widget has a layout widget)
    msgs = kernel.run('%%openprogram\ntriage("one more")')
    assert not [m for m in msgs if m["msg_type"] == "comm_open" and "state" in m["content"]["data"]]
    assert kernel.value(WIDGETS) == 4 * 2
