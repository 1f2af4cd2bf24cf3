"""A synthetic but realistic session, and payload sizes, for tests and benchmarks of the DAG
views."""

from __future__ import annotations

import json
import random
from typing import Any

from openprogram.context.nodes import KIND_ROLE

_WORDS = ("survey", "topic", "sparse", "attention", "design", "experiments", "tokens", "cost")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _node(
    seq: int,
    turn: int,
    kind: str,
    name: str,
    *,
    caller: str | None,
    predecessor: str | None,
    status: str = "completed",
    input: Any = None,
    output: Any = None,
    **meta: Any,
) -> dict[str, Any]:
    return {
        "v": 1,
        "id": f"n_{seq:010x}",
        "seq": seq,
        "turn": turn,
        "role": KIND_ROLE.get(kind, "code"),
        "name": name,
        "input": input,
        "output": output,
        "caller": caller,
        "predecessor": predecessor,
        "metadata": {"kind": kind, "status": status, **meta},
        "created_at": 1_700_000_000.0 + seq,
    }


def sample_nodes(count: int = 200, *, seed: int = 0, fork_every: int = 0) -> list[dict[str, Any]]:
    """About ``count`` nodes: turns with nested functions, LLM calls, tools and questions.

    Every 7th turn ends in an error and, when ``fork_every`` > 0, every ``fork_every``-th
    turn also gets a sibling branch turn (a fork).  The last turn is left ``running``.
    Returns nodes in ``seq`` order; the HEAD is the last turn-level node of the trunk.
    """
    rng = random.Random(seed)
    nodes = [_node(0, 0, "root", "session", caller=None, predecessor=None)]
    head = nodes[0]["id"]
    turn = 0
    while len(nodes) < count:
        turn += 1
        seq = len(nodes)
        cell = f"result_{turn} = research({_text(rng, 4)!r})\n" + _text(rng, 12)
        t = _node(seq, turn, "turn", f"cell {turn}", caller=None, predecessor=head, input=cell)
        nodes.append(t)
        prev: str | None = None
        fn = _node(
            len(nodes),
            turn,
            "function",
            rng.choice(("survey_topic", "design_experiments", "write_section")),
            caller=t["id"],
            predecessor=None,
            input={"topic": _text(rng, 6), "depth": rng.randint(1, 3)},
            output=_text(rng, 40),
            doc="Survey the topic.\n\n" + _text(rng, 30),
            duration_ms=rng.randint(200, 9000),
        )
        nodes.append(fn)
        for step in range(rng.randint(1, 4)):
            if len(nodes) >= count:
                break
            kind = rng.choice(("llm", "llm", "tool", "ask_user"))
            status = {"ask_user": "answered"}.get(kind, "completed")
            extra: dict[str, Any] = {"duration_ms": rng.randint(50, 4000)}
            if kind == "llm":
                extra |= {
                    "model": "gpt-4o-mini",
                    "usage": {"input_tokens": rng.randint(100, 4000), "output_tokens": 200},
                    "cost": 0.0004,
                    "messages": [
                        {"role": "system", "content": fn["metadata"]["doc"]},
                        {"role": "user", "content": _text(rng, 20)},
                    ],
                }
            child = _node(
                len(nodes),
                turn,
                kind,
                {"llm": "exec", "tool": "search", "ask_user": "ask_user"}[kind],
                caller=fn["id"],
                predecessor=prev,
                status=status,
                input=_text(rng, 10) + ("?" if kind == "ask_user" else ""),
                output=_text(rng, 30),
                **extra,
            )
            nodes.append(child)
            prev = child["id"]
            if step == 0 and turn % 7 == 0:
                child["metadata"] |= {"status": "error", "error": "ValueError: bad pick"}
                child["metadata"]["traceback"] = "Traceback (most recent call last):\n  ..."
        if fork_every and turn % fork_every == 0 and len(nodes) < count:
            nodes.append(
                _node(len(nodes), turn, "turn", f"cell {turn}′", caller=None, predecessor=head)
            )
        head = t["id"]
    last = next(n for n in reversed(nodes) if n["metadata"]["kind"] == "turn")
    last["metadata"]["status"] = "running"
    return nodes[:count]


def payload_bytes(value: Any) -> int:
    """Size of ``value`` as a Jupyter message carries it (UTF-8 JSON, default separators)."""
    return len(json.dumps(value, ensure_ascii=False).encode())
