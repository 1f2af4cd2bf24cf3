"""Issue 12 in a real browser: a background cell keeps running while another cell executes
and returns; its progress line and DAG change while it runs; ``%openprogram stop`` ends it
within the grace period; a streamed reply grows in the DOM before the call finishes
(against the loopback OpenAI-compatible wire server with SSE); a question a background run
asks appears under its cell after the cell returned, and the typed answer reaches it.

Screenshots: ``/tmp/op-background.png``, ``/tmp/op-background-ask.png``.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.test_background import PAINT
from tests.wire_server import Reply, WireServer

from .agents import LOAD
from .jupyterlab import LabPage, write_notebook

SLOW_STEPS = '''
import time
from openprogram import agentic_function, create_runtime
from openprogram.providers.test import FunctionProvider


def slow(request):
    time.sleep(0.4)
    return "ok"


from openprogram_magics import use_runtime
use_runtime(create_runtime(FunctionProvider(slow), backoff=0.0))


@agentic_function
def step(i: int, runtime=None) -> str:
    """Do one step."""
    return runtime.exec(f"step {i}")
'''
STREAMING = """
from openprogram import create_runtime
from openprogram.providers.openai_provider import OpenAIProvider

from openprogram_magics import use_runtime
use_runtime(create_runtime(OpenAIProvider(base_url={url!r}, api_key="k", model="wire")))
"""
SCREENSHOT = Path("/tmp/op-background.png")


def progress(lab: LabPage, index: int) -> Any:
    return lab.cell(index).locator(".jp-OutputArea-output pre.op-progress")


def calls_in(text: str) -> int:
    found = re.search(r"(\d+) calls", text)
    return int(found.group(1)) if found else -1


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_a_background_cell_runs_while_another_cell_executes_and_stops(
    lab: LabPage, notebook_dir: tuple[Path, str]
) -> None:
    abs_dir, rel_dir = notebook_dir
    cells = [
        LOAD,
        SLOW_STEPS,
        "%%openprogram --background\nresults = [step(i) for i in range(60)]",
        "answer = 6 * 7\nanswer",
        "%openprogram stop",
    ]
    write_notebook(abs_dir / "bg.ipynb", cells)
    lab.open_notebook(f"{rel_dir}/bg.ipynb")
    lab.wait_kernel_idle()
    lab.run_cell_expect(0, 1)
    assert "Error" not in lab.run_cell_expect(1, 2)
    lab.run_cell_expect(2, 3)  # the background cell returns at once
    line = progress(lab, 2)
    line.first.wait_for(timeout=20_000)
    assert line.first.get_attribute("data-state") == "running"

    out = lab.run_cell_expect(3, 4)  # another cell executes and returns meanwhile
    assert "42" in out
    assert line.first.get_attribute("data-state") == "running"

    first = calls_in(line.first.inner_text())
    llm_nodes = lab.cell(2).locator(".jp-OutputArea-output g.op-node[data-kind='llm']")
    drawn = llm_nodes.count()
    lab.page.wait_for_function(
        """([sel, n]) => {
            const el = document.querySelectorAll(sel)[2].querySelector('pre.op-progress');
            const m = el && el.textContent.match(/(\\d+) calls/);
            return m && Number(m[1]) >= n;
        }""",
        arg=[".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell", first + 3],
        timeout=20_000,
    )
    assert calls_in(line.first.inner_text()) >= first + 3  # the progress line moved
    assert llm_nodes.count() > drawn  # and so did the DAG
    lab.screenshot("op-background")

    lab.run_cell_expect(4, 5)  # (a stop that waited for the run's end would time out here)
    lab.cell(2).locator("pre.op-progress[data-state='stopped']").wait_for(timeout=10_000)
    assert "stopped" in line.first.inner_text()
    lab.server.shutdown_notebook_kernels(f"{rel_dir}/bg.ipynb")


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_streamed_text_grows_in_the_dom_before_the_call_finishes(
    lab: LabPage, notebook_dir: tuple[Path, str], wire: WireServer
) -> None:
    abs_dir, rel_dir = notebook_dir
    cells = [
        LOAD,
        STREAMING.format(url=wire.openai_base_url),
        '%%openprogram --no-dag\nfrom openprogram import llm\nreply = llm("Say it")',
    ]
    write_notebook(abs_dir / "stream.ipynb", cells)
    lab.open_notebook(f"{rel_dir}/stream.ipynb")
    lab.wait_kernel_idle()
    lab.run_cell_expect(0, 1)
    assert "Error" not in lab.run_cell_expect(1, 2)
    # three pieces, then the server holds the rest until the test has looked
    held = threading.Event()
    chunks = ["Streaming ", "into ", "the cell", " — done."]
    wire.reply(Reply(chunks=chunks, stall_after=4, stall_for=120, release=held))
    cell = lab.cell(2)
    cell.locator(".jp-InputPrompt").click()
    lab.page.keyboard.press("Shift+Enter")
    lab.wait_output(2, "Streaming into the cell", timeout=20_000)
    assert cell.locator(".jp-InputPrompt").inner_text().strip() == "[*]:"  # still running
    assert "done" not in lab.output_text(2)
    held.set()
    cell.locator(".jp-InputPrompt", has_text="[3]").wait_for(timeout=30_000)
    assert "Streaming into the cell — done." in lab.output_text(2)


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_a_background_cells_question_is_answered_under_that_cell(
    lab: LabPage, notebook_dir: tuple[Path, str]
) -> None:
    abs_dir, rel_dir = notebook_dir
    cells = [LOAD, PAINT, "%%openprogram --background\npainted = paint()", "painted"]
    write_notebook(abs_dir / "ask.ipynb", cells)
    lab.open_notebook(f"{rel_dir}/ask.ipynb")
    lab.wait_kernel_idle()
    lab.run_cell_expect(0, 1)
    lab.run_cell_expect(1, 2)
    lab.run_cell_expect(2, 3)  # returns at once; the run waits for the answer
    cell = lab.cell(2)
    box = cell.locator(".jp-Stdin-input")
    box.wait_for(timeout=20_000)
    assert "Which colour? [teal/red]" in cell.locator(".jp-Stdin-prompt").inner_text()
    assert progress(lab, 2).first.get_attribute("data-state") == "running"
    assert "background [3]" in progress(lab, 2).first.inner_text()  # the cell's own In [3]
    lab.screenshot("op-background-ask")  # the question under the background cell
    box.fill("teal")
    box.press("Enter")
    cell.locator("pre.op-progress[data-state='completed']").wait_for(timeout=20_000)
    assert "painted teal" in lab.run_cell_expect(3, 4)  # the answer reached the function
    lab.server.shutdown_notebook_kernels(f"{rel_dir}/ask.ipynb")
