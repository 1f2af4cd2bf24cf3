"""The one node type of the session DAG: :class:`Call`.

A ``Call`` is a user turn, an ``@agentic_function`` run, one LLM exec, a tool call or a
question to the user.  Two edges link nodes: ``predecessor`` (the conversation chain, turn
after turn, or the previous step inside a frame) and ``caller`` (which frame made the
call).  ``seq`` is allocated by the store and is the only time order.

What a node *is* lives in ``metadata["kind"]``; its lifecycle in ``metadata["status"]``.
Nodes round-trip through JSON with a format version (``v``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from openprogram.context.secrets import is_secret_key
from openprogram.errors import NodeFormatError

FORMAT_VERSION: Final = 1

Role = Literal["user", "llm", "code"]
ROLES: Final[tuple[str, ...]] = ("user", "llm", "code")
ROLE_LETTER: Final[dict[str, str]] = {"user": "u", "llm": "l", "code": "c"}

KINDS: Final[tuple[str, ...]] = (
    "root",  # the first node of every session
    "turn",  # a notebook cell / a chat user message / a CLI task
    "reply",  # a chat assistant message
    "function",  # one @agentic_function run
    "llm",  # one runtime.exec
    "tool",  # a tool call made on the model's behalf
    "ask_user",  # a question to the user
    "error",  # a stand-alone error record
)
KIND_ROLE: Final[dict[str, str]] = {
    "root": "user",
    "turn": "user",
    "reply": "llm",
    "function": "code",
    "llm": "llm",
    "tool": "code",
    "ask_user": "user",
    "error": "code",
}

RUNNING: Final = "running"
COMPLETED: Final = "completed"
ERROR: Final = "error"
CANCELLED: Final = "cancelled"
INTERRUPTED: Final = "interrupted"
AWAITING: Final = "awaiting"
ANSWERED: Final = "answered"
UNANSWERED: Final = "unanswered"
STATUSES: Final[tuple[str, ...]] = (
    RUNNING,
    COMPLETED,
    ERROR,
    CANCELLED,
    INTERRUPTED,
    AWAITING,
    ANSWERED,
    UNANSWERED,
)

# seqs and turns are counters: beyond this (or negative) a number read from disk is damage
MAX_COUNT: Final = 10**15

OPEN_STATUSES: Final = frozenset({RUNNING, AWAITING})
TERMINAL_STATUSES: Final = frozenset(
    {COMPLETED, ERROR, CANCELLED, INTERRUPTED, ANSWERED, UNANSWERED}
)

MAX_STRING: Final = 200_000  # characters kept of one string value in a node
_PLAIN: Final = frozenset({str, int, bool})  # returned as is by ``sanitize`` (fast path)


# node ids: 40 random bits from a generator seeded from the OS (again in a forked child),
# not a getrandom() system call per node
_ids = random.Random(os.urandom(16))
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _ids.seed(os.urandom(16)))


def new_id(prefix: str = "n") -> str:
    """A short random node id, e.g. ``n_3f9c2a71d0``."""
    return f"{prefix}_{_ids.getrandbits(40):010x}"


def sanitize(value: Any, *, _depth: int = 0) -> Any:
    """Make ``value`` JSON-safe: containers recursed, other objects ``repr``'d.

    Values under keys that look like credentials are replaced by ``"***"`` so that a
    secret passed as an argument never lands in a session.
    """
    kind = type(value)
    if value is None or kind is bool or kind is int:
        return value
    if kind is str:
        return value if len(value) <= MAX_STRING else value[:MAX_STRING] + "…[truncated]"
    if kind is dict and _depth <= 12:  # a call's inputs (before the isinstance tests)
        try:
            return _sanitize_mapping(value, _depth)
        except Exception:  # a key of a hostile str subclass
            return _safe_repr(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, bool | int):
        return int(value)  # int subclasses (enums...): plain JSON numbers
    if isinstance(value, str):
        return sanitize(str.__str__(value))
    if _depth > 12:
        return "…[nested too deep]"
    try:
        return _sanitize_object(value, _depth)
    except Exception:  # a hostile object (__getattr__, items(), __iter__ raising…)
        return _safe_repr(value)


def _sanitize_mapping(value: Mapping[Any, Any], _depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in value.items():
        key = k if type(k) is str else str(k) if isinstance(k, str) else _safe_repr(k)
        if v is not None and is_secret_key(key):
            out[key] = "***"
        elif v is None or type(v) in _PLAIN:
            out[key] = v if type(v) is not str or len(v) <= MAX_STRING else sanitize(v)
        else:
            out[key] = sanitize(v, _depth=_depth + 1)
    return out


def _sanitize_object(value: Any, _depth: int) -> Any:
    if isinstance(value, Mapping):
        return _sanitize_mapping(value, _depth)
    if isinstance(value, list | tuple | set | frozenset):
        return [sanitize(v, _depth=_depth + 1) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sanitize(dataclasses.asdict(value), _depth=_depth + 1)
    try:
        dump = getattr(value, "model_dump", None)  # pydantic models
        if callable(dump):
            return sanitize(dump(mode="json"), _depth=_depth + 1)
    except Exception:
        pass
    return _safe_repr(value)


def _safe_repr(value: Any) -> str:
    """``repr(value)`` cut to 2,000 characters, or a note when it raises."""
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__ must not leave the node unfinished
        text = f"<{type(value).__qualname__} (repr failed: {type(exc).__name__})>"
    return text if len(text) <= 2000 else text[:2000] + "…"


@dataclass
class Call:
    """One node of the session DAG (JSON round-trippable, see :meth:`to_dict`)."""

    id: str
    role: str
    name: str
    seq: int = -1
    turn: int = 0
    input: Any = None
    output: Any = None
    caller: str | None = None
    predecessor: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)

    @property
    def kind(self) -> str:
        return str(self.metadata.get("kind", "function"))

    @property
    def status(self) -> str:
        return str(self.metadata.get("status", COMPLETED))

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES

    def copy(self) -> Call:
        """A copy sharing nothing mutable with this node (input, output and metadata copied
        all the way down): what a store hands out, so a reader's edits stay its own and a
        node read mid-call does not change under the reader as the call goes on."""
        new = object.__new__(Call)
        state = new.__dict__
        state.update(self.__dict__)
        if type(self.input) not in _ATOMS:
            state["input"] = _copied(self.input)
        if type(self.output) not in _ATOMS:
            state["output"] = _copied(self.output)
        state["metadata"] = _copied(self.metadata)
        return new

    def to_dict(self) -> dict[str, Any]:
        return {
            "v": FORMAT_VERSION,
            "id": self.id,
            "seq": self.seq,
            "turn": self.turn,
            "role": self.role,
            "name": self.name,
            "input": self.input,
            "output": self.output,
            "caller": self.caller,
            "predecessor": self.predecessor,
            "metadata": self.metadata,
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Call:
        if not isinstance(data, dict):
            raise NodeFormatError(f"a node must be a JSON object, got {type(data).__name__}")
        version = data.get("v", FORMAT_VERSION)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise NodeFormatError(
                f"node format version {version!r} is newer than this openprogram "
                f"understands ({FORMAT_VERSION}); upgrade openprogram"
            )
        try:
            node = cls(
                id=_node_id(data),
                role=_str(data, "role"),
                name=_str(data, "name"),
                seq=_int(data, "seq"),
                turn=_int(data, "turn", 0),
                input=data.get("input"),
                output=data.get("output"),
                caller=_opt_str(data, "caller"),
                predecessor=_opt_str(data, "predecessor"),
                metadata=dict(data.get("metadata") or {}),
                created_at=float(data.get("created_at", 0.0)),
            )
        except (TypeError, ValueError, OverflowError) as exc:
            raise NodeFormatError(str(exc)) from exc
        if node.role not in ROLES:
            raise NodeFormatError(f"unknown role {node.role!r}")
        for key in ("kind", "status"):
            if type(node.metadata.get(key, "")) is not str:
                raise NodeFormatError(f"metadata {key!r} must be a string")
        return node


_ATOMS: Final = frozenset({str, int, float, bool, type(None)})  # immutable JSON values


def _copied(value: Any) -> Any:
    """A copy of a JSON-like value (what a node holds): dicts and lists rebuilt, immutable
    values shared; anything else deep-copied."""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _ATOMS else _copied(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _ATOMS else _copied(v) for v in value]
    if kind in _ATOMS:
        return value
    return copy.deepcopy(value)


def make_call(
    kind: str,
    name: str,
    *,
    input: Any = None,
    caller: str | None = None,
    predecessor: str | None = None,
    status: str = RUNNING,
    **metadata: Any,
) -> Call:
    """Build a new node of ``kind`` (role derived from the kind, input sanitized)."""
    meta = {"kind": kind, "status": status, **metadata}
    return Call(
        id=new_id(),
        role=KIND_ROLE.get(kind, "code"),
        name=name,
        input=sanitize(input),
        caller=caller,
        predecessor=predecessor,
        metadata=meta,
    )


def _str(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise NodeFormatError(f"field {key!r} must be a non-empty string, got {value!r}")
    return value


_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def _node_id(data: dict[str, Any]) -> str:
    """The id, which names the node's file: a short safe name, never a path."""
    value = _str(data, "id")
    if _ID.fullmatch(value) is None:
        raise NodeFormatError(
            f"field 'id' must be a short name of letters, digits, _ or -: {value[:80]!r}"
        )
    return value


def _opt_str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise NodeFormatError(f"field {key!r} must be a string or null, got {value!r}")
    return value


def _int(data: dict[str, Any], key: str, default: int | None = None) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_COUNT:
        raise NodeFormatError(
            f"field {key!r} must be an integer from 0 to {MAX_COUNT:.0e}, got {value!r:.40}"
        )
    return value
