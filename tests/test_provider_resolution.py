"""One order for provider, model and base URL (issue 21 item 1):
call > function > cell > notebook > %config > environment > default.

The pure resolution first, then a real IPython shell: ``%openprogram provider openai``
without ``--model`` keeps ``OPENPROGRAM_MODEL``, overrides are said once, and
``%openprogram status`` names the layer of each setting.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell
from test_turn_state import Settings
from traitlets.config import Config

import openprogram_magics.bridge as bridge
from openprogram.providers import create_runtime, resolve_settings
from openprogram.providers.resolution import LAYERS, Layer, resolve
from openprogram_magics.cellturn import NotebookTurns
from openprogram_magics.notebook import NotebookMeta
from tests.test_magics import Shell

LOCAL = "http://127.0.0.1:9/v1"  # never contacted: building a runtime makes no request
ENV = {
    "OPENPROGRAM_PROVIDER": "openai",
    "OPENPROGRAM_MODEL": "smollm2",
    "OPENAI_BASE_URL": LOCAL,
    "OPENAI_API_KEY": "sk-never-shown-1234",
}
ABOVE_ENV = [name for name in LAYERS if name not in ("environment", "default")]


# -- the pure order ----------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["provider", "model", "base_url"])
def test_each_layer_wins_over_every_layer_below_it(field: str) -> None:
    for i, high in enumerate(ABOVE_ENV):
        for low in ABOVE_ENV[i + 1 :]:
            layers = [
                Layer(low, **{field: f"{low}-value"}),
                Layer(high, **{field: f"{high}-value"}),
            ]
            got = getattr(resolve(layers, ENV), field)
            assert (got.value, got.layer) == (f"{high}-value", high)
        got = getattr(resolve([Layer(high, **{field: "x"})], ENV), field)
        assert (got.value, got.layer) == ("x", high)  # above the environment


def test_the_environment_wins_over_the_default_and_the_default_comes_last() -> None:
    env = resolve([], ENV)
    assert env.lines() == [
        "provider: openai (environment OPENPROGRAM_PROVIDER)",
        "model: smollm2 (environment OPENPROGRAM_MODEL)",
        f"base URL: {LOCAL} (environment OPENAI_BASE_URL)",
    ]
    assert env.notes == ()
    bare = resolve([Layer("config", "anthropic")], {})
    assert bare.model.line("model") == "model: claude-sonnet-4-6 (default)"
    assert bare.base_url.line("base URL") == "base URL: https://api.anthropic.com (default)"
    assert resolve([], {}).provider.line("provider") == "provider: none (default)"
    assert resolve([], {"OPENAI_BASE_URL": LOCAL}).provider.source == (
        "environment (OPENAI_BASE_URL is set)"
    )


def test_each_setting_comes_from_its_own_highest_layer_and_the_mix_is_said() -> None:
    got = resolve([Layer("notebook", "openai")], ENV)
    assert got.model.line("model") == "model: smollm2 (environment OPENPROGRAM_MODEL)"
    assert got.notes == (
        "provider openai (this notebook) with model smollm2 (environment OPENPROGRAM_MODEL)",
    )
    over = resolve([Layer("notebook", "test")], ENV)
    assert over.notes[0] == (
        "provider test (this notebook) overrides openai (environment OPENPROGRAM_PROVIDER)"
    )
    assert over.base_url.value is None  # the test provider has none; OPENAI_BASE_URL is openai's
    config = resolve([Layer("notebook", "test"), Layer("config", "openai")], {})
    assert config.notes == ("provider test (this notebook) overrides openai (%config)",)


def test_a_vendor_default_model_sent_to_a_custom_base_url_is_said() -> None:
    got = resolve([Layer("notebook", "openai")], {"OPENAI_BASE_URL": LOCAL})
    assert got.model.line("model") == "model: gpt-4o-mini (default)"
    assert got.notes[-1].startswith(f"model gpt-4o-mini is openai's default, sent to {LOCAL}")
    assert resolve([Layer("notebook", "openai")], {}).notes == ()  # the vendor's own endpoint


def test_nothing_of_a_key_is_kept() -> None:
    got = resolve([Layer("call", "openai")], ENV)
    assert "sk-never" not in repr(got)


def test_an_unknown_layer_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown layer 'kernel'"):
        Layer("kernel")
    with pytest.raises(ValueError, match="come from environ"):
        resolve([Layer("environment", "openai")], {})


def test_create_runtime_uses_the_order(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    rt = create_runtime(layers=[Layer("notebook", "openai")])
    assert rt.provider is not None and rt.provider.name == "openai"
    assert rt.model == rt.provider.model == "smollm2"
    assert create_runtime("test").provider.name == "test"  # type: ignore[union-attr]
    layered = create_runtime(layers=[Layer("cell", "openai", "m-cell", "http://127.0.0.1:8/v1")])
    assert layered.model == "m-cell"
    assert layered.provider.base_url == "http://127.0.0.1:8/v1"  # type: ignore[union-attr]
    assert resolve_settings("test", None, environ={}).provider.layer == "call"


# -- the notebook ----------------------------------------------------------------------------
Unset = Settings  # the traitlets' defaults, as test_turn_state has them


def test_the_notebooks_metadata_overriding_the_environment_is_said_once(
    op_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENPROGRAM_PROVIDER", "openai")
    turns = NotebookTurns(Unset())
    turns.kernel_meta = NotebookMeta("nb_meta", provider="test")
    assert turns.runtime().provider.name == "test"  # type: ignore[union-attr]
    turns.runtime()
    turns.runtime_key()
    out = capsys.readouterr().out
    line = "provider test (this notebook) overrides openai (environment OPENPROGRAM_PROVIDER)"
    assert out.count(line) == 1 and "from this notebook's metadata" in out


@pytest.fixture
def env_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op_home: Path) -> Iterator[Shell]:
    """A real shell, the extension loaded, no provider chosen; the environment names a
    local OpenAI-compatible server and its model."""
    monkeypatch.setattr(bridge, "_state", None)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    InteractiveShell.clear_instance()
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.ipython_dir = str(tmp_path / "ipython")
    config.InteractiveShell.colors = "nocolor"  # IPython 9: lowercase (8: any case)
    ip = InteractiveShell.instance(config=config)
    ip.run_line_magic("load_ext", "openprogram_magics")
    try:
        yield Shell(ip)
    finally:
        InteractiveShell.clear_instance()


def test_provider_openai_without_a_model_keeps_the_environments_model(
    env_shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    env_shell.line("provider openai")
    rt = env_shell.magics.runtime()
    assert rt.model == "smollm2" and rt.provider.model == "smollm2"  # type: ignore[union-attr]
    env_shell.line("status")
    env_shell.line("status")
    out = capsys.readouterr().out
    assert "  provider: openai (this notebook)" in out
    assert "     model: smollm2 (environment OPENPROGRAM_MODEL)" in out
    assert f"  base URL: {LOCAL} (environment OPENAI_BASE_URL)" in out
    note = "provider openai (this notebook) with model smollm2 (environment OPENPROGRAM_MODEL)"
    assert out.count(note) == 1
    assert "sk-never" not in out


def test_status_names_each_layer_and_a_higher_layer_wins(
    env_shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    env_shell.line("status")
    out = capsys.readouterr().out
    assert "  provider: openai (environment OPENPROGRAM_PROVIDER)" in out
    env_shell.run('%config OpenProgramMagics.model = "m-config"')
    env_shell.line("status")
    assert "     model: m-config (%config)" in capsys.readouterr().out
    env_shell.line("provider test --model m-notebook")
    env_shell.line("status")
    out = capsys.readouterr().out
    assert (
        "  provider: test (this notebook)" in out
        and "     model: m-notebook (this notebook)" in out
    )
    line = "provider test (this notebook) overrides openai (environment OPENPROGRAM_PROVIDER)"
    assert out.count(line) == 1
    env_shell.run('%%openprogram\nreply = "done"')
    saved = env_shell.magics.turns.kernel_meta.to_json()  # type: ignore[union-attr]
    assert (saved["provider"], saved["model"]) == ("test", "m-notebook")
    assert "sk-never" not in str(saved)
