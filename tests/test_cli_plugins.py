"""Commands other packages add to ``openprogram`` (:mod:`openprogram.cli_plugins`): the
notebook extension's ``run`` and git commands come through the entry point group, a plugin
registered in-process is offered and told before a command runs, and a plugin that cannot
load costs one line, not the engine's commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openprogram import cli, cli_plugins


class Greeter:
    """A plugin with one command, ``hello NAME``, that remembers what it was told."""

    def __init__(self) -> None:
        self.told: list[tuple[str | None, list[str]]] = []
        self.greeted: list[str] = []

    def add_parsers(self, sub: Any) -> None:
        p = sub.add_parser("hello", help="greet NAME")
        p.add_argument("name")
        p.set_defaults(handler=self.hello)

    def before_command(self, command: str | None, argv: list[str]) -> None:
        self.told.append((command, argv))

    def hello(self, args: argparse.Namespace) -> int:
        self.greeted.append(args.name)
        return 0


@pytest.fixture
def greeter() -> Iterator[Greeter]:
    plugin = Greeter()
    cli_plugins.register(plugin)
    try:
        yield plugin
    finally:
        cli_plugins.unregister(plugin)


def test_the_notebook_commands_come_through_the_entry_point_group() -> None:
    import openprogram_magics.cli as notebook_cli

    assert notebook_cli in cli_plugins.plugins()
    commands = cli.build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"run", "git-setup", "git-merge-notebook", "sessions", "chat"} <= set(commands)


def test_a_registered_plugin_adds_a_command_and_hears_of_every_command(
    greeter: Greeter, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["hello", "ada"]) == 0
    assert greeter.greeted == ["ada"]
    assert cli.main(["sessions", "list"]) == 0
    assert greeter.told == [("hello", ["hello", "ada"]), ("sessions", ["sessions", "list"])]
    assert "hello" in cli.build_parser().format_help()


def test_a_plugin_that_cannot_load_is_one_line_and_the_rest_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    info = tmp_path / "broken_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[openprogram.cli]\nbroken = no_such_module_here\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    assert cli.main(["sessions", "list"]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "broken" in line]
    assert len(said) == 1 and "plugin broken (no_such_module_here) not loaded" in said[0]
