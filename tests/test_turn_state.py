"""The turn is one value (issue 20 items 1, 2): one frozen ``TurnState`` in one ContextVar,
the seed's names as views of it, one HEAD rule for both node writers, hosts that claim
calls through a public registry, and a notebook's turns as a plain object."""

from __future__ import annotations

import dataclasses
import gc
import os
import re
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pytest
from helpers import reopen

import openprogram.agentic_programming.function as fn_mod
from openprogram import agentic_function, create_runtime
from openprogram.context.nodes import make_call
from openprogram.hosts import (
    register_bare_call_host,
    register_default_runtime,
    unregister_bare_call_host,
    unregister_default_runtime,
)
from openprogram.providers.test import FunctionProvider
from openprogram.store.memory import MemoryRecorder
from openprogram.store.session.context import session_context
from openprogram.store.vars import TurnState, current, using
from openprogram_magics.cellturn import NotebookTurns
from openprogram_magics.notebook import NotebookMeta

ROOT = Path(__file__).resolve().parents[1]
OWNER = "openprogram/store/vars.py"
# Modules allowed to declare a ContextVar of their own, with why.  The echo and the stop
# flag moved into the turn state; what is left is not per-turn state.
EXCEPTIONS: dict[str, str] = {
    "openprogram/settings.py": "the settings in force (settings.using() scopes a change to a "
    "block or a thread's context); configuration read by turns, not a turn's state",
}


def test_contextvar_is_declared_only_by_the_owner_of_the_turn_state() -> None:
    declared = []
    for folder in ("openprogram", "openprogram_magics"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            count = len(re.findall(r"\bContextVar\(", path.read_text()))
            if count:
                declared.append((rel, count))
    allowed = {OWNER, *EXCEPTIONS}
    assert [rel for rel, _ in declared if rel not in allowed] == []
    assert (OWNER, 1) in declared  # exactly one: the turn state


def test_the_seeds_import_paths_are_views_of_the_one_state(rt: Any) -> None:
    from openprogram.agentic_programming.function import _call_id, _current_runtime
    from openprogram.store import _current_turn_id, _store
    from openprogram.store.session.context import session_context as seed_session_context

    assert seed_session_context is session_context
    assert (_store.get(), _current_turn_id.get(), _current_runtime.get(), _call_id.get()) == (
        None,
        None,
        None,
        None,
    )
    with session_context(runtime=rt, turn_id="turn_seed") as s:
        state = current()
        assert state.writer is s.writer and state.session_id == s.session_id
        assert (_store.get(), _current_turn_id.get(), _current_runtime.get()) == (
            s.writer,
            "turn_seed",
            rt,
        )
        # code written against the seed's ContextVars: set, then reset with the token
        token = _call_id.set("n_outer")
        assert current().call_id == "n_outer" and current().writer is s.writer
        _call_id.reset(token)
        assert _call_id.get() is None
    assert current() == TurnState()


def test_a_nested_call_is_a_replaced_state(rt: Any) -> None:
    seen: list[TurnState] = []

    @agentic_function
    def inner() -> str:
        seen.append(current())
        return "in"

    @agentic_function
    def outer() -> str:
        seen.append(current())
        return inner()

    with session_context(runtime=rt) as s:
        top = current()
        outer()
    outer_state, inner_state = seen
    nodes = {n.name: n for n in s.writer.session.nodes()}
    assert (outer_state.call_id, outer_state.depth) == (nodes["outer"].id, 1)
    assert (inner_state.call_id, inner_state.depth) == (nodes["inner"].id, 2)
    assert nodes["inner"].caller == nodes["outer"].id
    # everything else is the turn's, unchanged
    assert dataclasses.replace(inner_state, call_id=None, depth=0) == top
    with pytest.raises(dataclasses.FrozenInstanceError):
        top.call_id = "n_x"  # type: ignore[misc]
    with pytest.raises(TypeError), using(nope=1):
        pass


def test_both_writers_chain_after_head_by_one_rule_and_detect_a_fork(rt: Any) -> None:
    """A turn-level node given a predecessor other than HEAD branches there and says where
    HEAD was -- on disk and in a map worker's memory alike."""
    with session_context(runtime=rt) as s:
        first = s.writer.append(make_call("turn", "one"), turn_level=True)
        second = s.writer.append(make_call("turn", "two"), turn_level=True)
        fork = s.writer.append(make_call("turn", "three", predecessor=first.id), turn_level=True)
    assert second.predecessor == first.id and "forked_from_head" not in second.metadata
    assert fork.predecessor == first.id and fork.metadata["forked_from_head"] == second.id

    memory = MemoryRecorder("sess_x", 1, [first, second], head_id=second.id)
    follows = memory.append(make_call("turn", "four"), turn_level=True)
    branch = memory.append(make_call("turn", "five", predecessor=first.id), turn_level=True)
    assert follows.predecessor == second.id and "forked_from_head" not in follows.metadata
    assert branch.predecessor == first.id
    assert branch.metadata["forked_from_head"] == follows.id
    assert memory.head_id == branch.id


def test_a_registered_host_claims_a_bare_call_and_an_unregistered_one_does_not(
    rt: Any,
) -> None:
    claimed: list[str] = []

    class Host:
        def turn(self, label: str) -> AbstractContextManager[Any] | None:
            claimed.append(label)
            return session_context("host_session", runtime=rt, message=label)

    @agentic_function
    def work() -> str:
        return "done"

    host = Host()
    register_bare_call_host(host.turn)
    register_bare_call_host(host.turn)  # twice: asked once
    try:
        assert work() == "done"
    finally:
        unregister_bare_call_host(host.turn)
    assert len(claimed) == 1 and claimed[0].endswith("work")
    names = [n.name for n in reopen(Path(os.environ["OPENPROGRAM_HOME"]), "host_session")]
    assert "work" in names

    register_bare_call_host(Host().turn)  # its object is gone at once: never asked
    gc.collect()
    assert fn_mod.host_turn("work") is None
    assert len(claimed) == 1


def test_a_host_gives_the_runtime_of_a_turn_entered_without_one() -> None:
    runtime = create_runtime(FunctionProvider(lambda request: "from the host"), backoff=0.0)

    def source() -> Any:
        return runtime

    register_default_runtime(source)
    try:
        with session_context() as s:
            assert s.runtime is runtime and current().runtime is runtime
    finally:
        unregister_default_runtime(source)
    with session_context() as s:
        assert s.runtime is not runtime and not s.runtime.configured


# -- the notebook's turns, without a shell ------------------------------------------------------
class Settings:
    provider = ""
    model = ""
    live_dag = False
    stream = False
    budget_tokens = 0
    budget_usd = 0.0
    budget_per = "session"
    requests_per_minute = 0.0
    request_timeout = 0.0
    history_turns = 20
    history_tokens = 4000
    history_failed = False


def test_notebook_turns_resolve_adopt_the_provider_and_record_a_turn(
    op_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pushed: list[NotebookMeta] = []
    settings = Settings()
    turns = NotebookTurns(settings, dict, pushed.append)
    turns.kernel_meta = NotebookMeta("nb_plain", provider="test", model="tiny-1")

    turns.cell_started("x = triage('a')", 3)
    turn = turns.begin_turn(None, "x = triage('a')")
    assert "provider test (model tiny-1) from this notebook's metadata" in capsys.readouterr().out
    assert turns.chosen == ("test", "tiny-1") and settings.provider == ""  # not %config's
    state = current()
    assert state.call_id == turn.node.id  # type: ignore[union-attr]
    assert state.runtime is turns.runtime() and state.runtime.provider.name == "test"

    @agentic_function
    def triage(ticket: str, runtime: Any = None) -> str:
        """Classify."""
        return str(runtime.exec(ticket, choices=["bug", "feature"]))

    assert triage("a") == "bug"
    turns.cell_ended(None, None)
    assert current() == TurnState()
    assert pushed and pushed[-1].session_id == "nb_plain"
    assert (pushed[-1].provider, pushed[-1].model) == ("test", "tiny-1")
    nodes = reopen(op_home, "nb_plain")
    top = next(n for n in nodes if n.kind == "turn")
    assert top.name == "cell [3]" and top.id == pushed[-1].last_turn_id
    assert [n.name for n in nodes if n.caller == top.id] == ["triage"]
    assert "OPENPROGRAM_PROVIDER" not in os.environ  # the choice travelled as a value


def test_notebook_turns_claim_a_bare_call_only_in_a_cell_on_the_main_thread(
    op_home: Path,
) -> None:
    settings = Settings()
    settings.provider = "test"
    turns = NotebookTurns(settings)
    turns.kernel_meta = NotebookMeta("nb_bare")
    assert turns.bare_call_turn("f") is None  # between cells
    turns.cell_started("f()", 1)
    off_thread: list[Any] = []
    worker = threading.Thread(target=lambda: off_thread.append(turns.bare_call_turn("f")))
    worker.start()
    worker.join()
    assert off_thread == [None]
    scope = turns.bare_call_turn("f")  # begins the cell's turn here and now
    assert isinstance(scope, nullcontext) and turns.turn is not None
    assert current().writer is not None and current().session_id == "nb_bare"
    assert turns.default_runtime() is turns.runtime()
    turns.cell_ended(None, None)
    assert current() == TurnState() and turns.turn is None
    settings.provider = ""
    assert turns.default_runtime() is None  # nothing chosen here: the environment's


# -- a real IPython shell ------------------------------------------------------------------------
def test_a_plain_cell_of_a_real_shell_records_into_the_notebooks_session(shell: Any) -> None:
    shell.run('%%openprogram\ntriage("first")')
    sid = shell.magics.turns.kernel_meta.session_id
    shell.run('kind = triage("in a plain cell")')
    assert shell.ip.user_ns["kind"] == "bug"
    shell.run(
        "from openprogram import session_context\n"
        "with session_context() as _s:\n"
        '    other = triage("in its own session")\n'
        "other_runtime = _s.runtime"
    )
    assert shell.ip.user_ns["other"] == "bug"  # the notebook's provider, as a value
    assert shell.ip.user_ns["other_runtime"] is shell.magics.runtime()
    assert "OPENPROGRAM_PROVIDER" not in os.environ
    sessions = sorted(p.name for p in (Path(os.environ["OPENPROGRAM_HOME"]) / "sessions").iterdir())
    assert sid in sessions and not any(name.startswith("adhoc") for name in sessions)
    turns = [n for n in reopen(Path(os.environ["OPENPROGRAM_HOME"]), sid) if n.kind == "turn"]
    assert [t.input["text"].splitlines()[-1] for t in turns[:2]] == [
        'triage("first")',
        'kind = triage("in a plain cell")',
    ]


def test_a_discarded_shell_claims_nothing(shell: Any) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    magics = shell.magics
    InteractiveShell.clear_instance()
    assert magics.bare_call_turn("f") is None and magics.default_runtime() is None


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``test_magics``' shell: the extension loaded, ``%openprogram provider test``."""
    from IPython.core.interactiveshell import InteractiveShell
    from test_magics import AGENTS, make_shell

    import openprogram_magics.bridge as bridge

    monkeypatch.setattr(bridge, "_state", None)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    sh = make_shell(tmp_path / "ipython")
    sh.run(AGENTS)
    try:
        yield sh
    finally:
        InteractiveShell.clear_instance()


def test_a_scoped_change_reads_the_state_when_entered_not_when_made() -> None:
    """``asking = using(ask=...)`` made before ``with using(echo=...), asking:`` must keep
    the echo (a chat cell streamed nothing when it did not)."""
    from openprogram.store.vars import current, using

    asking = using(ask="handler")
    with using(echo="echo"), asking:
        assert current().echo == "echo" and current().ask == "handler"
    assert current().echo is None
