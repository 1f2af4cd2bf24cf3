"""The provider is part of the notebook: its name and model (never a key) go into the
notebook's metadata and come back after a restart or on another machine."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

from openprogram_magics import bridge, use_runtime
from openprogram_magics.headless import run_notebook, state_payload
from openprogram_magics.notebook import MIME_TYPE, NotebookMeta, parse_metadata
from tests.test_magics import AGENTS, Shell

REPO = Path(__file__).resolve().parents[1]


def test_the_chosen_provider_is_recorded_and_a_restarted_kernel_uses_it(
    bare_shell: Shell, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bare_shell.line("provider test --model tiny-1")
    bare_shell.run(AGENTS)
    bare_shell.run('%%openprogram\ntriage("one")')
    saved = bare_shell.magics.turns.kernel_meta.to_json()  # type: ignore[union-attr]
    assert (saved["provider"], saved["model"]) == ("test", "tiny-1")
    assert bare_shell.bundles()[-1][MIME_TYPE]["provider"] == "test"
    assert set(saved) <= {"session_id", "version", "last_turn_id", "remote", "provider", "model"}
    # a restart: a fresh magics object, the environment without a provider, the frontend
    # handing the saved metadata over
    monkeypatch.delenv("OPENPROGRAM_PROVIDER", raising=False)
    monkeypatch.delenv("OPENPROGRAM_MODEL", raising=False)
    magics = bare_shell.magics
    magics.provider, magics.model, magics.turns.kernel_meta = "", "", None
    use_runtime(None, bare_shell.ip)
    magics.turns.chosen = None  # a fresh kernel has chosen nothing
    bridge.receive_frontend_state(state_payload(saved, "work/a.ipynb"))
    capsys.readouterr()
    info = bare_shell.line("status")
    assert (info["provider"], info["model"]) == ("test", "tiny-1")
    assert "provider test (model tiny-1) from this notebook's metadata" in capsys.readouterr().out
    bare_shell.run('%%openprogram\nagain = triage("two")')
    assert bare_shell.ip.user_ns["again"] == "bug"


@pytest.mark.parametrize(
    ("provider", "model", "kept"),
    [
        ("openai", "gpt-4o-mini", ("openai", "gpt-4o-mini")),
        ("sk-live key", "m", (None, None)),  # not a provider name: ignored, nothing kept
        ("openai", "a model\nwith lines", ("openai", None)),
        (3, None, (None, None)),
    ],
)
def test_a_recorded_provider_is_checked_not_trusted(
    provider: object, model: object, kept: tuple[str | None, str | None]
) -> None:
    meta = parse_metadata({"session_id": "nb_x", "provider": provider, "model": model})
    assert meta is not None and (meta.provider, meta.model) == kept


def test_a_provider_without_a_model_is_recorded_alone() -> None:
    assert NotebookMeta("nb_x", provider="test").to_json() == {
        "session_id": "nb_x",
        "version": 1,
        "provider": "test",
    }


@pytest.mark.kernel
@pytest.mark.timeout(240)
def test_provider_and_model_survive_a_kernel_restart_headless(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    path = tmp_path / "nb.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext openprogram_magics"),
        nbformat.v4.new_code_cell("%openprogram provider test --model tiny-1"),
        nbformat.v4.new_code_cell(AGENTS),
        nbformat.v4.new_code_cell('%%openprogram\ntriage("one")'),
    ]
    nbformat.write(nb, path)
    first = run_notebook(path)
    assert first.error is None
    saved = nbformat.read(path, as_version=4)
    assert saved.metadata["openprogram"]["provider"] == "test"
    del saved.cells[1]  # another kernel, another machine: nobody chooses the provider
    saved.cells.append(nbformat.v4.new_code_cell("x = %openprogram status\nx['model']"))
    nbformat.write(saved, path)
    second = run_notebook(path)
    assert second.error is None and second.session_id == first.session_id
    out = nbformat.read(path, as_version=4)
    assert "tiny-1" in str(out.cells[-1].outputs)
