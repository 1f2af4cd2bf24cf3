"""``notebooks/mcp_tools.ipynb`` run headless (a real kernel, ``mcp-server-time``): every
cell runs offline, the server stops with the kernel (no process left), and a replay of the
saved notebook answers every MCP call from the recording without starting the server."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from openprogram.cli import main as cli_main

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(600)]
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "mcp_tools.ipynb"
REAL = Path(sys.executable).with_name("mcp-server-time")


def servers_running() -> set[int]:
    """Every ``mcp-server-time`` process of the machine."""
    out = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"mcp-server-time" in (entry / "cmdline").read_bytes():
                out.add(int(entry.name))
        except OSError:
            continue
    return out


def outputs(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    return [
        "".join(o.get("text") or o.get("data", {}).get("text/plain", ""))
        for c in cells
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
    ]


@pytest.mark.skipif(not REAL.exists(), reason="mcp-server-time is not installed")
def test_the_notebook_runs_offline_stops_its_server_and_replays_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the real server behind a script that leaves a mark each time it is started
    bin_dir, started = tmp_path / "bin", tmp_path / "started"
    bin_dir.mkdir()
    wrapper = bin_dir / "mcp-server-time"
    wrapper.write_text(f'#!/bin/sh\necho started >> "{started}"\nexec "{REAL}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    before = servers_running()

    notebook = json.loads(NOTEBOOK.read_text())  # without its last cell, `mcp remove`:
    assert "".join(notebook["cells"][-1]["source"]) == "%openprogram mcp remove time"
    del notebook["cells"][-1]  # the server is running when the kernel shuts down
    source = tmp_path / "source.ipynb"
    source.write_text(json.dumps(notebook))
    out = tmp_path / "mcp_tools.ipynb"
    assert cli_main(["run", str(source), "-o", str(out), "--timeout", "300"]) == 0
    shown = outputs(out)
    assert any("tools: get_current_time, convert_time" in text for text in shown)
    assert any("('Asia/Tokyo'," in text for text in shown)
    assert any('"timezone": "Europe/Paris"' in text for text in shown)
    assert started.read_text().count("started") == 1
    assert servers_running() - before == set()  # stopped with the kernel

    started.unlink()
    replayed = tmp_path / "replayed.ipynb"
    assert cli_main(["run", str(out), "--replay", "-o", str(replayed), "--timeout", "300"]) == 0
    assert not started.exists()  # no server was started by the replay
    again = outputs(replayed)
    assert any("('Asia/Tokyo'," in text for text in again)
    assert any("tools: get_current_time, convert_time" in text for text in again)
