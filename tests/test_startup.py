"""``import openprogram`` and ``openprogram --version`` load nothing they do not need: no
provider SDK, no git, no validation library, no IPython — checked in a fresh interpreter
through ``sys.modules`` (how long they take is ``benchmarks/bench_startup.py``'s figure)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HEAVY = (
    "anthropic",
    "genai_prices",
    "git",
    "gitdb",
    "httpx",
    "IPython",
    "ipywidgets",
    "jsonschema",
    "jupyter_client",
    "nbformat",
    "numpy",
    "openai",
    "orjson",
    "pydantic",
    "zmq",
)

PROBE = """
import sys
{code}
print(sorted(m for m in {heavy!r} if m in sys.modules))
"""


def loaded_after(code: str) -> tuple[list[str], str]:
    """The heavy modules a fresh interpreter holds after ``code``, and what it printed."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(code=code, heavy=HEAVY)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        check=True,
    )
    *printed, heavy = done.stdout.strip().splitlines()
    return ast.literal_eval(heavy), "\n".join(printed)


def test_import_openprogram_pulls_in_no_heavy_module() -> None:
    heavy, _ = loaded_after("import openprogram")
    assert heavy == []


@pytest.mark.parametrize("name", ["agentic_function", "session_context", "__version__"])
def test_a_public_name_is_still_there_when_first_used(name: str) -> None:
    _, printed = loaded_after(f"import openprogram\nprint(openprogram.{name} is not None)")
    assert printed == "True"


def test_openprogram_version_pulls_in_no_heavy_module() -> None:
    code = (
        "from openprogram.cli import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
    )
    heavy, printed = loaded_after(code)
    assert printed.startswith("openprogram ") and heavy == []
