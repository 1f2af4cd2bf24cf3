"""A line command's value is not shown again under what it printed (``quiet``):
``x = %openprogram status`` keeps an equal value, and as a cell's last line it adds no
``Out[n]``; anything else is left as it is."""

from __future__ import annotations

import pytest

from openprogram_magics.quiet import quiet
from tests.test_magics import Shell


@pytest.mark.parametrize("value", [{"session_id": "nb_1"}, ["nb_1", "nb_2"], "nb_1"])
def test_a_quiet_value_is_equal_and_displays_nothing(
    bare_shell: Shell, value: object, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = quiet(value)
    assert kept == value and isinstance(kept, type(value))
    bare_shell.ip.user_ns["kept"] = kept
    capsys.readouterr()
    bare_shell.run("kept")
    assert "nb_1" not in capsys.readouterr().out and bare_shell.display.outputs == []
    bare_shell.ip.user_ns["plain"] = value
    bare_shell.run("plain")
    assert "nb_1" in capsys.readouterr().out  # the same value, not quiet: shown as Out


def test_other_values_are_left_as_they_are() -> None:
    marker = object()
    assert quiet(marker) is marker and quiet(None) is None and quiet(3) == 3
