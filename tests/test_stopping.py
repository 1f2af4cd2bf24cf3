"""Stopping a run (``agentic_programming/stopping.py``): a stop asked for lands before the
next LLM call, a kill ends the wait for a call in flight at once, and outside a run that can
be stopped a call is a plain call on the caller's thread."""

from __future__ import annotations

import threading

import pytest

from openprogram import create_runtime
from openprogram.agentic_programming.stopping import (
    check_stop,
    killable,
    raise_in_thread,
    stop_requested,
    using_stop_flag,
)
from openprogram.errors import RunKilled, RunStopped
from openprogram.providers.test import TestProvider


def test_a_stop_asked_for_lands_before_the_next_llm_call() -> None:
    provider = TestProvider()
    runtime = create_runtime(provider, backoff=0.0)
    stop = threading.Event()
    with using_stop_flag(stop):
        runtime.exec("first")
        assert not stop_requested()
        stop.set()
        assert stop_requested()
        with pytest.raises(RunStopped, match="stopped by request"):
            runtime.exec("second")
    assert len(provider.requests) == 1  # the second call was never sent
    check_stop()  # outside the run: nothing to stop


def test_a_kill_wins_over_a_stop() -> None:
    stop, kill = threading.Event(), threading.Event()
    stop.set()
    kill.set()
    with using_stop_flag(stop, kill), pytest.raises(RunKilled):
        check_stop()


def test_outside_a_run_a_call_runs_on_the_callers_thread() -> None:
    assert killable(threading.get_ident) == threading.get_ident()


def test_a_kill_ends_the_wait_for_a_call_in_flight_and_errors_pass_through() -> None:
    stop, kill, release = threading.Event(), threading.Event(), threading.Event()

    def blocked_in_a_read() -> str:
        kill.set()  # the user kills the run while the provider call blocks
        release.wait()
        return "too late"

    def failing() -> str:
        raise ValueError("the provider said no")

    with using_stop_flag(stop, kill):
        try:
            with pytest.raises(RunKilled, match="call in flight abandoned"):
                killable(blocked_in_a_read)
        finally:
            release.set()
        kill.clear()
        assert killable(lambda: threading.current_thread().name) == "openprogram-call"
        with pytest.raises(ValueError, match="the provider said no"):
            killable(failing)


def test_an_exception_is_raised_in_another_thread_at_its_next_instruction() -> None:
    running, release = threading.Event(), threading.Event()
    caught: list[BaseException] = []

    def work() -> None:
        try:
            while not release.is_set():
                running.set()
                release.wait(0.01)  # Python instructions between waits: where it lands
        except RunKilled as exc:
            caught.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    running.wait()
    try:
        assert raise_in_thread(thread, RunKilled)
        thread.join()
    finally:
        release.set()
        thread.join()
    assert len(caught) == 1 and isinstance(caught[0], RunKilled)
    assert not raise_in_thread(thread, RunKilled)  # the thread is gone
