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
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
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
STORE_TESTS = frozenset(
    {"test_store.py", "test_store_crash.py", "test_materialise.py", "test_repository.py"}
)


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
