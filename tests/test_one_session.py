"""One notebook, one session: in a real kernel a plain cell's agentic call lands in the
notebook's session (no ad-hoc one), and ``openprogram sessions list`` says what each
session belongs to — the notebook's path, the research task, the script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from openprogram.cli import belongs_to
from openprogram.cli import main as cli_main
from openprogram.store.session.store import SessionStore
from openprogram_magics.headless import run_notebook

REPO = Path(__file__).resolve().parents[1]

AGENT = '''from openprogram import agentic_function

@agentic_function
def triage(ticket: str, runtime=None) -> str:
    """Classify the support ticket as bug, feature or question."""
    return runtime.exec(ticket, choices=["bug", "feature", "question"])
'''


def turns(home: Path, sid: str) -> list[tuple[str, str, list[str]]]:
    store = SessionStore(home)
    try:
        nodes = store.open(sid).nodes()
    finally:
        store.close()
    return [
        (t.name, t.input["text"], [n.name for n in nodes if n.caller == t.id])
        for t in nodes
        if t.kind == "turn"
    ]


@pytest.mark.kernel
@pytest.mark.timeout(180)
def test_a_plain_cell_in_a_kernel_records_into_the_notebooks_session(
    tmp_path: Path,
    op_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    path = tmp_path / "analysis.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext openprogram_magics\n%openprogram provider test"),
        nbformat.v4.new_code_cell(AGENT),
        nbformat.v4.new_code_cell('kind = triage("the app crashes on save")\nkind'),
        nbformat.v4.new_code_cell('%%openprogram\ntriage("and in a turn")'),
    ]
    nbformat.write(nb, path)
    result = run_notebook(path)
    assert result.error is None and result.session_id is not None
    sessions = sorted(p.name for p in (op_home / "sessions").iterdir())
    assert sessions == [result.session_id]  # the plain cell did not mint an ad-hoc session
    recorded = turns(op_home, result.session_id)
    assert [(name, calls) for name, _, calls in recorded] == [
        ("cell [3]", ["triage"]),
        ("cell [4]", ["triage"]),
    ]
    assert "kind = triage(" in recorded[0][1]
    out = nbformat.read(path, as_version=4)
    assert "adhoc" not in str(out.cells[2].outputs)
    capsys.readouterr()
    assert cli_main(["sessions", "list"]) == 0
    listed = capsys.readouterr().out
    assert "  notebook " in listed and listed.rstrip().endswith("analysis.ipynb")


def test_sessions_list_names_the_script_a_bare_call_ran_in(
    tmp_path: Path, op_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "nightly_triage.py"
    script.write_text(AGENT + "triage('disk full')\n")
    env = {**os.environ, "OPENPROGRAM_HOME": str(op_home), "OPENPROGRAM_PROVIDER": "test"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "recording to session adhoc_" in done.stderr  # a script still gets one, announced
    capsys.readouterr()
    assert cli_main(["sessions", "list"]) == 0
    assert "script nightly_triage.py" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("meta", "says"),
    [
        (
            {"id": "nb_1", "title": "notebook work/a.ipynb", "source": "notebook"},
            "notebook work/a.ipynb",
        ),
        (
            {"id": "research_1", "title": "agent reliability", "source": "cli"},
            "research: agent reliability",
        ),
        ({"id": "nb_2", "title": "nb_2", "source": "notebook"}, "notebook"),
        ({"id": "x", "problem": "meta.json unreadable: …"}, "meta.json unreadable: …"),
    ],
)
def test_what_a_session_belongs_to(meta: dict[str, str], says: str) -> None:
    assert belongs_to(meta) == says
