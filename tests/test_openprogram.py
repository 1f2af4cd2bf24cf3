"""The package's front door (``openprogram/__init__.py``): ``import openprogram`` is cheap
(the agentic layer and the providers load at first use of a public name), every public name
resolves, ``from openprogram import *`` leaves the builtin ``map`` alone, and a turn entered
without a runtime gets the environment's — the one place the layers are wired."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import openprogram

PROBE = """
import sys
import openprogram
heavy = ("openprogram.agentic_programming", "openprogram.providers", "openprogram.agent")
print(sorted(m for m in heavy if m in sys.modules))
with openprogram.session_context("nb_front_door") as handle:
    print(openprogram.llm("hello"))
print(sorted(m for m in heavy if m in sys.modules))
"""


def test_the_import_is_cheap_and_a_turn_without_a_runtime_gets_the_environments(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENPROGRAM_")}
    env.update(OPENPROGRAM_HOME=str(tmp_path / "home"), OPENPROGRAM_PROVIDER="test")
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    before, reply, after = done.stdout.splitlines()
    assert before == "[]"
    assert reply == "[test reply] hello"
    assert "openprogram.agentic_programming" in after and "openprogram.providers" in after
    assert (tmp_path / "home" / "sessions" / "nb_front_door").is_dir()


def test_every_public_name_resolves_and_star_leaves_map_alone() -> None:
    for name in openprogram.__all__:
        assert getattr(openprogram, name) is not None, name
    assert openprogram.map.__module__ == "openprogram.scale.run"
    namespace: dict[str, object] = {}
    exec("from openprogram import *", namespace)
    assert "map" not in namespace and "agentic_function" in namespace
    with pytest.raises(AttributeError, match="no attribute 'agentic_fucntion'"):
        _ = openprogram.agentic_fucntion  # a typo: one line saying so
