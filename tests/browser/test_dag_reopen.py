"""Issue 10 in a real browser: a saved notebook shows its DAGs after the kernel is gone.

Run cells → save → shut the kernel down → close → reopen without running anything: every
DAG output draws its nodes from the data saved in the notebook (the extension's renderer,
``dag.js``), a click shows the docstring and the prompt, and nothing says "model not
found".  The same for an untrusted notebook produced by ``openprogram run``, in JupyterLab
and in Notebook 7; and nbconvert of the Lab-saved file draws the static DAG.

Screenshots to look at: ``/tmp/op-reopen-lab.png``, ``/tmp/op-reopen-run.png``,
``/tmp/op-reopen-nb7.png``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from openprogram.view.saved import read_saved

from .agents import AGENTS, LOAD, TRIAGE_DOC
from .jupyterlab import NOTEBOOK, LabPage, NotebookPage, nbconvert_html, write_notebook

CELLS = [
    LOAD,
    AGENTS,
    '%%openprogram\nhandle("the app crashes on save")',
    '%%openprogram\ntriage("please add a dark mode")',
]
DAG_MIME = "application/vnd.openprogram.dag+json"


def dag_outputs(lab: LabPage) -> Any:
    return lab.page.locator(f"{NOTEBOOK} .jp-OutputArea-output .op-dag")


def check_saved_dags(lab: LabPage, count: int) -> None:
    """``count`` DAGs drawn; in the first, click triage (docstring) and an LLM (prompt)."""
    dags = dag_outputs(lab)
    dags.nth(count - 1).locator("g.op-node").first.wait_for()
    assert dags.count() == count, dags.count()
    for i in range(count):
        kinds = (
            dags.nth(i).locator("g.op-node").evaluate_all("(els) => els.map((e) => e.dataset.kind)")
        )
        assert kinds.count("turn") == 1 and "function" in kinds and "llm" in kinds, kinds
    first = dags.nth(0)
    triage = first.locator("g.op-node[data-kind='function']").filter(
        has=lab.page.locator(".op-name", has_text=re.compile(r"^triage$"))
    )
    triage.locator(".op-shape").click()
    doc = first.locator(".op-detail .op-detail-doc")
    doc.wait_for()
    assert TRIAGE_DOC in doc.inner_text()
    llms = first.locator("g.op-node[data-kind='llm']")
    found = False
    for i in range(llms.count()):
        llms.nth(i).locator(".op-shape").click()
        messages = first.locator(".op-detail .op-detail-messages")
        messages.wait_for()
        if TRIAGE_DOC in messages.inner_text():
            found = True
            break
    assert found, "no LLM node shows triage's prompt"
    # the live renderer, if one was tried, never shows (or leaves) its error
    lab.page.wait_for_timeout(1500)
    assert "model not found" not in lab.page.content()


def is_trusted(lab: LabPage) -> bool:
    return bool(
        lab.page.evaluate(
            """() => window.jupyterapp.shell.currentWidget.model.cells.get(2).trusted"""
        )
    )


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_lab_saved_notebook_reopened_without_its_kernel_draws_every_dag(
    lab: LabPage, notebook_dir: tuple[Path, str]
) -> None:
    abs_dir, rel_dir = notebook_dir
    path = write_notebook(abs_dir / "reopen.ipynb", CELLS)
    rel = f"{rel_dir}/reopen.ipynb"
    lab.open_notebook(rel)
    lab.assert_extension_under_test()
    lab.wait_kernel_idle()
    for i in range(len(CELLS)):
        out = lab.run_cell_expect(i, i + 1, timeout=60_000)
        assert "Traceback" not in out, out
    dag_outputs(lab).nth(1).locator("g.op-node").first.wait_for()
    lab.save()
    saved = json.loads(path.read_text())
    outs = [
        o for c in saved["cells"] for o in c.get("outputs", []) if DAG_MIME in o.get("data", {})
    ]
    assert len(outs) == 2
    assert all("application/vnd.jupyter.widget-view+json" not in o["data"] for o in outs)
    # the turn is named after the prompt the frontend showed
    names = [read_saved(o["data"][DAG_MIME])["summary"][0]["name"] for o in outs]
    prompts = [lab.cell(i).locator(".jp-InputPrompt").inner_text() for i in (2, 3)]
    assert [n.removeprefix("cell ") for n in names] == [
        p.removeprefix("In ").strip().rstrip(":") for p in prompts
    ]

    # shut the kernel down, close, reopen: nothing runs, the DAGs are drawn from the file
    lab.server.shutdown_notebook_kernels(rel)
    lab.page.goto("about:blank")
    lab.open_notebook(rel)
    check_saved_dags(lab, 2)
    shot = Path("/tmp/op-reopen-lab.png")
    dag_outputs(lab).nth(0).screenshot(path=str(shot))
    print(f"screenshot: {shot}")

    # nbconvert of the same file draws the static DAG and needs no widget script
    html = nbconvert_html(lab.server, path).read_text()
    svgs = re.findall(r"<svg.*?</svg>", html, re.S)
    assert len(svgs) == 2 and ">triage</tspan>" in svgs[0], len(svgs)
    assert "unpkg.com" not in html and "widget-view" not in html
    lab.server.shutdown_notebook_kernels(rel)


def produce_with_openprogram_run(lab: LabPage, target: Path) -> None:
    """``openprogram run`` on a fresh notebook, with the server's sessions folder."""
    write_notebook(target, CELLS)
    proc = subprocess.run(
        [sys.executable, "-m", "openprogram.cli", "run", str(target)],
        capture_output=True,
        text=True,
        timeout=180,
        env=lab.server.env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.browser
@pytest.mark.timeout(240)
def test_untrusted_openprogram_run_notebook_draws_its_dags_in_lab_and_notebook7(
    lab: LabPage, notebook_dir: tuple[Path, str]
) -> None:
    abs_dir, rel_dir = notebook_dir
    produce_with_openprogram_run(lab, abs_dir / "ran.ipynb")
    rel = f"{rel_dir}/ran.ipynb"
    lab.open_notebook(rel)
    check_saved_dags(lab, 2)
    assert not is_trusted(lab)  # drawn although the notebook is not trusted
    shot = Path("/tmp/op-reopen-run.png")
    dag_outputs(lab).nth(0).screenshot(path=str(shot))
    print(f"screenshot: {shot}")
    lab.server.shutdown_notebook_kernels(rel)

    nb = NotebookPage(lab.page, lab.server)
    nb.open_notebook(rel)
    assert nb.app_name() == "Jupyter Notebook", nb.app_name()
    check_saved_dags(nb, 2)
    shot = Path("/tmp/op-reopen-nb7.png")
    nb.page.screenshot(path=str(shot))
    print(f"screenshot: {shot}")
    lab.server.shutdown_notebook_kernels(rel)
