"""Command lines a newcomer types: ``sessions diff ID --lines A B`` as well as ``--lines ID A
B``, and ``run --record-misses`` without ``--replay`` refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from openprogram.cli import main
from tests.test_cli import make_session


def diff_output(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["sessions", "diff", *argv])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("mode", ["--lines", "--runs"])
def test_sessions_diff_takes_the_mode_flag_before_or_after_the_session(
    mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = make_session("twoturns", "Two turns", turns=2)
    if mode == "--runs":  # a session of no notebook: both forms must say the same
        first, second = "1", "2"
    before = diff_output(capsys, mode, "twoturns", first, second)
    after = diff_output(capsys, "twoturns", mode, first, second)
    split = diff_output(capsys, "twoturns", first, mode, second)
    assert after == before == split
    if mode == "--lines":
        assert before[0] == 0 and before[1].strip()


def test_sessions_diff_with_too_many_words_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    make_session("twoturns", "Two turns", turns=2)
    assert main(["sessions", "diff", "twoturns", "--lines", "1", "2", "3"]) == 2
    err = capsys.readouterr().err
    assert "one session and two turns" in err and err.count("\n") == 1


def test_record_misses_without_replay_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notebook = tmp_path / "nb.ipynb"
    notebook.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    assert main(["run", str(notebook), "--record-misses"]) == 2
    err = capsys.readouterr().err
    assert "--record-misses goes with --replay" in err and err.count("\n") == 1
