"""``session_context``: the session boundary, the per-turn ContextVars, and one commit per turn."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import git
import pytest
from helpers import status_shows_nothing

import openprogram.agentic_programming.function as fn_mod
import openprogram.store as store_mod
from openprogram import NoProviderConfigured, session_context
from openprogram.context.nodes import COMPLETED, make_call
from openprogram.store.session.context import SessionHandle


def current_vars() -> tuple[Any, Any, Any, Any]:
    """The four per-turn ContextVars, read at the import paths upstream code uses."""
    return (
        store_mod._store.get(),
        store_mod._current_turn_id.get(),
        fn_mod._current_runtime.get(),
        fn_mod._call_id.get(),
    )


NOTHING = (None, None, None, None)


def write_turn(handle: SessionHandle, text: str) -> Any:
    """A turn node (moves HEAD) with one finished function node under it."""
    turn = handle.writer.append(make_call("turn", "cell", input={"text": text}), turn_level=True)
    child = handle.writer.append(make_call("function", "work", caller=turn.id))
    child.output, child.metadata["status"] = f"did {text}", COMPLETED
    handle.writer.update(child)
    turn.metadata["status"] = COMPLETED
    handle.writer.update(turn)
    return turn


def session_dir(home: Path, sid: str) -> Path:
    return home / "sessions" / sid


# -- the session boundary ----------------------------------------------------------------------
def test_no_id_mints_a_new_session_each_time(op_home: Path) -> None:
    with session_context() as first:
        pass
    with session_context() as second:
        pass
    assert first.created and second.created
    assert first.session_id != second.session_id
    for handle in (first, second):
        assert (session_dir(op_home, handle.session_id) / ".git").is_dir()
        assert (session_dir(op_home, handle.session_id) / "meta.json").is_file()


def test_passing_the_id_back_continues_the_history(op_home: Path) -> None:
    with session_context(message="first") as s1:
        t1 = write_turn(s1, "one")
    with session_context(s1.session_id, message="second") as s2:
        t2 = write_turn(s2, "two")
    assert s1.created is True
    assert s2.created is False
    assert s2.session_id == s1.session_id
    assert t2.predecessor == t1.id
    chain = s2.writer.session.chain(s2.writer.head_id, 10)
    assert [c.kind for c in chain] == ["root", "turn", "turn"]
    assert [c.id for c in chain[1:]] == [t1.id, t2.id]


def test_a_new_explicit_id_is_created_under_that_id(op_home: Path) -> None:
    with session_context("my_notebook-1") as s:
        write_turn(s, "hello")
    assert s.created is True and s.session_id == "my_notebook-1"
    meta = json.loads((session_dir(op_home, "my_notebook-1") / "meta.json").read_text())
    assert meta["id"] == "my_notebook-1"
    with session_context("my_notebook-1") as again:
        pass
    assert again.created is False


def test_the_history_survives_a_fresh_process_store(op_home: Path) -> None:
    from openprogram.store.session.store import SessionStore

    with session_context(message="first") as s1:
        t1 = write_turn(s1, "one")
    fresh = SessionStore(op_home)  # what the next process sees
    with session_context(s1.session_id, db=fresh) as s2:
        t2 = write_turn(s2, "two")
    assert s2.created is False and t2.predecessor == t1.id
    fresh.close()


# -- the ContextVars ---------------------------------------------------------------------------
def test_inside_every_var_is_set_and_leaving_resets_them(rt: Any) -> None:
    assert current_vars() == NOTHING
    with session_context(runtime=rt, turn_id="turn_abc") as s:
        store, turn_id, runtime, call_id = current_vars()
        assert store is s.writer and store.session_id == s.session_id
        assert (turn_id, runtime, call_id) == ("turn_abc", rt, None)
    assert current_vars() == NOTHING


def test_leaving_resets_every_var_when_the_body_raises(rt: Any) -> None:
    with pytest.raises(ZeroDivisionError), session_context(runtime=rt) as s:
        write_turn(s, "doomed")
        1 / 0  # noqa: B018
    assert current_vars() == NOTHING
    # what was written before the error was still committed
    repo = git.Repo(s.db.session_path(s.session_id))
    assert str(repo.head.commit.message).startswith("turn 1")
    repo.close()


def test_nested_contexts_restore_the_outer_turn(rt: Any) -> None:
    with session_context(runtime=rt) as outer:
        before = current_vars()
        with pytest.raises(RuntimeError), session_context(runtime=rt) as inner:
            assert current_vars()[0] is inner.writer
            assert inner.session_id != outer.session_id
            raise RuntimeError("inner failed")
        assert current_vars() == before
        with fn_mod.using_call_id("n_frame"):
            with session_context(outer.session_id) as same:
                # a nested turn starts at the top of its own turn, not inside the frame
                assert current_vars()[3] is None
                assert same.created is False
            assert fn_mod._call_id.get() == "n_frame"
    assert current_vars() == NOTHING


def test_another_thread_never_sees_this_threads_turn(rt: Any) -> None:
    inside, release = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def worker() -> None:
        with session_context(runtime=rt) as s:
            seen["handle"] = s
            seen["inside"] = current_vars()
            inside.set()
            release.wait(10)
        seen["after"] = current_vars()

    thread = threading.Thread(target=worker)
    thread.start()
    assert inside.wait(10)
    assert current_vars() == NOTHING  # the main thread while the worker is inside
    with session_context(runtime=rt) as mine:
        assert current_vars()[0] is mine.writer  # not the worker's
    release.set()
    thread.join(10)
    assert seen["inside"][0] is seen["handle"].writer
    assert seen["after"] == NOTHING
    assert current_vars() == NOTHING


def test_concurrent_asyncio_tasks_each_see_only_their_own_turn(rt: Any) -> None:
    async def turn(name: str, entered: asyncio.Event, go: asyncio.Event) -> tuple[Any, ...]:
        with session_context(name, runtime=rt) as s:
            entered.set()
            await go.wait()  # the other task runs while this one is inside
            assert current_vars()[0] is s.writer
            assert s.writer.session_id == name
        return current_vars()

    async def observer(entered: asyncio.Event) -> tuple[Any, ...]:
        await entered.wait()
        return current_vars()

    async def scenario() -> None:
        a_in, b_in, go = asyncio.Event(), asyncio.Event(), asyncio.Event()
        task_a = asyncio.create_task(turn("task_a", a_in, go))
        task_b = asyncio.create_task(turn("task_b", b_in, go))
        watcher = asyncio.create_task(observer(a_in))
        await a_in.wait()
        await b_in.wait()
        assert await watcher == NOTHING  # a task started next to A does not see A's turn
        assert current_vars() == NOTHING
        go.set()
        assert await task_a == NOTHING
        assert await task_b == NOTHING

    asyncio.run(scenario())
    assert current_vars() == NOTHING


# -- no provider -------------------------------------------------------------------------------
def test_without_a_provider_the_store_is_installed_and_exec_says_how_to_configure() -> None:
    with session_context() as s:
        assert store_mod._store.get() is s.writer
        write_turn(s, "still recorded")
        assert s.runtime is not None
        with pytest.raises(NoProviderConfigured) as info:
            s.runtime.exec("hello")
    message = str(info.value)
    assert "OPENAI_API_KEY" in message and "OPENPROGRAM_PROVIDER" in message
    kinds = [n.kind for n in s.writer.session.nodes()]
    assert kinds.count("turn") == 1


# -- commits -----------------------------------------------------------------------------------
def test_one_commit_per_turn_named_after_the_turn(op_home: Path) -> None:
    with session_context(message="load the data\nsecond line") as s:
        write_turn(s, "a")
        write_turn(s, "b")  # two turn-level nodes, still one turn and one commit
    for text in ("plot it", "fit a model"):
        with session_context(s.session_id, message=text) as again:
            write_turn(again, text)
    repo = git.Repo(session_dir(op_home, s.session_id))
    messages = [c.message for c in repo.iter_commits()]
    repo.close()
    assert messages == [
        "turn 3: fit a model",
        "turn 2: plot it",
        "turn 1: load the data",
        f"session {s.session_id} created",
    ]


def test_leaving_the_context_commits_the_nodes_at_head(op_home: Path) -> None:
    with session_context(message="compute") as s:
        turn = write_turn(s, "compute")
    repo = git.Repo(session_dir(op_home, s.session_id))
    tree = repo.head.commit.tree
    found = {}
    items: list[Any] = list(tree.traverse())
    for item in items:
        if item.type == "blob" and item.path.startswith("history/"):
            node = json.loads(item.data_stream.read())
            found[node["id"]] = node
    meta = json.loads(tree["meta.json"].data_stream.read())
    repo.close()
    assert found[turn.id]["metadata"]["status"] == "completed"
    assert {n["metadata"]["kind"] for n in found.values()} == {"root", "turn", "function"}
    assert meta["head_id"] == turn.id


def test_git_status_in_the_session_is_clean_once_the_store_is_closed(op_home: Path) -> None:
    with session_context(message="compute") as s:
        write_turn(s, "compute")
    s.db.close()  # what happens at process exit (atexit)
    # a bare repository: git lists no file as changed or deleted (it has no working tree)
    assert status_shows_nothing(session_dir(op_home, s.session_id))


def test_a_turn_that_writes_nothing_makes_no_commit(op_home: Path) -> None:
    with session_context() as s:
        pass
    with session_context(s.session_id):
        pass
    repo = git.Repo(session_dir(op_home, s.session_id))
    assert len(list(repo.iter_commits())) == 1
    repo.close()
