"""``%%openprogram`` / ``%openprogram`` in a real IPython ``InteractiveShell``.

Every test gets a fresh shell with the extension loaded and ``%openprogram provider test``
(the ``shell`` fixture).  Like jupysql's ``TestingShell``, :meth:`Shell.run` raises the
cell's exception unless the test says it expects one, so a broken cell never passes quietly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import git
import pytest
from helpers import settled
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.error import UsageError
from IPython.core.interactiveshell import ExecutionResult, InteractiveShell
from traitlets.config import Config

import openprogram.agentic_programming.function as fn_mod
import openprogram.store as store_mod
import openprogram_magics.bridge as bridge
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.prompt import sent_messages
from openprogram.context.nodes import Call
from openprogram.providers.base import LLMRequest
from openprogram.providers.test import FunctionProvider
from openprogram_magics import use_runtime
from openprogram_magics.magics import OpenProgramMagics
from openprogram_magics.notebook import MIME_TYPE

AGENTS = '''
from openprogram import agentic_function

@agentic_function
def triage(ticket: str, runtime=None) -> str:
    """Classify the support ticket as bug, feature or question."""
    return runtime.exec(ticket, choices=["bug", "feature", "question"])

@agentic_function
def handle(ticket: str, runtime=None) -> str:
    """Handle a ticket: classify it, then say what happens next."""
    kind = triage(ticket)
    return f"{kind}: queued"
'''


class Shell:
    """A fresh InteractiveShell with the extension loaded and the test provider chosen."""

    def __init__(self, ip: InteractiveShell) -> None:
        self.ip = ip
        self.display = CapturingDisplayPublisher()
        ip.display_pub = self.display

    @property
    def magics(self) -> OpenProgramMagics:
        found = self.ip.magics_manager.registry["OpenProgramMagics"]  # type: ignore[union-attr]
        assert isinstance(found, OpenProgramMagics)
        return found

    def run(self, code: str, *, error: type[BaseException] | None = None) -> ExecutionResult:
        """Run a cell (counted, as in a notebook); raise its exception unless ``error``."""
        result = self.ip.run_cell(code, store_history=True)
        exc = result.error_before_exec or result.error_in_exec
        if error is None:
            if exc is not None:
                raise exc
        else:
            assert isinstance(exc, error), f"expected {error.__name__}, got {exc!r}"
        return result

    def line(self, line: str) -> Any:
        return self.ip.run_line_magic("openprogram", line)

    def use_provider(self, fn: Any) -> FunctionProvider:
        """Answer LLM calls with ``fn(request)`` (a FunctionProvider)."""
        provider = FunctionProvider(fn)
        self.use_runtime(provider)
        return provider

    def use_runtime(self, provider: Any) -> None:
        """Make ``provider`` (any Provider) answer the cells' LLM calls."""
        from openprogram.providers import create_runtime

        use_runtime(create_runtime(provider, backoff=0.0), self.ip)

    def bundles(self) -> list[dict[str, Any]]:
        """Every display/update published so far that carries the session mime part."""
        return [o["data"] for o in self.display.outputs if MIME_TYPE in o["data"]]


def make_shell(ipython_dir: Path) -> Shell:
    InteractiveShell.clear_instance()
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.ipython_dir = str(ipython_dir)
    config.InteractiveShell.colors = "nocolor"  # IPython 9: lowercase (8: any case)
    ip = InteractiveShell.instance(config=config)
    shell = Shell(ip)
    ip.run_line_magic("load_ext", "openprogram_magics")
    ip.run_line_magic("openprogram", "provider test")
    shell.magics.live_dag = False  # widgets need a frontend; the final bundle is still shown
    return shell


@pytest.fixture(scope="session")
def ipython_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ipython")


@pytest.fixture
def shell(ipython_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Shell]:
    monkeypatch.setattr(bridge, "_state", None)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    sh = make_shell(ipython_dir)
    sh.run(AGENTS)
    try:
        yield sh
    finally:
        InteractiveShell.clear_instance()


def session_nodes(sid: str) -> list[Call]:
    db = default_db()
    db.close()  # read what is on disk, as a new process would
    return db.open(sid).nodes()


def turns_of(sid: str) -> list[Call]:
    return [n for n in session_nodes(sid) if n.kind == "turn"]


def all_vars() -> tuple[Any, ...]:
    return (
        store_mod._store.get(),
        store_mod._current_turn_id.get(),
        fn_mod._current_runtime.get(),
        fn_mod._call_id.get(),
        fn_mod._depth.get(),
    )


# -- a %%openprogram cell is a normal cell ---------------------------------------------------
def test_cell_runs_like_a_plain_cell(shell: Shell, capsys: pytest.CaptureFixture[str]) -> None:
    result = shell.run('%%openprogram\nx = 41\nprint("hello from the cell")\nx + 1')
    assert shell.ip.user_ns["x"] == 41
    assert result.result == 42
    out = capsys.readouterr().out
    assert "hello from the cell" in out
    assert "Out[" in out and "42" in out  # the last value is displayed as usual


def test_traceback_is_the_original_exception(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    result = shell.run('%%openprogram\nraise ValueError("boom 7")', error=ValueError)
    assert str(result.error_in_exec) == "boom 7"
    err = capsys.readouterr()
    shown = err.out + err.err
    assert "ValueError" in shown and "boom 7" in shown


def test_top_level_await(shell: Shell) -> None:
    result = shell.run("%%openprogram\nimport asyncio\nawait asyncio.sleep(0)\nz = 'awaited'\nz")
    assert result.result == "awaited"
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    assert [t.status for t in turns_of(sid)] == ["completed"]
    assert all_vars() == (None, None, None, None, 0)


def test_async_agentic_call_under_await_hangs_under_the_turn(shell: Shell) -> None:
    shell.run(
        "from openprogram import agentic_function\n"
        "@agentic_function\n"
        "async def summarize(text, runtime=None):\n"
        '    """Summarize."""\n'
        "    return await runtime.aexec(text)\n"
    )
    shell.run('%%openprogram\nawait summarize("a long text")')
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    nodes = session_nodes(sid)
    turn = next(n for n in nodes if n.kind == "turn")
    fn = next(n for n in nodes if n.kind == "function")
    llm = next(n for n in nodes if n.kind == "llm")
    assert fn.caller == turn.id and llm.caller == fn.id
    assert turn.status == fn.status == llm.status == "completed"


# -- one turn, one commit --------------------------------------------------------------------
def test_cell_is_one_turn_with_the_calls_under_it_and_one_commit(shell: Shell) -> None:
    shell.run('%%openprogram\nhandle("the app crashes on save")')
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    nodes = session_nodes(sid)
    turns = [n for n in nodes if n.kind == "turn"]
    assert len(turns) == 1 and turns[0].status == "completed"
    turn = turns[0]
    by_id = {n.id: n for n in nodes}
    handle = next(n for n in nodes if n.name == "handle")
    triage = next(n for n in nodes if n.name == "triage")
    llm = next(n for n in nodes if n.kind == "llm")
    assert handle.caller == turn.id
    assert triage.caller == handle.id
    assert llm.caller == triage.id
    assert {n.turn for n in (turn, handle, triage, llm)} == {turn.turn}
    assert by_id[turn.predecessor].kind == "root"  # type: ignore[index]
    assert "handle(" in turn.input["text"]
    assert turn.output == repr("bug: queued")

    shell.run('%%openprogram\ntriage("dark mode please")')
    lines = shell.line("log")
    assert len(lines) == 3  # created + one commit per cell
    assert lines[0].split(" ", 1)[1].startswith("turn 2:")
    assert lines[1].split(" ", 1)[1].startswith("turn 1:")
    path = default_db().open(sid).path
    default_db().close()  # git's index is refreshed when the store closes (detached)
    settled(path.parent.parent)
    repo = git.Repo(path)
    try:
        assert len(list(repo.iter_commits("main"))) == 3
        assert not repo.is_dirty(untracked_files=True)
    finally:
        repo.close()


def test_two_cells_continue_one_session_and_chain(shell: Shell) -> None:
    shell.run('%%openprogram\ntriage("one")')
    first = shell.magics.turns.kernel_meta
    shell.run('%%openprogram\ntriage("two")')
    second = shell.magics.turns.kernel_meta
    assert first is not None and second is not None
    assert first.session_id == second.session_id
    t1, t2 = turns_of(second.session_id)
    assert t2.predecessor == t1.id == first.last_turn_id
    assert second.last_turn_id == t2.id
    # the second LLM call saw the first turn in its prompt (the session is continued); its
    # node names that turn rather than storing its text again
    llm2 = [n for n in session_nodes(second.session_id) if n.kind == "llm"][-1]
    assert llm2.metadata["context"]["turns"] == [t1.id]
    assert "one" not in str(llm2.metadata.get("messages"))
    assert "one" in str(sent_messages(default_db().open(second.session_id), llm2))


def test_session_pin_affects_that_cell_only(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run('%%openprogram\ntriage("one")')
    before = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    capsys.readouterr()
    default_db().create_session("pinned_abc")  # a cell pins only a session there is
    shell.run('%%openprogram --session pinned_abc\ntriage("two")')
    assert shell.magics.turns.kernel_meta.session_id == before  # type: ignore[union-attr]
    out = capsys.readouterr().out
    assert f"this cell runs in session pinned_abc; the notebook stays with {before}" in out
    assert shell.bundles()[-1][MIME_TYPE]["pinned"] is True  # saved outputs skip it
    assert len(turns_of("pinned_abc")) == 1 and len(turns_of(before)) == 1
    shell.run('%%openprogram --session pinned_abc\ntriage("three")')
    assert capsys.readouterr().out.count("this cell runs in") == 0  # told once
    shell.run('%%openprogram\ntriage("four")')
    assert len(turns_of("pinned_abc")) == 2 and len(turns_of(before)) == 2
    shell.run('%%openprogram --session "../etc"\n_ran = True', error=UsageError)
    assert "_ran" not in shell.ip.user_ns


# -- errors and interrupts -------------------------------------------------------------------
def test_error_is_recorded_and_the_next_cell_works(shell: Shell) -> None:
    shell.run('%%openprogram\ntriage("one")\nraise KeyError("missing thing")', error=KeyError)
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    (turn,) = turns_of(sid)
    assert turn.status == "error"
    assert "KeyError" in turn.metadata["error"] and "missing thing" in turn.metadata["error"]
    assert "Traceback" in turn.metadata["traceback"]
    assert all_vars() == (None, None, None, None, 0)
    shell.run('%%openprogram\nok = triage("two")')
    assert shell.ip.user_ns["ok"] == "bug"
    assert [t.status for t in turns_of(sid)] == ["error", "completed"]


def test_keyboard_interrupt_mid_llm_call(shell: Shell) -> None:
    def interrupted(request: LLMRequest) -> str:
        raise KeyboardInterrupt

    shell.use_provider(interrupted)
    result = shell.run(
        '%%openprogram\n_before = 1\ntriage("slow")\n_after = 1', error=KeyboardInterrupt
    )
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert "_before" in shell.ip.user_ns and "_after" not in shell.ip.user_ns
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    nodes = session_nodes(sid)
    assert next(n for n in nodes if n.kind == "turn").status == "interrupted"
    assert next(n for n in nodes if n.kind == "function").status == "cancelled"
    assert next(n for n in nodes if n.kind == "llm").status == "cancelled"
    # every ContextVar is reset: a plain cell sees none of them
    shell.run(
        "import openprogram.store as _s, openprogram.agentic_programming.function as _f\n"
        "_vars = (_s._store.get(), _s._current_turn_id.get(), _f._current_runtime.get(),"
        " _f._call_id.get(), _f._depth.get())"
    )
    assert shell.ip.user_ns["_vars"] == (None, None, None, None, 0)
    use_runtime(None, shell.ip)  # back to the test provider
    shell.run('%%openprogram\nnext_ok = triage("fast")')
    assert shell.ip.user_ns["next_ok"] == "bug"
    assert [t.status for t in turns_of(sid)] == ["interrupted", "completed"]


def test_a_plain_cells_call_is_a_turn_of_its_own_in_the_notebooks_session(
    shell: Shell, op_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run('%%openprogram\ntriage("in a turn")')
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    first = turns_of(sid)[0]
    shell.run("plain = triage('outside')\nagain = triage('twice')")
    assert shell.ip.user_ns["plain"] == "bug"
    turns = turns_of(sid)
    assert len(turns) == 2 and turns[1].predecessor == first.id
    assert turns[1].name.startswith("cell [") and "triage('outside')" in turns[1].input["text"]
    calls = [n for n in session_nodes(sid) if n.kind == "function" and n.caller == turns[1].id]
    assert [c.input for c in calls] == [{"ticket": "outside"}, {"ticket": "twice"}]
    assert sorted(p.name for p in (op_home / "sessions").iterdir()) == [sid]  # no ad-hoc one
    assert "adhoc" not in capsys.readouterr().err
    shell.run("x = 1")  # a cell with no agentic call is not a turn
    assert len(turns_of(sid)) == 2


# -- line commands ---------------------------------------------------------------------------
def test_config_traitlets(shell: Shell) -> None:
    shell.run('%config OpenProgramMagics.provider = "test"')
    shell.run('%config OpenProgramMagics.model = "m2"')
    assert shell.magics.provider == "test" and shell.magics.runtime().model == "m2"
    shell.run("%config OpenProgramMagics.auto = True")
    assert shell.magics.auto is True


def test_a_request_rate_slower_than_one_an_hour_is_refused_as_it_is_set(
    shell: Shell, caplog: pytest.LogCaptureFixture
) -> None:
    shell.run("%config OpenProgramMagics.requests_per_minute = 30")
    shell.run("%config OpenProgramMagics.requests_per_minute = 1e-9")  # a typo for 1e9?
    assert shell.magics.requests_per_minute == 30  # kept, as %config keeps any refused value
    assert "requests_per_minute must be at least one request an hour" in caplog.text
    assert shell.magics.runtime().requests_per_minute == 30


def test_cell_magic_help(shell: Shell, capsys: pytest.CaptureFixture[str]) -> None:
    doc = shell.ip.find_cell_magic("openprogram").__doc__
    assert doc is not None
    assert "metadata" in doc and "session" in doc
    assert "%%openprogram\n" in doc and "triage(" in doc  # an example
    assert "--session" in doc
    shell.ip.run_cell("%%openprogram?", store_history=False)  # pinfo: must not run a turn
    assert shell.magics.turns.kernel_meta is None


def test_auto_does_not_turn_silent_requests(shell: Shell) -> None:
    # a frontend's silent request (the bridge's) runs with no pre/post_run_cell events:
    # it must not open a turn that nobody ends
    shell.line("auto on")
    shell.ip.run_cell("_silent = 1", silent=True)
    assert shell.magics.turns.turn is None
    shell.run("r = 1")
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    assert len(turns_of(sid)) == 1


# -- what is displayed -----------------------------------------------------------------------
def test_output_bundle_carries_the_session_and_the_static_dag(shell: Shell) -> None:
    shell.run('%%openprogram\ntriage("one")')
    meta = shell.magics.turns.kernel_meta
    assert meta is not None
    (bundle,) = shell.bundles()
    part = bundle[MIME_TYPE]
    assert part["session_id"] == meta.session_id and part["last_turn_id"] == meta.last_turn_id
    assert part["version"] == 1 and part["status"] == "completed"
    assert "<svg" in bundle["text/html"]
    assert meta.session_id in bundle["text/plain"] and "triage" in bundle["text/plain"]


def test_first_turn_prints_the_id_and_use_resumes(
    shell: Shell, ipython_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a plain IPython terminal: no frontend, no notebook file
    shell.run('%%openprogram\ntriage("one")')
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    assert f"new session {sid}" in capsys.readouterr().out
    shell.run('%%openprogram\ntriage("two")')
    assert "new session" not in capsys.readouterr().out
    # tomorrow: a new IPython
    again = make_shell(ipython_dir)
    again.run(AGENTS)
    again.line(f"use {sid}")
    again.run('%%openprogram\ntriage("three")')
    assert again.magics.turns.kernel_meta.session_id == sid  # type: ignore[union-attr]
    _t1, t2, t3 = turns_of(sid)
    assert t3.predecessor == t2.id


def test_load_is_idempotent_and_unload_restores_plain_cells(shell: Shell) -> None:
    shell.ip.run_line_magic("reload_ext", "openprogram_magics")
    assert (
        shell.ip.input_transformers_cleanup.count(
            __import__("openprogram_magics.cells.transform", fromlist=["_"]).transform_cell
        )
        == 1
    )
    shell.line("provider test")
    shell.run('%%openprogram\ntriage("one")')
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    assert len(turns_of(sid)) == 1


def test_live_dag_failure_never_breaks_a_turn(
    shell: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell.magics.live_dag = True
    import openprogram_magics.turn as turn_mod

    def broken(self: Any) -> None:
        raise RuntimeError("no widgets here")

    monkeypatch.setattr(turn_mod.CellTurn, "_show_live", broken)
    result = shell.run('%%openprogram\ntriage("one")')
    assert result.result == "bug"


def test_a_terminal_shows_only_the_final_view(shell: Shell) -> None:
    shell.magics.live_dag = True  # no kernel: no live widget to draw, just the final bundle
    shell.run('%%openprogram\ntriage("one")')
    (only,) = shell.display.outputs
    assert MIME_TYPE in only["data"] and "running" not in only["data"]["text/plain"]
    assert "missing-predecessor" not in only["data"]["text/plain"]


def test_a_value_whose_repr_fails_still_ends_the_turn_and_the_next_does_not_fork(
    shell: Shell,
) -> None:
    shell.run("class Bad:\n    def __repr__(self):\n        raise ValueError('no repr')")
    shell.run("%%openprogram\nBad()")  # IPython prints its own display error; the cell is fine
    shell.run('%%openprogram\ntriage("next")')
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    first, second = turns_of(sid)
    assert first.status == "completed" and "repr failed" in str(first.output)
    assert second.predecessor == first.id
    assert not any("forked" in b["text/plain"] for b in shell.bundles())


def test_secrets_in_a_cell_never_reach_the_session(
    shell: Shell, op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-NOTEBOOK-SECRET-42"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    shell.run(
        "%%openprogram\nimport os\nraise RuntimeError('key ' + os.environ['OPENAI_API_KEY'])",
        error=RuntimeError,
    )
    shell.run(f"%%openprogram\nkey = '{secret}'\ntriage('ok')")
    default_db().close()
    leaked = [
        p
        for p in (settled(op_home) / "sessions").rglob("*")
        if p.is_file() and secret.encode() in p.read_bytes()
    ]
    assert leaked == []
