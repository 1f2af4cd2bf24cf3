"""``openprogram.map`` on threads and on a process pool: every item's nodes under the turn,
in item order; failures, questions, stop and what cannot cross a process boundary."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers import map_shape, reopen

import openprogram
from openprogram import agentic_function, ask_user, create_runtime, session_context
from openprogram.agentic_programming.function import using_call_id
from openprogram.agentic_programming.runtime import Runtime
from openprogram.context.nodes import Call, make_call
from openprogram.context.policy import estimate_tokens
from openprogram.errors import UserError
from openprogram.providers.base import LLMRequest, LLMResponse, Usage
from openprogram.providers.test import FunctionProvider
from openprogram.scale import MapRun
from openprogram.settings import current as current_settings
from openprogram.store.session.store import SessionStore
from openprogram.usage import Budget, set_price
from openprogram.usage.prices import clear_prices
from openprogram.usage.totals import summarize


@agentic_function
def classify(text: str, runtime: Runtime | None = None) -> str:
    """Classify the ticket as bug or feature."""
    assert runtime is not None
    if text == "boom":
        raise ValueError("this item is broken")
    return str(runtime.exec(text, choices=["bug", "feature"]))


@agentic_function
def clarify(text: str, runtime: Runtime | None = None) -> str:
    """Ask what the ticket means, then classify it."""
    answer = ask_user(f"what does {text!r} mean?")
    return f"{text}: {answer}"


@agentic_function
def fragile(text: str) -> str:
    """Echo the text; "die" takes its worker process down with it."""
    if text == "die":
        os._exit(3)
    return text


@contextmanager
def cell(runtime: Runtime, session_id: str | None = None) -> Iterator[tuple[Any, Call]]:
    """One notebook-like turn: a ``turn`` node the calls hang under, committed on exit."""
    with session_context(session_id, runtime=runtime, message="cell") as s:
        node = s.writer.append(make_call("turn", "cell", input={"text": "map"}), turn_level=True)
        with using_call_id(node.id):
            yield s, node
        node.metadata["status"] = "completed"
        s.writer.update(node)


def run_cell(runtime: Runtime, items: list[Any], **kwargs: Any) -> tuple[Any, Call, list[Any]]:
    with cell(runtime) as (s, turn):
        results = openprogram.map(classify, items, progress=False, **kwargs)
    return s, turn, results


def items_under(nodes: list[Call], turn: Call) -> list[Call]:
    return [n for n in nodes if n.caller == turn.id]


def test_items_run_on_threads_and_land_under_the_turn_in_item_order(
    rt: Runtime, op_home: Path
) -> None:
    texts = [f"ticket {i}" for i in range(40)]
    s, turn, results = run_cell(rt, texts, max_in_flight=8)
    assert results == ["bug"] * 40
    nodes = reopen(op_home, s.session_id)
    calls = items_under(nodes, turn)
    assert [c.input for c in calls] == [{"text": t} for t in texts]
    assert [c.metadata["item"] for c in calls] == list(range(40))
    assert [c.seq for c in calls] == sorted(c.seq for c in calls)
    llms = [n for n in nodes if n.kind == "llm"]
    assert len(llms) == 40 and all(n.caller in {c.id for c in calls} for n in llms)
    assert all(n.status == "completed" for n in nodes if n.id != turn.id)
    assert all(n.metadata.get("worker") for n in calls + llms)
    # the docstring reached the model once per item, as in a local call
    assert llms[0].metadata["messages"][0] == {
        "role": "system",
        "content": "Classify the ticket as bug or feature.",
    }


def test_an_item_that_raises_is_an_error_node_and_its_exception_in_place(
    rt: Runtime, op_home: Path
) -> None:
    s, turn, results = run_cell(rt, ["a", "boom", "c"])
    assert results[0] == results[2] == "bug"
    assert isinstance(results[1], ValueError) and "broken" in str(results[1])
    calls = items_under(reopen(op_home, s.session_id), turn)
    assert [c.status for c in calls] == ["completed", "error", "completed"]
    assert "ValueError: this item is broken" in calls[1].metadata["error"]


def test_raise_errors_raises_the_first_error_once_every_item_is_recorded(
    rt: Runtime, op_home: Path
) -> None:
    with pytest.raises(ValueError, match="broken"), cell(rt) as (s, turn):
        openprogram.map(classify, ["boom", "b", "c"], raise_errors=True, progress=False)
    calls = items_under(reopen(op_home, s.session_id), turn)
    assert [c.status for c in calls] == ["error", "completed", "completed"]


def test_ask_user_on_a_worker_is_unanswered_at_once_and_says_why(
    rt: Runtime, op_home: Path
) -> None:
    with cell(rt) as (s, _turn):
        results = openprogram.map(clarify, ["x", "y"], progress=False)
    assert results == ["x: None", "y: None"]
    asks = [n for n in reopen(op_home, s.session_id) if n.kind == "ask_user"]
    assert [a.status for a in asks] == ["unanswered", "unanswered"]
    assert all("worker" in a.metadata["note"] for a in asks)


def reply_doing(action: Callable[[], None], *, on: str = "t5") -> FunctionProvider:
    """Replies "bug"; while the call for item ``on`` runs it does ``action`` first (a stop,
    a Ctrl-C: the marker the tests wait on, instead of a timer)."""

    def reply(request: LLMRequest) -> str:
        if request.messages[-1]["content"].startswith(on):
            action()
        return "bug"

    return FunctionProvider(reply)


def test_stop_cancels_what_has_not_started_and_accounts_for_every_item(
    op_home: Path,
) -> None:
    runs: list[MapRun] = []
    rt = create_runtime(reply_doing(lambda: runs[0].stop()), backoff=0.0)
    with cell(rt) as (s, turn):
        run = MapRun(classify, [f"t{i}" for i in range(60)], max_in_flight=4, progress=False)
        runs.append(run)
        results = run.run()
    calls = items_under(reopen(op_home, s.session_id), turn)
    assert [c.metadata["item"] for c in calls] == list(range(60))
    statuses = [c.status for c in calls]
    assert set(statuses) == {"completed", "cancelled"}
    first_cancelled = statuses.index("cancelled")
    assert first_cancelled > 0 and set(statuses[first_cancelled:]) == {"cancelled"}
    assert all(isinstance(r, CancelledError) for r in results[first_cancelled:])
    assert "running" not in {n.status for n in reopen(op_home, s.session_id)}


def test_no_session_context_records_the_map_as_one_turn_of_the_process_session(
    op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENPROGRAM_PROVIDER", "test")
    monkeypatch.setenv("OPENPROGRAM_SESSION", "adhoc_map")
    monkeypatch.setattr("openprogram.agentic_programming.function._process_session", None)
    assert openprogram.map(classify, ["a", "b"], progress=False) == ["bug", "bug"]
    nodes = reopen(op_home, "adhoc_map")
    calls = [n for n in nodes if n.kind == "function"]
    assert [c.input for c in calls] == [{"text": "a"}, {"text": "b"}]
    assert len({n.turn for n in nodes if n.kind != "root"}) == 1


# -- a process pool --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pool() -> Iterator[ProcessPoolExecutor]:
    with ProcessPoolExecutor(2) as executor:
        yield executor


def test_a_process_pool_writes_the_same_nodes_as_threads(
    rt: Runtime, op_home: Path, pool: ProcessPoolExecutor
) -> None:
    texts = ["a", "boom", "c", "d", "e"]
    local, local_turn, local_results = run_cell(rt, texts)
    remote, remote_turn, remote_results = run_cell(rt, texts, executor=pool)
    assert [str(r) for r in remote_results] == [str(r) for r in local_results]
    assert type(remote_results[1]) is ValueError
    remote_nodes = reopen(op_home, remote.session_id)
    assert map_shape(remote_nodes, remote_turn.id) == map_shape(
        reopen(op_home, local.session_id), local_turn.id
    )
    workers = {n.metadata["worker"] for n in items_under(remote_nodes, remote_turn)}
    assert all(w.rsplit(":", 1)[1] != str(os.getpid()) for w in workers)


def test_a_pool_process_that_dies_leaves_its_item_interrupted_and_the_rest_accounted(
    rt: Runtime, op_home: Path
) -> None:
    with ProcessPoolExecutor(1) as broken, cell(rt) as (s, turn):
        results = openprogram.map(
            fragile, ["a", "die", "c"], executor=broken, max_in_flight=1, progress=False
        )
    assert results[0] == "a"
    assert [type(r).__name__ for r in results[1:]] == ["BrokenProcessPool"] * 2
    calls = items_under(reopen(op_home, s.session_id), turn)
    assert [(c.metadata["item"], c.status) for c in calls] == [
        (0, "completed"),
        (1, "interrupted"),
        (2, "error"),  # never ran: the pool was already broken
    ]


def unpicklable() -> Callable[[str], str]:
    """An agentic function that closes over a lock: it cannot leave this process."""
    lock = threading.Lock()

    @agentic_function
    def guarded(text: str) -> str:
        """Hold the lock."""
        with lock:
            return text

    return guarded


def test_a_function_that_cannot_be_pickled_is_one_clear_error_before_anything_runs(
    rt: Runtime, op_home: Path, pool: ProcessPoolExecutor
) -> None:
    with cell(rt) as (s, turn), pytest.raises(UserError) as info:
        openprogram.map(unpicklable(), ["a", "b"], executor=pool, progress=False)
    message = str(info.value)
    assert "guarded cannot be sent to other processes" in message
    assert "nothing was submitted" in message and "\n" not in message
    assert items_under(reopen(op_home, s.session_id), turn) == []


def test_a_function_provider_that_cannot_be_pickled_is_named_before_anything_runs(
    op_home: Path, pool: ProcessPoolExecutor
) -> None:
    lock = threading.Lock()

    def reply(request: LLMRequest) -> str:
        with lock:
            return "bug"

    rt = create_runtime(FunctionProvider(reply))
    with cell(rt), pytest.raises(UserError, match="'function' provider cannot be sent"):
        openprogram.map(classify, ["a"], executor=pool, progress=False)
    # on threads the same provider is fine: nothing crosses a process boundary
    with cell(rt):
        assert openprogram.map(classify, ["a"], progress=False) == ["bug"]


def test_a_spent_budget_sends_no_further_item_to_other_processes(
    op_home: Path, pool: ProcessPoolExecutor
) -> None:
    # the first item's share is the whole budget: its reply is cut to what is left of it
    rt = create_runtime(FunctionProvider(billed), budget=Budget(tokens=100, per="run"))
    with cell(rt) as (s, turn):
        results = openprogram.map(
            classify, ["a", "b", "c"], executor=pool, max_in_flight=1, progress=False
        )
    assert results[0] == "bug"
    assert all(isinstance(r, CancelledError) and "budget" in str(r) for r in results[1:])
    calls = items_under(reopen(op_home, s.session_id), turn)
    assert [c.status for c in calls] == ["completed", "cancelled", "cancelled"]
    assert "budget of 100 tokens per run is spent" in calls[1].metadata["error"]


def billed(request: LLMRequest) -> LLMResponse:
    """Replies "bug", billing the budget's own input estimate and a reply of 600 tokens, or
    of ``max_tokens`` when that is less (as a model does)."""
    used = Usage(estimate_tokens(request.messages), min(request.max_tokens or 600, 600))
    return LLMResponse("bug", usage=used)


def map_under_budget(tokens: int | None, executor: Any, window: int) -> tuple[list[str], int]:
    """16 items classified under ``Budget(tokens, per="run")``, ``window`` at a time: what
    each ended as (its result's type, its node's status, the error node under it) and the
    tokens the session recorded."""
    budget = Budget(tokens=tokens, per="run") if tokens else None
    rt = create_runtime(FunctionProvider(billed), budget=budget)
    items = [f"ticket {i:02d}" for i in range(16)]
    with cell(rt) as (s, turn):
        results = openprogram.map(
            classify, items, executor=executor, max_in_flight=window, progress=False
        )
    nodes = reopen(current_settings().home, s.session_id)
    errors = {n.caller: n.name for n in nodes if n.kind == "error"}
    ends = [
        f"{type(r).__name__} {c.status} {errors.get(c.id, '-')}"
        for r, c in zip(results, items_under(nodes, turn), strict=True)
    ]
    return ends, summarize(nodes)["tokens"]


def test_a_map_on_other_processes_spends_no_more_than_its_budget_as_on_threads(
    op_home: Path, pool: ProcessPoolExecutor
) -> None:
    _, one = map_under_budget(None, None, 1)
    one //= 16  # what one item spends: its input and a reply of 600 tokens
    assert one > 600 + 14  # an input of more than 14 tokens: 30 tokens fit no call
    tokens = 3 * one + 30  # three items, then 30 tokens that fit no call
    local, spent_here = map_under_budget(tokens, None, 2)  # which items: as threads go
    assert sorted(local) == ["BudgetExceeded error budget"] * 13 + ["str completed -"] * 3
    assert spent_here == 3 * one
    remote, spent_there = map_under_budget(tokens, pool, 2)
    assert spent_there <= tokens  # the items in flight together held their shares
    assert sorted(remote) == sorted(local)  # refused on its worker as on a thread
    ample, _ = map_under_budget(10**6, pool, 2)  # shares never starve an ample budget
    assert ample == ["str completed -"] * 16


def test_items_see_the_earlier_turns_as_a_local_call_would_on_threads_and_a_pool(
    rt: Runtime, op_home: Path, pool: ProcessPoolExecutor
) -> None:
    from openprogram.agentic_programming.prompt import sent_messages

    shapes = []
    for executor in (None, pool):
        with cell(rt) as (s, first):
            classify("the earlier ticket")
        with cell(rt, s.session_id) as (_, turn):
            openprogram.map(classify, ["a", "boom", "b"], executor=executor, progress=False)
        session = SessionStore(op_home).open(s.session_id)
        llms = [n for n in session.nodes() if n.kind == "llm" and n.turn == turn.turn]
        assert [n.metadata["context"]["turns"] for n in llms] == [[first.id], [first.id]]
        assert "the earlier ticket" in str(sent_messages(session, llms[0]))
        shapes.append(map_shape(session.nodes(), turn.id))
    assert shapes[0] == shapes[1]


def test_a_stopped_background_run_stops_its_map_and_records_every_item(op_home: Path) -> None:
    from openprogram.agentic_programming.stopping import using_stop_flag
    from openprogram.errors import RunStopped

    flag = threading.Event()  # what `%openprogram stop` sets for a background run
    rt = create_runtime(reply_doing(flag.set), backoff=0.0)
    with cell(rt) as (s, turn), using_stop_flag(flag), pytest.raises(RunStopped):
        run = MapRun(classify, [f"t{i}" for i in range(60)], max_in_flight=4, progress=False)
        run.run()
    calls = items_under(reopen(op_home, s.session_id), turn)
    assert [c.metadata["item"] for c in calls] == list(range(60))
    assert calls[-1].status == "cancelled" and calls[0].status == "completed"


def test_ctrl_c_cancels_what_has_not_started_records_every_item_and_interrupts(
    op_home: Path,
) -> None:
    import _thread

    rt = create_runtime(reply_doing(_thread.interrupt_main), backoff=0.0)  # a kernel interrupt
    with cell(rt) as (s, turn), pytest.raises(KeyboardInterrupt):
        openprogram.map(classify, [f"t{i}" for i in range(60)], max_in_flight=4, progress=False)
    nodes = reopen(op_home, s.session_id)
    calls = items_under(nodes, turn)
    assert [c.metadata["item"] for c in calls] == list(range(60))
    statuses = [c.status for c in calls]
    assert statuses[5] == "completed" and statuses[-1] == "cancelled"  # it ran on; not sent
    assert set(statuses) == {"completed", "cancelled"}
    assert "running" not in {n.status for n in nodes if n.id != turn.id}


@contextmanager
def sigint_at_line(traced: Callable[[Any], bool], nth: int) -> Iterator[list[int]]:
    """A real SIGINT raised as the main thread reaches the ``nth`` line it executes in the
    code objects ``traced`` picks (Ctrl-C pressed at that very point); yields the count of
    lines seen."""
    import signal
    import sys

    seen = [0]

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line":
            seen[0] += 1
            if seen[0] == nth:
                signal.raise_signal(signal.SIGINT)
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return local if traced(frame.f_code) else None

    sys.settrace(tracer)
    try:
        yield seen
    finally:
        sys.settrace(None)


def test_ctrl_c_at_any_line_of_a_running_map_records_every_item_once(op_home: Path) -> None:
    """A KeyboardInterrupt could land between any two lines of the map's loop (a result
    taken off the queue but not yet settled, a batch taken but not yet appended, a task
    submitted but not yet tracked) and lose that item, or hang the cell waiting for it: a
    first Ctrl-C must only stop the map, wherever it lands."""
    import openprogram.scale.executors as executors_module
    import openprogram.scale.run as run_module

    def in_the_map(code: Any) -> bool:  # what runs once the map is called, bar its first lines
        if code.co_filename == executors_module.__file__:
            return True
        return code.co_filename == run_module.__file__ and code.co_name not in (
            "map", "__init__", "run", "_ctrl_c_stops"
        )  # fmt: skip

    rt = create_runtime(FunctionProvider(lambda request: "bug"), backoff=0.0)
    items = [f"t{i}" for i in range(12)]
    with cell(rt), sigint_at_line(in_the_map, 0) as seen:
        openprogram.map(classify, items, max_in_flight=3, progress=False)
    lines = seen[0]  # the lines one whole map runs there (a second run may run a few less)
    for nth in range(1, lines, max(1, lines // 40)):
        with cell(rt) as (s, turn), sigint_at_line(in_the_map, nth) as seen:
            try:
                openprogram.map(classify, items, max_in_flight=3, progress=False)
                assert seen[0] < nth, f"Ctrl-C at line {nth} of the map was swallowed"
            except KeyboardInterrupt:
                pass
        calls = items_under(reopen(op_home, s.session_id), turn)
        assert [c.metadata["item"] for c in calls] == list(range(12)), f"Ctrl-C at line {nth}"
        assert {c.status for c in calls} <= {"completed", "cancelled"}


def test_a_second_ctrl_c_gives_up_on_what_runs_and_still_records_every_item(
    op_home: Path,
) -> None:
    import _thread

    class Watched(MapRun):
        def stop(self) -> None:
            super().stop()
            stopped.set()  # the marker: the first Ctrl-C was taken as a stop

    stopped, release = threading.Event(), threading.Event()

    def twice() -> None:  # item 5 runs on through the first Ctrl-C; the second gives up on it
        _thread.interrupt_main()
        assert stopped.wait(60)
        _thread.interrupt_main()
        release.wait(60)

    rt = create_runtime(reply_doing(twice), backoff=0.0)
    try:
        with cell(rt) as (s, turn), pytest.raises(KeyboardInterrupt):
            Watched(classify, [f"t{i}" for i in range(60)], max_in_flight=4, progress=False).run()
    finally:
        release.set()
    calls = items_under(reopen(op_home, s.session_id), turn)
    assert [c.metadata["item"] for c in calls] == list(range(60))
    assert calls[5].status == "cancelled"
    assert "abandoned while running" in calls[5].metadata["error"]
    assert calls[0].status == "completed" and calls[-1].status == "cancelled"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_second_ctrl_c_that_lands_in_a_destructor_still_gives_up(op_home: Path) -> None:
    """Python swallows an exception raised while a ``__del__`` runs (gitdb's and smmap's
    run during the loop): the second Ctrl-C must not be lost there."""
    import _thread
    import signal

    class Dying:
        def __del__(self) -> None:  # the handler runs here, inside raise_signal
            signal.raise_signal(signal.SIGINT)

    class Watched(MapRun):
        def stop(self) -> None:
            super().stop()
            stopped.set()

        def _show(self, *, final: bool = False) -> None:
            super()._show(final=final)
            if second.is_set() and not pressed:
                pressed.append(True)
                Dying()  # dropped at once: its destructor presses Ctrl-C again

    stopped, second, release = threading.Event(), threading.Event(), threading.Event()
    pressed: list[bool] = []

    def first_then_mark() -> None:
        _thread.interrupt_main()
        assert stopped.wait(60)
        second.set()
        release.wait(60)

    rt = create_runtime(reply_doing(first_then_mark), backoff=0.0)
    try:
        with cell(rt) as (s, turn), pytest.raises(KeyboardInterrupt):
            Watched(classify, [f"t{i}" for i in range(60)], max_in_flight=4, progress=False).run()
        gave_up_while_item_5_ran = not release.is_set()
    finally:
        release.set()
    assert pressed and gave_up_while_item_5_ran
    calls = items_under(reopen(op_home, s.session_id), turn)
    assert [c.metadata["item"] for c in calls] == list(range(60))
    assert calls[5].status == "cancelled"
    assert "abandoned while running" in calls[5].metadata["error"]


def test_adopted_nodes_get_fresh_ids_remapped_links_and_no_open_status() -> None:
    from openprogram.scale.merge import adopt

    top = make_call("function", "classify", caller="n_anchor", status="completed")
    llm = make_call("llm", "test", caller=top.id, status="completed")
    stray = make_call("function", "helper", caller=top.id)  # left running by a thread
    stray.predecessor = llm.id
    old = [top.id, llm.id, stray.id]
    nodes = adopt([top, llm, stray], anchor="n_anchor", index=7, worker="w:1", worker_name=None)
    assert not {n.id for n in nodes} & set(old)
    assert (llm.caller, stray.caller, stray.predecessor) == (top.id, top.id, llm.id)
    assert top.caller == "n_anchor" and top.metadata["item"] == 7 and "item" not in llm.metadata
    assert stray.status == "interrupted" and all(n.metadata["worker"] == "w:1" for n in nodes)


def test_a_price_set_in_the_kernel_prices_the_items_on_other_processes(
    op_home: Path, pool: ProcessPoolExecutor
) -> None:
    map_under_budget(10**6, pool, 2)  # the workers started before the price was set
    _, one = map_under_budget(None, None, 1)
    one //= 16  # what one item spends
    (op_home / "prices.json").write_text('{"function": {"input": 1.0, "output": 1.0}}')
    set_price("function", 10.0, 10.0)  # $10 a million tokens, set in this process only
    try:  # a budget of two items' worth at the price set here (20 at the file's)
        budget = Budget(usd=2 * one * 10 / 1e6, per="run")
        rt = create_runtime(FunctionProvider(billed), budget=budget)
        with cell(rt) as (s, _turn):
            results = openprogram.map(
                classify, ["a", "b", "c", "d"], executor=pool, max_in_flight=1, progress=False
            )
    finally:
        clear_prices()
    assert [r == "bug" for r in results] == [True, True, False, False]  # as the kernel prices
    total = summarize(reopen(op_home, s.session_id))
    assert total["cost"] == pytest.approx(total["tokens"] * 10 / 1e6)  # not at the file's $1


def unreadable_usage(request: LLMRequest) -> LLMResponse:
    """An offline provider of the user's that reports a count as text."""
    return LLMResponse("bug", usage=Usage("n/a", 600))  # type: ignore[arg-type]


def call_in(session_id: str, budget: Budget, reply: Any = billed) -> str:
    """One call in a cell of the session under ``budget``."""
    rt = create_runtime(FunctionProvider(reply), budget=budget)
    with cell(rt, session_id):
        return str(classify("the next cell", runtime=rt))


def next_call_goes(budget: Budget, session_id: str) -> str:
    """A call of the session under ``budget``, on a thread: what it returned, or that it
    still waits (for a share of the budget no one will release)."""
    done: dict[str, str] = {}

    def call() -> None:
        done["reply"] = call_in(session_id, budget)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(60)  # (a failure guard: it returns at once, or never)
    return done.get("reply", "still waiting")


def test_a_map_whose_results_cannot_be_counted_holds_nothing_after(
    op_home: Path, pool: ProcessPoolExecutor
) -> None:
    budget = Budget(tokens=3000)
    rt = create_runtime(FunctionProvider(unreadable_usage), budget=budget)
    with pytest.raises(ValueError, match="n/a"), cell(rt) as (s, _turn):
        openprogram.map(classify, ["a", "b"], executor=pool, max_in_flight=2, progress=False)
    assert next_call_goes(budget, s.session_id) == "bug"  # was: waits for ever


def test_a_map_on_other_processes_waits_while_a_call_elsewhere_holds_the_budget(
    op_home: Path, pool: ProcessPoolExecutor
) -> None:
    budget = Budget(tokens=3000)
    in_flight, map_waits, answer = threading.Event(), threading.Event(), threading.Event()

    def held_reply(request: LLMRequest) -> LLMResponse:
        in_flight.set()
        answer.wait()
        return billed(request)

    with cell(create_runtime(FunctionProvider(billed), budget=budget)) as (s, _turn):
        pass
    share = budget.share

    def watched(*args: Any) -> Any:  # the map found the budget held by the other call
        hold = share(*args)
        if hold is None:
            map_waits.set()
        return hold

    budget.share = watched  # type: ignore[method-assign]
    other = threading.Thread(target=call_in, args=(s.session_id, budget, held_reply))
    other.start()
    assert in_flight.wait(60)
    results: list[Any] = []

    def run_map() -> None:
        rt = create_runtime(FunctionProvider(billed), budget=budget)
        with cell(rt, s.session_id):
            results.extend(
                openprogram.map(
                    classify, ["x", "y"], executor=pool, max_in_flight=2, progress=False
                )
            )

    mapper = threading.Thread(target=run_map)
    mapper.start()
    assert map_waits.wait(60)
    answer.set()  # the other call ends: what it held is free
    mapper.join()
    other.join()
    assert results == ["bug", "bug"]  # was: both cancelled, "the budget ... is spent"
