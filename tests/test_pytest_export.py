"""A session is a keyless test (issue 39, item 3): ``openprogram sessions export ID --pytest
FILE`` writes a pytest module that calls the session's agentic functions again with their
recorded inputs, answers their LLM calls from the recording written in it and asserts
their outputs.  It runs in a fresh process with no key and model requests blocked; an
edited docstring fails it naming the call with the prompt's diff; ``--record`` refreshes it
through a real provider (the suite's loopback OpenAI-compatible server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from wire_server import Reply, WireServer

from openprogram import create_runtime, session_context
from openprogram.agent.session_db import default_db
from openprogram.cli import main as cli_main
from openprogram.programs.functions_from import load_functions
from openprogram.providers.test import TestProvider

TRIAGE = '''from openprogram import agentic_function


@agentic_function
def triage(ticket: str, runtime=None) -> str:
    """Classify the ticket as bug, feature or question."""
    return runtime.exec(ticket, choices=["bug", "feature", "question"])


@agentic_function
def brief(text: str, runtime=None) -> dict:
    """Write a one-line brief of the text."""
    kind = triage(text)
    return {"kind": kind, "brief": str(runtime.exec(text, temperature=0.2, max_tokens=60))}
'''
KEY = "sk-exportkey-" + "K3" * 12


def run_pytest(test_file: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """The module run by pytest in a process of its own: no key, model requests blocked."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env.update(OPENPROGRAM_ALLOW_MODEL_REQUESTS="0", OPENPROGRAM_HOME=str(home))
    env.pop("OPENPROGRAM_PROVIDER", None)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    return subprocess.run(
        [*args, test_file.name], cwd=test_file.parent, env=env, capture_output=True, text=True
    )


def record(module_path: Path, runtime: Any) -> str:
    module = load_functions(str(module_path))
    with session_context(runtime=runtime) as handle:
        module.triage("the app crashes on save")
        module.brief("a button to export the table")
    return handle.session_id


def test_a_session_becomes_a_test_that_runs_with_no_key_and_fails_on_a_changed_prompt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = tmp_path / "project" / "triage.py"
    code.parent.mkdir()
    code.write_text(TRIAGE)
    sid = record(code, create_runtime(TestProvider(), backoff=0.0))
    out = tmp_path / "project" / "tests" / "test_triage.py"
    assert (
        cli_main(["sessions", "export", sid, "--pytest", str(out), "--functions", str(code)]) == 0
    )
    assert f"wrote {out}: 2 tests from session {sid}" in capsys.readouterr().out
    text = out.read_text()
    assert 'defined = functions_from("../triage.py", __file__)' in text  # beside the test
    assert 'assert triage(ticket="the app crashes on save") == "bug"' in text
    assert '"settings": {"max_tokens": 60, "temperature": 0.2}' in text

    offline_home = tmp_path / "offline-home"
    ran = run_pytest(out, offline_home)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "2 passed" in ran.stdout
    assert not offline_home.exists()  # nothing was stored

    code.write_text(TRIAGE.replace("Classify the ticket", "Sort the ticket"))
    ran = run_pytest(out, offline_home)
    assert ran.returncode == 1 and "2 failed" in ran.stdout
    said = ran.stdout
    assert "ReplayMiss" in said and "test_triage_1: LLM call 1 of function triage" in said
    assert "first difference: messages[0].content:" in said
    assert "-system: Classify the ticket" in said and "+system: Sort the ticket" in said
    assert f"openprogram sessions export {sid} --pytest" in said  # how to record it again


def test_record_refreshes_the_test_through_a_real_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = tmp_path / "triage.py"
    code.write_text(TRIAGE)
    sid = record(code, create_runtime(TestProvider(), backoff=0.0))
    out = tmp_path / "tests" / "test_triage.py"
    export = ["sessions", "export", sid, "--pytest", str(out), "--functions", str(code)]
    assert cli_main(export) == 0
    code.write_text(TRIAGE.replace("one-line brief", "short brief"))
    assert run_pytest(out, tmp_path / "h").returncode == 1  # the prompt changed

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with WireServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        choice = json.dumps({"choice": "bug"})
        server.reply(
            Reply(text="bug"),  # triage
            Reply(text=choice),  # brief's triage
            Reply(text=f"Export button; the key {KEY} stays out"),  # brief
        )
        capsys.readouterr()
        assert cli_main([*export, "--record"]) == 0
        sent = [r.body for r in server.requests if r.path.endswith("/chat/completions")]
    said = capsys.readouterr().out
    assert "recorded again with openai: session " in said
    assert any("Write a short brief of the text." in json.dumps(body) for body in sent)
    text = out.read_text()
    assert KEY not in text and "the key *** stays out" in text
    assert "Write a short brief of the text." in text and "one-line brief" not in text
    assert f"--pytest {out}" in text and sid not in text  # names the new recording
    ran = run_pytest(out, tmp_path / "h")
    assert ran.returncode == 0, ran.stdout + ran.stderr


NOTEBOOK_CELLS = [
    "%load_ext openprogram_magics",
    "import json\nBRIEF = True",
    "%%openprogram\nfrom openprogram import agentic_function\n\n\n@agentic_function\n"
    'def label(text: str, runtime=None) -> str:\n    """Label the text in one word."""\n'
    "    return str(runtime.exec(text))\n\n\nlabel('hello')",
    "print('this cell is work, not a definition')\nraise SystemExit('never run')",
]


def test_the_functions_of_a_notebook_come_from_its_cells(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nb = tmp_path / "labels.ipynb"
    cells = [{"cell_type": "code", "source": s, "metadata": {}} for s in NOTEBOOK_CELLS]
    nb.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4}))
    module = load_functions(str(nb))  # the definitions only: the raising cell is not run
    assert module.BRIEF is True and module.label.__doc__ == "Label the text in one word."
    with session_context(runtime=create_runtime(TestProvider(), backoff=0.0)) as handle:
        module.label("hello")
    out = tmp_path / "tests" / "test_labels.py"
    args = ["sessions", "export", handle.session_id, "--pytest", str(out)]
    assert cli_main(args) == 2  # where the function is defined is not known yet
    assert "pass --functions" in capsys.readouterr().err
    # the notebook the session was last run from (what a kernel notes) is the default
    default_db().open(handle.session_id).note_place(f"notebook {nb}")
    assert cli_main(args) == 0
    assert 'functions_from("../labels.ipynb", __file__)' in out.read_text()
    ran = run_pytest(out, tmp_path / "h")
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr
