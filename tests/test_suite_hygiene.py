"""The suite waits on events, never on a clock (issue 37 item 7, decision 0043): no test
asserts how long something took, and no ``sleep`` stands in for an event.

Read from the tests' source (code and the scripts they hand a kernel or a child process):

- an ``assert`` that reads a clock (``time.time``, ``monotonic``, ``perf_counter``), or a
  name a clock was read into (``started = time.monotonic()``), is a wall-clock assertion;
- a ``sleep`` with a non-zero argument is allowed only where :data:`SLEEPS_THAT_ARE_BEHAVIOUR`
  says why the sleep *is* what the test exercises (a slow server, a slow model, a body that
  runs until it is stopped), as many as it lists.  A wait for a state another thread or
  process reaches goes through ``tests/waiting.py`` (``until``).

:data:`PENDING` names the sleeps left where the clock is the store's.  The store's
tests (:data:`STORE_TESTS`, ``test_store*``, ``test_sync*``) are left to the store's
redesign: the store reads the clock itself (``updated_at``, maintenance spacing), and they
are not scanned here.

Every module of the package has a test file a newcomer finds by name (issue 37 item 7):
see :func:`test_every_module_has_a_test_file_named_after_it_or_its_package`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGES = ("openprogram", "openprogram_magics")
CLOCKS = frozenset({"time", "monotonic", "perf_counter", "monotonic_ns", "perf_counter_ns"})
SLEEP_IN_TEXT = re.compile(r"\bsleep\(\s*(?!0\s*\))[^)\s]")  # sleep(x), x not a literal 0

#: file -> (how many sleeps, why each is the behaviour under test)
SLEEPS_THAT_ARE_BEHAVIOUR: dict[str, tuple[int, str]] = {
    "waiting.py": (1, "the pause between two looks of until(): the one waiting helper"),
    "wire_server.py": (1, "a reply's pace: a model generating at a given rate"),
    "test_literature.py": (1, "a slow loopback server body: the tools' deadline is under test"),
    "test_kernel_turns.py": (
        2,
        "a slow model (Ctrl-C lands mid-call); items after the 5th "
        "answer once the map has taken the stop",
    ),
    "test_background.py": (1, "a slow model: the kernel is killed while a run is under way"),
    "test_scale_dask.py": (1, "a slow model: workers are killed while items are under way"),
    "test_runtime_blocks.py": (1, "a body that runs until it is stopped (it ignores Ctrl-C)"),
    "test_process_runner.py": (2, "a tool body that works for a while or until told to finish"),
    "test_function.py": (2, "a body cancelled while it sleeps; a child killed mid-call"),
    "test_double_interrupt.py": (3, "Ctrl-C at random moments of a child's turns"),
    "browser/test_background_browser.py": (1, "a slow model: the stop lands while steps run"),
    "browser/test_dag_widget_browser.py": (1, "a pause between two calls of a running cell"),
    "test_budget.py": (1, "a slow model: the calls of one map are in flight together"),
    "test_secret_outputs.py": (1, "a streaming loop's pace: each printed piece its own message"),
}
#: sleeps that stand in for a clock the package does not let a test set yet, and whose
#: owner is named: file -> (how many, why)
PENDING: dict[str, tuple[int, str]] = {
    "test_cli.py": (
        1,
        "two sessions' updated_at must differ: the store stamps it with "
        "time.time() (openprogram/store, being redesigned: a clock to inject there)",
    ),
}
HERE = Path(__file__).name
STORE_TESTS = frozenset({"test_store.py", "test_store_crash.py", "test_history.py"})


def scanned_files() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(TESTS.rglob("*.py")):
        name = path.relative_to(TESTS).as_posix()
        if name.startswith(("test_store", "test_sync")) or name in STORE_TESTS or name == HERE:
            continue
        yield name, ast.parse(path.read_text(encoding="utf-8"))


def _is_clock(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCKS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "time"
    )


def _is_time(node: ast.AST) -> bool:
    """A clock's reading, or one moved by a number (``time.monotonic() + 60``)."""
    if isinstance(node, ast.BinOp):
        return _is_time(node.left) or _is_time(node.right)
    return _is_clock(node)


def _reads_clock(node: ast.AST, clocked: set[str]) -> bool:
    return any(
        _is_clock(n) or (isinstance(n, ast.Name) and n.id in clocked) for n in ast.walk(node)
    )


def clock_assertions(tree: ast.Module) -> list[int]:
    """Lines of the asserts that read a clock, or a name a clock was read into."""
    clocked = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and _is_time(node.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert) and _reads_clock(node.test, clocked)
    ]


def sleeps(tree: ast.Module) -> list[int]:
    """Lines of the sleeps with a non-zero argument, in code or in a script's text."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            zero = (
                bool(node.args)
                and isinstance(node.args[0], ast.Constant)
                and not node.args[0].value
            )
            if name == "sleep" and not zero:
                found.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [node.lineno] * len(SLEEP_IN_TEXT.findall(node.value))
    return sorted(found)


def test_no_test_asserts_how_long_something_took() -> None:
    found = {name: lines for name, tree in scanned_files() if (lines := clock_assertions(tree))}
    assert found == {}, "wait on the event itself, or inject a clock (decision 0043)"


def test_every_sleep_is_behaviour_under_test_and_says_why() -> None:
    counted = {name: len(lines) for name, tree in scanned_files() if (lines := sleeps(tree))}
    listed = {**SLEEPS_THAT_ARE_BEHAVIOUR, **PENDING}
    allowed = {name: n for name, (n, _) in listed.items() if n}
    assert counted == allowed, (
        "a sleep standing in for an event: wait on the event (tests/waiting.py until() for a "
        "state another thread reaches), or say in SLEEPS_THAT_ARE_BEHAVIOUR why it is the "
        "behaviour under test"
    )


def test_the_scan_sees_a_clock_assertion_and_a_sleep() -> None:
    tree = ast.parse(
        "import time\n"
        "async def test_x():\n"
        "    started = time.monotonic()\n"
        "    time.sleep(0.4)\n"
        "    assert time.monotonic() - started < 2\n"
        "    assert time.perf_counter() < 9\n"
        "    await asyncio.sleep(0)\n"
        "CHILD = 'import time\\ntime.sleep(60)\\n'\n"
    )
    assert clock_assertions(tree) == [5, 6]
    assert sleeps(tree) == [4, 8]


#: modules still without a test file named after them or their package: module -> why
MODULES_WITHOUT_A_TEST_FILE: dict[str, str] = {}


def covering_names(module: Path, root: Path) -> list[str]:
    """The names a test file may carry to cover ``module`` (a ``.py`` under ``root``): its
    own name (``import_.py`` -> ``import``) and those of its enclosing packages below the
    root; an ``__init__.py`` is its package, the root's own ``__init__.py`` the root."""
    parts = [part.removesuffix(".py").rstrip("_") for part in module.relative_to(root).parts]
    if parts[-1] == "__init":  # "__init__" with its trailing underscores dropped
        parts.pop()
    return parts or [root.name]


def only_a_docstring(module: Path) -> bool:
    """An ``__init__.py`` with no statement but its docstring: nothing to test."""
    body = ast.parse(module.read_text(encoding="utf-8")).body
    return module.name == "__init__.py" and all(
        isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body
    )


def names_file(stem: str, name: str) -> bool:
    return stem == f"test_{name}" or stem.startswith(f"test_{name}_")


def modules_without_a_test_file(roots: list[Path], test_files: list[str]) -> list[str]:
    stems = [name.removesuffix(".py") for name in test_files]

    def covers(stem: str, name: str) -> bool:  # test_openprogram_magics* is not openprogram's
        longer = [r.name for r in roots if len(r.name) > len(name) and names_file(stem, r.name)]
        return names_file(stem, name) and not longer

    return [
        module.relative_to(root.parent).as_posix()
        for root in roots
        for module in sorted(root.rglob("*.py"))
        if not only_a_docstring(module)
        and not any(covers(stem, name) for name in covering_names(module, root) for stem in stems)
    ]


def test_every_module_has_a_test_file_named_after_it_or_its_package() -> None:
    """Every ``.py`` of ``openprogram/`` and ``openprogram_magics/`` has a test file directly
    in ``tests/`` named ``test_<name>.py`` or ``test_<name>_<anything>.py``, where ``<name>``
    is the module's name (a trailing ``_`` dropped: ``commands/import_.py`` is ``import``) or
    the name of one of its enclosing packages below the root: ``openprogram_magics/commands/
    push.py`` is covered by ``test_push.py``, ``test_push_*.py``, ``test_commands.py`` or
    ``test_commands_*.py``.  An ``__init__.py`` is its package (``view/__init__.py`` is
    ``view``); the root's own is the root (``test_openprogram.py``; ``test_openprogram_magics
    *.py`` names the other root, not this one), and an ``__init__.py`` holding nothing but its
    docstring has nothing to test.  ``test_run.py`` covers ``run.py``, ``test_runtime.py``
    does not: the name ends at ``.py`` or at an ``_``."""
    roots = [TESTS.parent / package for package in PACKAGES]
    test_files = [path.name for path in TESTS.glob("test_*.py")]
    lacking = modules_without_a_test_file(roots, test_files)
    missing = sorted(set(lacking) - set(MODULES_WITHOUT_A_TEST_FILE))
    assert not missing, "no tests/test_<module or package>*.py for:\n" + "\n".join(missing)
    covered = sorted(set(MODULES_WITHOUT_A_TEST_FILE) - set(lacking))
    assert not covered, "a test file now, out of MODULES_WITHOUT_A_TEST_FILE:\n" + "\n".join(
        covered
    )


def test_a_module_is_covered_by_its_own_name_or_a_package_name_ending_at_an_underscore(
    tmp_path: Path,
) -> None:
    root, other = tmp_path / "pkg", tmp_path / "pkg_ext"
    for name in ("__init__.py", "run.py", "cmds/__init__.py", "cmds/import_.py", "cmds/push.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("VALUE = 1\n")
    (root / "docs").mkdir()
    (root / "docs" / "__init__.py").write_text('"""Nothing but a docstring."""\n')
    other.mkdir()
    (other / "__init__.py").write_text("VALUE = 2\n")
    assert modules_without_a_test_file([root, other], ["test_runtime.py", "test_pkg_ext.py"]) == [
        "pkg/__init__.py",
        "pkg/cmds/__init__.py",
        "pkg/cmds/import_.py",
        "pkg/cmds/push.py",
        "pkg/run.py",
    ]
    assert modules_without_a_test_file(
        [root], ["test_pkg.py", "test_run_slow.py", "test_import.py", "test_push.py"]
    ) == ["pkg/cmds/__init__.py"]
    assert (
        modules_without_a_test_file([root], ["test_pkg.py", "test_run.py", "test_cmds_x.py"]) == []
    )
