"""``%openprogram`` line commands as plain functions: parsed, helped and run without a shell."""

from __future__ import annotations

import sys
from argparse import Namespace
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from openprogram import create_runtime, session_context
from openprogram.agentic_programming.runtime import Runtime
from openprogram.providers.test import TestProvider
from openprogram_magics import commands
from openprogram_magics.commands import CommandError
from openprogram_magics.notebook import NotebookMeta
from openprogram_magics.sessions import session_log


@dataclass
class Host:
    """The state a command reads and changes, as the magics object holds it."""

    provider: str = "test"
    model: str = ""
    auto: bool = False
    meta: NotebookMeta | None = None
    rt: Runtime = field(default_factory=lambda: create_runtime(TestProvider()))

    def runtime(self) -> Runtime:
        return self.rt

    def current_meta(self) -> NotebookMeta | None:
        return self.meta

    def current_session_id(self) -> str | None:
        return self.meta.session_id if self.meta else None

    def set_session(self, meta: NotebookMeta) -> None:
        self.meta = meta


@pytest.fixture
def extra_command() -> Iterator[None]:
    @commands.command("greet", "say hello to NAME", commands.arg("name", metavar="NAME"))
    def greet(host: commands.Host, args: Namespace) -> str:
        return f"hello {args.name}"

    try:
        yield
    finally:
        del commands.COMMANDS["greet"]


def test_help_is_generated_from_the_parser() -> None:
    text = commands.help_text()
    for name, cmd in commands.COMMANDS.items():
        assert f"  {name}" in text and cmd.help in text
    assert "use ID" in text and "log [ID]" in text and "auto {on,off}" in text
    assert 'c.InteractiveShellApp.extensions = ["openprogram_magics"]' in text


def test_a_command_is_one_entry_and_one_function(extra_command: None) -> None:
    assert commands.run(Host(), "greet ada") == "hello ada"
    assert "greet NAME" in commands.help_text()
    with pytest.raises(CommandError, match="NAME"):
        commands.run(Host(), "greet")


def test_a_module_dropped_into_the_commands_package_is_a_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subcommand is one module of the package that registers itself: nothing else is
    edited, it is listed before ``help``, and ``run`` reaches it."""
    (tmp_path / "wave.py").write_text(
        "from openprogram_magics.commands import arg, command\n"
        "@command('wave', 'wave at someone', arg('name', metavar='NAME'))\n"
        "def wave(host, args):\n"
        "    return f'hi {args.name}'\n"
    )
    commands.load()
    monkeypatch.setattr(commands, "__path__", [*commands.__path__, str(tmp_path)])
    monkeypatch.setattr(commands, "_loaded", False)
    try:
        assert commands.run(Host(), "wave ada") == "hi ada"
        assert list(commands.COMMANDS)[-2:] == ["wave", "help"]
        assert "wave NAME" in commands.help_text()
    finally:
        commands.COMMANDS.pop("wave", None)
        sys.modules.pop("openprogram_magics.commands.wave", None)


def test_the_help_lists_the_commands_in_their_order(monkeypatch: pytest.MonkeyPatch) -> None:
    table = dict(commands.load())
    # a subcommand's module imported on its own first (for its helpers) registers first
    monkeypatch.setattr(commands, "COMMANDS", {"call": table.pop("call"), **table})
    monkeypatch.setattr(commands, "_loaded", False)
    names = list(commands.load())
    assert names[:4] == ["status", "new", "use", "list"] and names[-1] == "help"
    assert names.index("stop") < names.index("call") < names.index("stale")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("frobnicate", "unknown command 'frobnicate'"),
        ("use", "required: ID"),
        ("use a b", "unrecognized arguments: b"),
        ("dag --last x", "invalid int value: 'x'"),
        ("auto maybe", "invalid choice: 'maybe'"),
        ('use "unterminated', "cannot parse arguments"),
    ],
)
def test_mistakes_are_one_line_command_errors(line: str, says: str) -> None:
    with pytest.raises(CommandError, match=says) as info:
        commands.parse(line)
    assert "\n" not in str(info.value)


def test_empty_line_is_status(capsys: pytest.CaptureFixture[str]) -> None:
    info = commands.run(Host(), "")
    assert info == {"session_id": None, "provider": "test", "model": "test", "auto": False}
    assert "session_id: None" in capsys.readouterr().out


def test_new_use_status_and_log_without_a_shell(capsys: pytest.CaptureFixture[str]) -> None:
    host = Host()
    sid = commands.run(host, "new")
    assert host.current_session_id() == sid
    with session_context(sid, runtime=host.rt):
        pass
    info = commands.run(host, "status")
    assert info["session_id"] == sid and info["head"] is not None and "path" in info
    assert commands.run(host, "log") == session_log(sid)
    with pytest.raises(CommandError, match=r"no session 'other_1'.*new --id other_1"):
        commands.run(host, "use other_1")  # a typo does not start a new history
    assert host.current_session_id() == sid
    assert commands.run(host, "new --id other_1") == "other_1"  # on purpose
    assert commands.run(host, "status")["path"].endswith("(created at the first turn)")
    with pytest.raises(CommandError, match=f"session {sid} exists"):
        commands.run(host, f"new --id {sid}")
    with pytest.raises(CommandError, match=f"nearest: {sid}"):
        commands.run(host, f"use {sid[:-1]}z")
    commands.run(host, "auto on")
    assert host.auto is True
    with pytest.raises(CommandError, match="no session yet"):
        commands.run(Host(), "log")
