"""The suite's model server, when it dies, is reported as such in one line (not as the
client's "Server disconnected" tracebacks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from real_server import died


def test_a_server_killed_by_an_illegal_instruction_is_named_in_one_line(tmp_path: Path) -> None:
    crash = "import os, signal; os.kill(os.getpid(), signal.SIGILL)"
    code = subprocess.run([sys.executable, "-c", crash], check=False).returncode
    line = died(code, tmp_path / "llama-server.log")
    assert line.startswith("the model server crashed: SIGILL (Illegal instruction)")
    assert "setup.sh" in line and "\n" not in line
    assert died(1, tmp_path / "x.log").startswith("the model server crashed: exit code 1 ")
