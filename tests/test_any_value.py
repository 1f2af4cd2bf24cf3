"""Any value a Python program can produce is recorded, and the next turn still works.

Lone surrogates (``os.listdir`` of a non-UTF-8 name), bytes, NaN and infinities, integers
beyond 64 bits, objects whose ``repr`` (or ``model_dump``, or ``__eq__``…) raises, recursive
containers, passed as arguments and returned, in notebook cells: each turn commits a
faithful escaped form, and the cell after it works.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_magics import Shell, make_shell, session_nodes

SETUP = '''
import math
from openprogram import agentic_function

@agentic_function
def echo(value, runtime=None):
    """Give the value back."""
    return value

class BadRepr:
    def __repr__(self):
        raise RuntimeError("no repr for you")

class BadEverything:
    def __getattr__(self, name):
        raise RuntimeError(f"no attribute {name}")
    def __repr__(self):
        raise ValueError("nope")
    def __eq__(self, other):
        raise TypeError("no comparing")
    __hash__ = None

loop = [1]
loop.append(loop)
cycle = {"a": 1}
cycle["self"] = cycle
deep = []
node = deep
for _ in range(5000):
    node.append([])
    node = node[0]
'''

VALUES = {
    "lone surrogate": '"caf\\udce9.txt"',
    "bytes": 'b"\\x00\\xff raw"',
    "nan and inf": "[math.nan, math.inf, -math.inf]",
    "huge int": "10**5000",
    "big int": "2**70",
    "repr raises": "BadRepr()",
    "everything raises": "BadEverything()",
    "recursive list": "loop",
    "recursive dict": "cycle",
    "deep nesting": "deep",
    "surrogate key": '{"\\udc80key": "\\ud800"}',
    "tuple key": "{(1, 2): 3}",
}


@pytest.fixture
def shell(ipython_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Shell]:
    from IPython.core.interactiveshell import InteractiveShell

    import openprogram_magics.bridge as bridge

    monkeypatch.setattr(bridge, "_state", None)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    sh = make_shell(ipython_dir)
    sh.run(SETUP)
    try:
        yield sh
    finally:
        InteractiveShell.clear_instance()


@pytest.fixture(scope="module")
def ipython_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ipython")


def outputs(sid: str, name: str) -> list[Any]:
    return [n.output for n in session_nodes(sid) if n.name == name]


@pytest.mark.parametrize("label", list(VALUES))
def test_a_strange_value_is_recorded_and_the_next_cell_works(shell: Shell, label: str) -> None:
    expr = VALUES[label]
    shell.run(f"%%openprogram\nresult = echo({expr})\nresult")
    shell.run('%%openprogram\nafter = echo("fine")')
    shell.run("%%openprogram\n" + expr)  # the cell's own value, shown and recorded
    shell.run('%%openprogram\nlast = echo("still fine")')
    sid = shell.magics.current_session_id()
    assert sid
    nodes = session_nodes(sid)
    turns = [n for n in nodes if n.kind == "turn"]
    assert len(turns) == 4 and all(n.status == "completed" for n in turns)
    echoes = [n for n in nodes if n.name == "echo"]
    assert [n.status for n in echoes] == ["completed"] * 3
    assert echoes[1].output == "fine" and echoes[2].output == "still fine"
    recorded = repr(echoes[0].input) + repr(echoes[0].output)
    if label == "lone surrogate":
        assert "caf\\udce9.txt" in echoes[0].output  # escaped, faithfully
    if label == "repr raises":
        assert "repr failed" in recorded
    if label == "huge int":
        assert "5001 digits" in recorded or "int" in recorded
