"""`openprogram sessions show` sees what another process is running in the session now
(a research stage, a kernel's cell) before its turn commits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openprogram.cli import main

WRITER = """
import pathlib, sys, threading
from openprogram import agentic_function, session_context
from openprogram.providers import create_runtime

@agentic_function
def survey_topic(task: str) -> str:
    \"\"\"Survey the literature on the task.\"\"\"
    print("started", flush=True)
    sys.stdin.readline()  # the test says when to go on
    return "surveyed"

with session_context(sys.argv[1], runtime=create_runtime("test")):
    survey_topic("why is the sky blue")
"""


@pytest.mark.timeout(120)
def test_show_lists_the_stage_running_in_another_process(
    tmp_path: Path, op_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {**os.environ, "OPENPROGRAM_HOME": str(op_home)}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, "s_live"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdin is not None
        assert writer.stdout.readline().strip() == "started"  # the stage is running
        assert main(["--home", str(op_home), "sessions", "show", "s_live"]) == 0
        shown = capsys.readouterr().out
        assert f"running  in process {writer.pid}, not committed yet:" in shown
        assert "  function survey_topic · running 0m" in shown
        writer.stdin.write("go\n")
        writer.stdin.flush()
        assert writer.wait(timeout=60) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
    assert main(["--home", str(op_home), "sessions", "show", "s_live"]) == 0
    after = capsys.readouterr().out
    assert "running  in process" not in after  # committed: part of the tree now
    assert "survey_topic" in after
