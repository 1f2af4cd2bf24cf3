"""The context policy: how much of the session's earlier turns an ``exec`` sees.

Pure: no I/O.  The rules, as documented in the README ("What a call sees"):

* at most ``turns`` earlier turns (default 20), newest kept;
* at most ``tokens`` estimated tokens of history (default 4,000), trimmed oldest-first:
  walking back from the newest turn, the first turn that does not fit ends the history;
* turns that failed (``error``, ``cancelled``, ``interrupted``) are left out unless
  ``failed=True``;
* every message of a turn is clipped at 4,000 characters (``render.MAX_MESSAGE_CHARS``);
* when the provider says the prompt does not fit the model's context window, the call is
  sent once more with half the history's tokens (``overflow="shrink"``, the default; see
  :func:`shrunk`); ``overflow="raise"`` leaves it to the caller (a chat turn compacts).

A policy is set in layers; the narrowest one that sets a field wins: the call
(``runtime.exec(x, context=ContextPolicy(turns=0))``), then the function
(``@agentic_function(context=...)``, the innermost enclosing function that sets it), then
the runtime (a notebook's ``%config OpenProgramMagics.history_turns``), then the defaults.

Tokens are *estimated* high (characters / 3, plus 4 per message; English averages about 4
characters a token), the same estimate the budget uses; no tokenizer is downloaded.  Each
``llm`` node records what it was given in ``metadata["context"]`` (see
:func:`select_history`) and its own messages only; the full prompt is rebuilt on demand by
:func:`openprogram.context.render.full_messages`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final

from openprogram.context.nodes import CANCELLED, ERROR, INTERRUPTED, Call

DEFAULT_TURNS: Final = 20
DEFAULT_TOKENS: Final = 4000
FAILED_STATUSES: Final = frozenset({ERROR, CANCELLED, INTERRUPTED})
OVERFLOW_RULES: Final = ("shrink", "raise")
MAX_SKIPPED: Final = 200  # failed turns stepped over before the walk gives up

Message = dict[str, Any]


def estimate_tokens(messages: list[Message], tools: list[dict[str, Any]] | None = None) -> int:
    """Tokens of ``messages`` and the ``tools`` offered (servers bill their definitions as
    input), estimated high (characters / 3, plus 4 per message; no tokenizer needed).  The
    budget (:mod:`openprogram.usage.budget`) uses it too."""
    specs = sum(-(-len(json.dumps(t, default=str)) // 3) for t in tools or ())
    return specs + sum(-(-len(str(m.get("content", ""))) // 3) + 4 for m in messages)


@dataclass(frozen=True)
class ContextPolicy:
    """What an ``exec`` sees of earlier turns; ``None`` fields inherit from the wider layer.

    ``turns``: at most this many earlier turns (0: none).  ``tokens``: at most this many
    estimated tokens of history.  ``failed``: include turns that failed.  ``overflow``:
    ``"shrink"`` (one retry with half the history when the model's context overflows) or
    ``"raise"``.
    """

    turns: int | None = None
    tokens: int | None = None
    failed: bool | None = None
    overflow: str | None = None

    def __post_init__(self) -> None:
        for name in ("turns", "tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"ContextPolicy.{name} must be an int or None, got {value!r}")
            if value is not None and value < 0:
                raise ValueError(f"ContextPolicy.{name} must be ≥ 0, got {value}")
        if self.failed is not None and not isinstance(self.failed, bool):
            raise TypeError(f"ContextPolicy.failed must be a bool or None, got {self.failed!r}")
        if self.overflow not in (None, *OVERFLOW_RULES):
            raise ValueError(
                f"ContextPolicy.overflow must be 'shrink' or 'raise', got {self.overflow!r}"
            )

    def over(self, wider: ContextPolicy | None) -> ContextPolicy:
        """This policy, with the fields it leaves unset taken from ``wider``."""
        if wider is None:
            return self
        mine, theirs = self.to_dict(), wider.to_dict()
        return ContextPolicy(**{**theirs, **mine})

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set (what a node's metadata keeps)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in values.items() if v is not None}

    @classmethod
    def from_dict(cls, data: Any) -> ContextPolicy | None:
        """A policy stored in a node's metadata; None when absent or not a valid policy."""
        if not isinstance(data, Mapping):
            return None
        try:
            return cls(
                turns=data.get("turns"),
                tokens=data.get("tokens"),
                failed=data.get("failed"),
                overflow=data.get("overflow"),
            )
        except (TypeError, ValueError):
            return None


DEFAULT_POLICY: Final = ContextPolicy(
    turns=DEFAULT_TURNS, tokens=DEFAULT_TOKENS, failed=False, overflow="shrink"
)


def effective(*layers: ContextPolicy | None) -> ContextPolicy:
    """Merge ``layers`` narrowest first, over :data:`DEFAULT_POLICY` (every field set)."""
    out = DEFAULT_POLICY
    for layer in reversed(layers):
        if layer is not None:
            out = layer.over(out)
    return out


def shrunk(
    call: ContextPolicy | None, record: Mapping[str, Any], keep: float = 0.5
) -> ContextPolicy | None:
    """The call's policy for its one retry after a context overflow: the history it was
    sent (``record``, what :meth:`History.record` kept) cut to ``keep`` of its tokens and at
    least one turn fewer; None when the policy said ``overflow="raise"`` or no history was
    sent.  The retry itself says ``overflow="raise"``: a second overflow is an error."""
    used = ContextPolicy.from_dict(record.get("policy"))
    turns = len(record.get("turns") or ())
    if used is None or used.overflow == "raise" or not turns:
        return None
    tokens = int(int(record.get("tokens") or 0) * min(max(keep, 0.0), 1.0))
    return ContextPolicy(tokens=tokens, turns=turns - 1, overflow="raise").over(call)


def history_share(history: int, estimated: int, room: int, sent: int) -> float:
    """The share of a prompt's history (``history`` of its ``estimated`` tokens) to keep
    so that it fits ``room`` tokens when the server counted ``sent``: the excess is cut
    from the history in estimate units, with a tenth more for the estimate's error."""
    if history <= 0 or sent <= 0:
        return 0.0
    cut = (sent - room) / sent * estimated * 1.1
    return max(0.0, (history - cut) / history)


def frame_policy(chain: list[Call]) -> ContextPolicy | None:
    """The policy the enclosing functions set (``chain`` innermost first), merged."""
    merged: ContextPolicy | None = None
    for node in chain:
        found = ContextPolicy.from_dict(node.metadata.get("context"))
        if found is not None:
            merged = found if merged is None else merged.over(found)
    return merged


@dataclass
class History:
    """The earlier turns chosen for one prompt, rendered, with what was left out."""

    turns: list[Call] = field(default_factory=list)  # oldest first
    messages: list[Message] = field(default_factory=list)
    tokens: int = 0
    failed: list[str] = field(default_factory=list)  # ids left out because they failed
    over_budget: list[str] = field(default_factory=list)  # the turn that did not fit
    earlier: bool = False  # the chain goes on past what was looked at

    def record(self, policy: ContextPolicy) -> dict[str, Any]:
        """What an ``llm`` node keeps: enough to rebuild the prompt and to show the choice."""
        out: dict[str, Any] = {
            "turns": [t.id for t in self.turns],
            "tokens": self.tokens,
            "policy": policy.to_dict(),
        }
        left = {"failed": self.failed, "over_budget": self.over_budget}
        left = {k: v for k, v in left.items() if v}
        if left:
            out["left_out"] = left
        if self.earlier:
            out["earlier"] = True
        return out


def select_history(
    lookup: Callable[[str], Call | None],
    before: str | None,
    policy: ContextPolicy,
    render: Callable[[Call], list[Message]],
    summary_for: Callable[[str], Call | None] | None = None,
) -> History:
    """Walk the conversation chain back from ``before`` and keep what ``policy`` allows.

    ``render`` turns one turn-level node into its messages (``render.turn_messages``).
    ``summary_for(node_id)``: the summary node standing for that node and all before it
    (compaction); the walk takes the summary in its place and stops there.
    """
    max_turns = policy.turns if policy.turns is not None else DEFAULT_TURNS
    budget = policy.tokens if policy.tokens is not None else DEFAULT_TOKENS
    out = History()
    chosen: list[tuple[Call, list[Message]]] = []
    seen: set[str] = set()
    node_id = before
    while node_id is not None and node_id not in seen:
        node = lookup(node_id)
        if node is None or node.kind == "root":
            break
        if len(chosen) >= max_turns or len(out.failed) >= MAX_SKIPPED:
            out.earlier = True
            break
        summary = summary_for(node_id) if summary_for is not None else None
        if summary is not None:  # it stands for this node and everything before it
            node = summary
        seen.add(node.id)
        node_id = None if summary is not None else node.predecessor
        if not policy.failed and node.status in FAILED_STATUSES:
            out.failed.append(node.id)
            continue
        messages = render(node)
        cost = estimate_tokens(messages)
        if out.tokens + cost > budget:
            out.over_budget.append(node.id)
            older = lookup(node_id) if node_id is not None else None
            out.earlier = summary is not None or (older is not None and older.kind != "root")
            break
        out.tokens += cost
        chosen.append((node, messages))
    out.failed.reverse()
    chosen.reverse()
    out.turns = [node for node, _ in chosen]
    out.messages = [m for _, messages in chosen for m in messages]
    return out
