"""Stage 1 of a chat turn is ``session_context`` (issue 37 item 3): one place mints and
opens a session, and every entry point — the dispatcher, a forced tool call, the process
runner — goes through it instead of creating the session itself."""

from __future__ import annotations

import ast
import inspect
import subprocess
from pathlib import Path
from typing import Any

from openprogram import create_runtime, session_context
from openprogram.agent import dispatcher as D
from openprogram.agent.session_db import default_db
from openprogram.store.vars import get_store

ROOT = Path(__file__).resolve().parent.parent
OWNER = ROOT / "openprogram" / "store" / "session" / "context.py"
# the store itself: where ``create_session`` is defined (and what it calls internally)
STORE_DEFINITIONS = {"openprogram/store/session/store.py"}


def session_creators() -> dict[str, int]:
    """Every call of ``create_session`` in the engine and the extension, by file."""
    found: dict[str, int] = {}
    for package in ("openprogram", "openprogram_magics"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in STORE_DEFINITIONS:
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "create_session"
                ):
                    found[rel] = found.get(rel, 0) + 1
    return found


def test_only_session_context_creates_a_session() -> None:
    assert session_creators() == {OWNER.relative_to(ROOT).as_posix(): 1}


def test_session_context_is_entered_with_the_session_not_with_a_writer() -> None:
    """The node writer is the one ``session_context`` makes: no caller hands its own in."""
    assert "writer" not in inspect.signature(session_context).parameters


def commits(session_id: str) -> list[str]:
    path = default_db().open(session_id).path
    log = subprocess.run(
        ["git", "-C", str(path), "log", "--format=%s"], capture_output=True, text=True, check=True
    )
    return log.stdout.splitlines()


def test_a_chat_turn_in_a_new_session_is_one_turn_of_it_from_its_first_event(
    op_home: Path,
) -> None:
    """The listener hears ``user`` inside the turn (its session installed), and the message,
    the reply and what hangs under them are the session's one turn commit."""
    heard: list[tuple[str, Any]] = []

    def listen(event: dict[str, Any]) -> None:
        writer = get_store()
        heard.append((event["type"], writer.session_id if writer is not None else None))

    rt = create_runtime("test")
    result = D.process_user_turn(D.TurnRequest(None, "hello there", runtime=rt, on_event=listen))

    assert result.created and result.session_id.startswith("chat_")
    assert heard[0] == ("user", result.session_id)
    assert commits(result.session_id) == [
        "turn 1: hello there",
        f"session {result.session_id} created",
    ]
    session = default_db().open(result.session_id)
    assert session.get(result.user_node_id).kind == "turn"
    assert result.reply_node_id is not None
    assert session.get(result.reply_node_id).caller == result.user_node_id


def test_a_forced_call_in_a_new_session_opens_it_the_same_way(op_home: Path) -> None:
    result = D.dispatch_forced_tool_call(None, "double", {"n": 21}, tools={"double": double})

    assert result.created and result.session_id.startswith("chat_")
    assert result.text == "42"
    assert commits(result.session_id) == [
        "turn 1: /call double(n=21)",
        f"session {result.session_id} created",
    ]


def double(n: int) -> int:
    """Twice ``n``."""
    return 2 * n
