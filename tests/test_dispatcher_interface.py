"""The dispatcher's interface (seed 003 §5, issue 22): what callers import from
``openprogram.agent.dispatcher``; the HEAD invariant (§3) checked on the modules' code;
the failure taxonomy of ``TurnResult``; tool approval rules asked through the question
channel, a refusal going back to the model as the tool's error."""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

import pytest

from openprogram import agentic_function, create_runtime, errors, session_context
from openprogram.agent import dispatcher as D
from openprogram.agent.dispatcher.error_path import classify
from openprogram.agent.dispatcher.types import REASONS
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.ask_user import using_ask_user_handler
from openprogram.context.policy import ContextPolicy
from openprogram.providers.base import LLMRequest, LLMResponse, ToolCall
from openprogram.providers.test import FunctionProvider

PACKAGE = Path(D.__file__).parent
HEAD_WRITERS = {"turn_writer.py", "forced_tool.py"}


@agentic_function
def shout(text: str) -> str:
    """Say ``text`` louder."""
    return f"{text.upper()}! (pid {os.getpid()})"


SURFACE = (  # seed 003 §5: what callers import from the package
    "process_user_turn",
    "TurnRequest",
    "TurnResult",
    "dispatch_forced_tool_call",
    "trigger_compaction",
    "approval_registry",
    "_wrap_agentic_runtime_block",
)


def test_the_whole_interface_comes_from_the_package_and_works(op_home: Path) -> None:
    """Every name of the seed's surface, imported from the package, in one session: a turn,
    an agentic function as a runtime block (its call runs in a child process, its frame
    under the tool node), a tool the approval rules hold, a compaction on demand."""
    from openprogram.agent.dispatcher import (
        TurnRequest,
        TurnResult,
        _wrap_agentic_runtime_block,
        approval_registry,
        dispatch_forced_tool_call,
        process_user_turn,
        trigger_compaction,
    )

    assert set(SURFACE) <= set(D.__all__)
    rt = create_runtime("test", context=ContextPolicy(turns=2))
    first = process_user_turn(TurnRequest(None, "hello", runtime=rt))
    assert isinstance(first, TurnResult) and first.status == "completed"

    block = _wrap_agentic_runtime_block(shout)
    with approval_registry.requiring("shout"):  # a forced call is the user's own: not asked
        assert approval_registry.active
        forced = dispatch_forced_tool_call(
            first.session_id, "shout", {"text": "hi"}, tools={"shout": block}
        )
    assert forced.status == "completed" and forced.text.startswith("HI! (pid ")
    assert forced.text != f"HI! (pid {os.getpid()})"  # it ran in another process
    session = default_db().open(first.session_id)
    assert forced.reply_node_id is not None
    (frame,) = [session.get(c) for c in session.children(forced.reply_node_id)]
    assert (frame.kind, frame.name, frame.output) == ("function", "shout", forced.text)

    summary = trigger_compaction(first.session_id, runtime=rt)
    assert summary is not None
    assert session.get(summary).metadata["covers"] == [first.user_node_id]


def head_moves(tree: ast.AST) -> list[str]:
    """The calls in ``tree`` that move a session's HEAD: ``append(..., turn_level=True)``,
    ``append(..., advance_head=True)``, ``set_head(...)``, ``update_session(head_id=...)``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        flags = {
            k.arg
            for k in node.keywords
            if k.arg in ("turn_level", "advance_head")
            and not (isinstance(k.value, ast.Constant) and k.value.value is False)
        }
        if name in ("set_head", "advance_head") or flags:
            found.append(f"{name}({', '.join(sorted(flags))})")
        elif name == "update_session" and any(k.arg == "head_id" for k in node.keywords):
            found.append("update_session(head_id=...)")
    return found


def test_only_turn_writer_and_forced_tool_move_head() -> None:
    """Seed 003 §3, on the code: every call in the package that can move HEAD."""
    movers = {}
    for path in sorted(PACKAGE.glob("*.py")):
        calls = head_moves(ast.parse(path.read_text()))
        if calls:
            movers[path.name] = calls
    assert set(movers) == HEAD_WRITERS, movers


def test_the_head_scan_sees_each_form() -> None:
    code = """
nodes.append(node, turn_level=True)
nodes.append(node, turn_level=flag)
session.append(call, advance_head=True)
session.set_head("n_1")
db.update_session(sid, head_id="n_1")
nodes.append(node)
nodes.append(node, turn_level=False)
"""
    assert len(head_moves(ast.parse(code))) == 5


@pytest.mark.parametrize(
    ("exc", "reason", "retryable"),
    [
        (KeyboardInterrupt(), "cancelled", False),
        (errors.RunStopped("stop"), "cancelled", False),
        (errors.ProcessRunCancelled("m:f", "stopped"), "cancelled", False),
        (errors.BudgetExceeded("over"), "budget", False),
        (
            errors.ProviderError("This model's maximum context length is 8192"),
            "context_overflow",
            True,
        ),
        (errors.TransientProviderError("429 slow down"), "provider", True),
        (errors.ProviderError("400 bad request"), "provider", False),
        (errors.ChoiceError(["a"], ["b"]), "provider", True),
        (errors.MissingCredentials("set OPENAI_API_KEY"), "user_error", False),
        (errors.ToolArgumentsError("bad"), "tool", False),
        (errors.ToolRefused("rm", "refused"), "tool", False),
        (errors.ProcessRunError("m:f", "ValueError"), "tool", False),
        (errors.NoProviderConfigured(), "user_error", False),
        (errors.RefLocked("locked"), "user_error", True),
        (errors.InternalError("invariant"), "bug", False),
        (ZeroDivisionError("oops"), "bug", False),
    ],
)
def test_every_error_maps_onto_the_taxonomy(
    exc: BaseException, reason: str, retryable: bool
) -> None:
    got = classify(exc)
    assert (got.reason, got.retryable) == (reason, retryable)
    assert got.reason in REASONS


def test_a_failed_turn_says_why_and_whether_to_retry() -> None:
    class SlowDown(errors.TransientProviderError):
        retry_after = 7

    def model(_request: LLMRequest) -> str:
        raise SlowDown("429 rate limited")

    rt = create_runtime(FunctionProvider(model), backoff=0.0, max_retries=0)
    result = D.process_user_turn(D.TurnRequest(None, "hello", runtime=rt))
    assert (result.status, result.reason, result.retryable, result.retry_after_s) == (
        "error",
        "provider",
        True,
        7.0,
    )
    reply = default_db().open(result.session_id).get(result.reply_node_id or "")
    assert reply.metadata["reason"] == "provider"
    ok = D.process_user_turn(
        D.TurnRequest(
            result.session_id, "again", runtime=create_runtime(FunctionProvider(lambda r: "hi"))
        )
    )
    assert (ok.status, ok.reason, ok.retryable) == ("completed", None, False)


# -- approval rules ------------------------------------------------------------
def test_a_refused_tool_goes_back_to_the_model_as_its_error() -> None:
    deleted: list[str] = []

    def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    def model(request: LLMRequest) -> LLMResponse:
        said = " ".join(str(m["content"]) for m in request.messages)
        if "ToolRefused" in said:
            return LLMResponse("I was not allowed to delete it.")
        if "deleted draft.txt" in said:
            return LLMResponse("Done.")
        return LLMResponse("", tool_calls=[ToolCall("c1", "delete_file", {"path": "draft.txt"})])

    asked: list[tuple[str, list[str] | None]] = []

    def user(answer: str) -> Any:
        def handler(question: str, choices: list[str] | None) -> str:
            asked.append((question, choices))
            return answer

        return handler

    rt = create_runtime(FunctionProvider(model), backoff=0.0)
    tools = {"delete_file": delete_file}
    with D.approval_registry.requiring("delete_*"), using_ask_user_handler(user("no")):
        refused = D.process_user_turn(
            D.TurnRequest(None, "delete my draft", runtime=rt, tools=tools)
        )
    assert refused.text == "I was not allowed to delete it." and deleted == []
    assert asked[0] == (
        'Run tool delete_file(path="draft.txt")? (/decline declines)',
        ["yes", "no", "always"],
    )

    session = default_db().open(refused.session_id)
    (tool_node,) = [n for n in session.nodes() if n.kind == "tool"]
    assert tool_node.status == "error"
    assert tool_node.metadata["error"] == (
        "ToolRefused: the call of tool 'delete_file' was not approved: refused"
    )
    (question,) = [n for n in session.nodes() if n.kind == "ask_user"]
    assert (question.caller, question.output) == (tool_node.id, "no")  # a node of the DAG

    with D.approval_registry.requiring("delete_*"), using_ask_user_handler(user("yes")):
        allowed = D.process_user_turn(
            D.TurnRequest(refused.session_id, "now yes", runtime=rt, tools=tools)
        )
    assert allowed.text == "Done." and deleted == ["draft.txt"]
    assert not D.approval_registry.active  # the block's rules are gone after it


def test_always_allows_later_calls_and_nobody_to_ask_refuses() -> None:
    registry = D.ApprovalRegistry()
    registry.require(lambda name, arguments: arguments.get("force") is True)
    answers = ["always"]
    rt = create_runtime(FunctionProvider(lambda r: "x"))
    with (
        session_context(runtime=rt),
        using_ask_user_handler(lambda q, c: answers.pop(0) if answers else None),
    ):
        registry.approve("push", {"force": False})  # no rule holds: not asked
        registry.approve("push", {"force": True})  # always
        registry.approve("push", {"force": True})  # not asked again
        with pytest.raises(errors.ToolRefused, match="no yes"):
            registry.approve("wipe", {"force": True})  # nobody answers: refused
    assert answers == []
    with pytest.raises(errors.UserError, match="an approval rule is"):
        registry.require(3)  # type: ignore[arg-type]
