"""Kernels for headless runs (``kernels``): on unix sockets in Jupyter's runtime folder, or
the temp folder when that path is too long for a socket name — no port opened, and no
"running over TCP" warning among the run's own output."""

from __future__ import annotations

import tempfile
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import KernelManager

from openprogram.errors import RunError
from openprogram_magics.kernels import MAX_SOCKET_PATH, QuietClient, use_ipc


def test_a_kernel_goes_on_unix_sockets_in_the_runtime_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with tempfile.TemporaryDirectory(prefix="op-") as short:
        runtime = Path(short) / "runtime"
        monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
        km = use_ipc(KernelManager())
        assert km.transport == "ipc" and km.ip.startswith(f"{runtime}/openprogram-")
        assert runtime.is_dir()
        client = QuietClient(nbformat.v4.new_notebook(), kernel_name="python3")
        assert client.create_kernel_manager().transport == "ipc"


def test_too_long_a_runtime_folder_falls_back_to_the_temp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * MAX_SOCKET_PATH)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(deep))
    km = use_ipc(KernelManager())
    assert km.transport == "ipc" and km.ip.startswith(tempfile.gettempdir())
    assert len(km.ip.encode()) + 7 <= MAX_SOCKET_PATH and not deep.exists()


@pytest.mark.kernel
@pytest.mark.timeout(120)
def test_a_notebook_runs_on_sockets_with_only_its_own_output(
    capfd: pytest.CaptureFixture[str],
) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    client = QuietClient(nb, kernel_name="python3", timeout=60)
    client.execute()
    (output,) = nb.cells[0].outputs
    assert output["text"] == "42\n"
    assert "TCP" not in capfd.readouterr().err  # the kernel said nothing about ports


SECRET = "nbsecret-0123456789"


@pytest.fixture
def key_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_API_KEY", SECRET)  # a credential variable: masked wherever shown


def one_cell(code: str) -> QuietClient:
    """A runner of a notebook of one code cell."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    return QuietClient(nb, kernel_name="python3", timeout=60)


@pytest.mark.kernel
@pytest.mark.timeout(120)
def test_what_a_child_process_prints_stays_off_the_runners_terminal(
    capfd: pytest.CaptureFixture[str], key_in_env: None
) -> None:
    one_cell(
        'import subprocess\nsubprocess.run(["sh", "-c", "echo child $MY_API_KEY >&2"])'
    ).execute()
    assert SECRET not in "".join(capfd.readouterr())


@pytest.mark.kernel
@pytest.mark.timeout(120)
def test_a_kernel_that_dies_says_why_in_one_line_masked(
    capfd: pytest.CaptureFixture[str], key_in_env: None
) -> None:
    code = "import os, sys\nsys.__stderr__.write('fatal: ' + os.environ['MY_API_KEY'] + '\\n')\n"
    with pytest.raises(RunError) as caught:
        one_cell(code + "os._exit(3)").execute()
    assert str(caught.value) == "the notebook's kernel ended: Kernel died (it said: fatal: ***)"
    assert SECRET not in "".join(capfd.readouterr())
