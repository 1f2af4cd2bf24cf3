"""Settings are one value (``openprogram.settings``): read from the environment in one
place, changed by passing a new value down, never by writing ``os.environ``."""

from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path

import pytest

from openprogram import settings
from openprogram.cli import main as cli_main
from openprogram.settings import Replay, Settings
from openprogram.store.session.store import SessionStore, default_db
from openprogram.usage.budget import budget_from

REPO = Path(__file__).resolve().parents[1]
PACKAGES = (REPO / "openprogram", REPO / "openprogram_magics")
ENV_WRITES = {"update", "setdefault", "pop", "popitem", "clear", "putenv", "unsetenv"}


def _is_environ(node: ast.AST) -> bool:
    return ast.unparse(node) == "os.environ"


def environment_writes(tree: ast.Module) -> list[int]:
    """Lines that change the process environment."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            if any(isinstance(t, ast.Subscript) and _is_environ(t.value) for t in targets):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, name = node.func.value, node.func.attr
            if (_is_environ(owner) and name in ENV_WRITES) or (
                ast.unparse(owner) == "os" and name in ("putenv", "unsetenv")
            ):
                lines.append(node.lineno)
    return lines


def own_variable_reads(tree: ast.Module) -> list[int]:
    """Lines that read an ``OPENPROGRAM_*`` variable from the environment directly."""
    constants = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
        for t in n.targets
        if isinstance(t, ast.Name) and isinstance(n.value.value, str)
    }

    def own(key: ast.AST) -> bool:
        value = key.value if isinstance(key, ast.Constant) else None
        if isinstance(key, ast.Name):
            value = constants.get(key.id)
        return isinstance(value, str) and value.startswith("OPENPROGRAM_")

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environ(node.value) and own(node.slice):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and node.args and own(node.args[0]):
            func = ast.unparse(node.func)
            if func in ("os.environ.get", "os.getenv"):
                lines.append(node.lineno)
    return lines


def sources() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for pkg in PACKAGES for p in pkg.rglob("*.py")]


def test_nothing_in_the_package_writes_the_process_environment() -> None:
    found = {
        str(p.relative_to(REPO)): lines
        for p, tree in sources()
        if (lines := environment_writes(tree))
    }
    assert found == {}


def test_openprogram_variables_are_read_in_the_settings_module_only() -> None:
    found = {
        str(p.relative_to(REPO)): lines
        for p, tree in sources()
        if p.name != "settings.py" and (lines := own_variable_reads(tree))
    }
    assert found == {}


def test_a_settings_value_passed_to_a_child_comes_back_the_same() -> None:
    chosen = Settings(
        home=Path("/data/op"),
        replay=Replay("s_rec", misses=True, stale=True),
        session="s_script",
        budget_tokens="5000",
        requests_per_minute="30",
        max_tokens="256",
        traceback=True,
        model="smol",
        allow_model_requests=False,
        saved_timings=True,
    )
    env = chosen.environ({"PATH": "/bin", "OPENPROGRAM_REPLAY_STALE": "1", "OPENAI_API_KEY": "k"})
    assert env["PATH"] == "/bin" and env["OPENAI_API_KEY"] == "k"  # the rest is passed on
    assert Settings.from_environ(env) == chosen
    plain = Settings(home=Path("/data/op")).environ({"OPENPROGRAM_REPLAY": "s_old"})
    assert "OPENPROGRAM_REPLAY" not in plain  # a child never inherits a replay it was not given


def test_using_moves_the_store_and_budget_for_the_block_only(op_home: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    with settings.using(home=other, budget_tokens="1200"):
        store = SessionStore()
        try:
            assert store.root == other.resolve() / "sessions"
        finally:
            store.close()
        assert default_db().root == other.resolve() / "sessions"
        budget = budget_from()
        assert budget is not None and budget.tokens == 1200
    assert default_db().root == op_home.resolve() / "sessions"
    assert budget_from() is None
    assert os.environ["OPENPROGRAM_HOME"] == str(op_home)


@pytest.mark.kernel
@pytest.mark.timeout(180)
def test_run_with_home_tells_the_kernel_without_changing_this_process(
    op_home: Path, tmp_path: Path
) -> None:
    notebook = tmp_path / "work" / "quickstart.ipynb"
    notebook.parent.mkdir()
    shutil.copy(REPO / "notebooks" / "quickstart.ipynb", notebook)
    elsewhere = tmp_path / "elsewhere"
    assert cli_main(["--home", str(elsewhere), "run", str(notebook), "--timeout", "120"]) == 0
    sid = json.loads(notebook.read_text())["metadata"]["openprogram"]["session_id"]
    assert (elsewhere / "sessions" / sid / ".git").is_dir()  # the kernel wrote there
    assert not (op_home / "sessions" / sid).exists()
    assert os.environ["OPENPROGRAM_HOME"] == str(op_home)  # this process was not changed


def test_nothing_keeps_its_state_on_the_host_shell() -> None:
    """The extension's state lives in its own objects: no private attribute is set on, or
    read off, IPython's shell (another extension, or IPython's next release, owns it)."""
    found = {}
    for path, tree in sources():
        lines = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr.startswith("_openprogram")
            and "shell" in ast.unparse(node.value)
        ]
        lines += [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and "shell" in ast.unparse(node.args[0])
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("_")
        ]
        if lines:
            found[str(path.relative_to(REPO))] = lines
    assert found == {}
