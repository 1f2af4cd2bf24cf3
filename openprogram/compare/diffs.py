"""What changed between two paired lines, call by call, and why the answers moved.

For each :class:`~openprogram.compare.pairing.Pair` a :class:`Row`: the docstring diff (a
``function`` node's ``doc``; ``doc_hash``/``source_hash`` say whether its docstring or its
code changed), the call's own rendered prompt diff (an ``llm`` node's ``messages``: the
docstring, the frame's earlier steps and the content, without the earlier turns), the
output diff, and the token / latency / cost deltas.  Each changed answer gets a cause:

- ``docstring`` — its function's docstring changed ("the docstring of `triage` changed,
  and this answer changed with it");
- ``code`` / ``prompt`` — the function's code, or the call's prompt (its input), changed;
- ``model`` — same prompt, another model or provider;
- ``history`` — same prompt of its own, but an earlier turn it was sent (its
  ``metadata.context.turns``) answered differently;
- ``nondeterministic`` — same prompt, same model, same earlier turns, another answer.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from openprogram.compare.pairing import Pair, build_trees, pair_lines
from openprogram.compare.sides import Nodes, Side
from openprogram.context.nodes import Call
from openprogram.store.session.index import usage_of

MAX_DIFF_LINES: Final = 40
MAX_LINE: Final = 200
CALL_KINDS: Final = ("function", "llm", "tool", "ask_user", "error")


@dataclass
class Row:
    pair: Pair
    path: str  # "turn 3 › handle › triage › llm 1"
    changed: bool = False  # its answer (output) differs
    cause: str = ""  # see the module docstring
    note: str = ""  # the sentence that says what changed and why
    doc_diff: list[str] = field(default_factory=list)
    prompt_diff: list[str] = field(default_factory=list)
    input_diff: list[str] = field(default_factory=list)
    output_diff: list[str] = field(default_factory=list)
    cell_diff: list[str] = field(default_factory=list)
    deltas: dict[str, tuple[float, float]] = field(default_factory=dict)
    doc_changed: bool = False

    @property
    def state(self) -> str:
        return self.pair.state

    @property
    def interesting(self) -> bool:
        return bool(
            self.pair.state != "paired"
            or self.changed
            or self.doc_diff
            or self.prompt_diff
            or self.cell_diff
            or self.input_diff
            or self.note
        )


@dataclass
class Totals:
    calls: int = 0
    llm_calls: int = 0
    tokens: int = 0
    cost: float = 0.0
    latency_ms: float = 0.0


@dataclass
class Report:
    a: Side
    b: Side
    shared: int  # turns both lines start with (left out)
    rows: list[Row]
    totals: tuple[Totals, Totals]
    findings: list[str]

    def count(self, state: str) -> int:
        return sum(1 for r in self.rows if r.state == state)

    @property
    def changed(self) -> list[Row]:
        return [r for r in self.rows if r.state == "paired" and r.changed]

    def to_json(self) -> dict[str, Any]:
        """The report as data (what a widget draws side by side)."""
        return {
            "v": 1,
            "a": self.a.label,
            "b": self.b.label,
            "shared": self.shared,
            "findings": self.findings,
            "counts": {s: self.count(s) for s in ("paired", "added", "removed")},
            "rows": [
                {
                    "path": r.path,
                    "state": r.state,
                    "kind": r.pair.node.kind,
                    "a": r.pair.a.id if r.pair.a else None,
                    "b": r.pair.b.id if r.pair.b else None,
                    "changed": r.changed,
                    "cause": r.cause,
                    "note": r.note,
                    "doc_diff": r.doc_diff,
                    "prompt_diff": r.prompt_diff,
                    "output_diff": r.output_diff,
                    "deltas": {k: list(v) for k, v in r.deltas.items()},
                }
                for r in self.rows
                if r.interesting
            ],
        }


def compare(index: Nodes, a: Side, b: Side, shared: int = 0) -> Report:
    """Pair ``a`` and ``b`` (their turns and every call under them) and diff each pair."""
    trees_a = build_trees(index.all, a.turns)
    trees_b = build_trees(index.all, b.turns)
    pairs = pair_lines(trees_a, trees_b)
    rows: list[Row] = []
    counters: dict[tuple[int | None, str], int] = {}
    changed_turns: set[str] = set()  # turn ids (either side) where an answer changed
    for pair in pairs:
        parent = rows[pair.parent] if pair.parent is not None else None
        rows.append(_row(pair, parent, rows, counters, changed_turns, index))
    totals = (_totals(r.pair.a for r in rows), _totals(r.pair.b for r in rows))
    return Report(a, b, shared, rows, totals, findings(rows))


def _row(
    pair: Pair,
    parent: Row | None,
    rows: list[Row],
    counters: dict[tuple[int | None, str], int],
    changed_turns: set[str],
    index: Nodes,
) -> Row:
    node = pair.node
    label = _label(node, pair.parent, counters)
    row = Row(pair, f"{parent.path} › {label}" if parent else label)
    if pair.a is None or pair.b is None:
        return row
    a, b = pair.a, pair.b
    kind = node.kind
    row.deltas = _deltas(a, b)
    if kind in ("turn", "reply"):
        row.cell_diff = diff_lines(_cell_text(a), _cell_text(b))
        row.changed = _text(a.output) != _text(b.output)
        return row
    if kind == "llm":
        _llm_row(row, a, b, _enclosing(rows, pair), changed_turns)
    else:
        _call_row(row, a, b)
    if row.changed:
        changed_turns.add(index.turn_of(a).id)
        changed_turns.add(index.turn_of(b).id)
    return row


def _label(node: Call, parent: int | None, counters: dict[tuple[int | None, str], int]) -> str:
    if node.kind in ("turn", "reply"):
        return f"turn {node.turn}" if node.kind == "turn" else f"reply (turn {node.turn})"
    if node.kind == "llm":
        key = (parent, "llm")
        counters[key] = counters.get(key, 0) + 1
        return f"llm {counters[key]}"
    return node.name


def _enclosing(rows: list[Row], pair: Pair) -> Row | None:
    """The row of the function the call was made in (None: a cell's top level)."""
    at = pair.parent
    while at is not None:
        row = rows[at]
        if row.pair.node.kind == "function":
            return row
        at = row.pair.parent
    return None


def _call_row(row: Row, a: Call, b: Call) -> None:
    doc_a, doc_b = str(a.metadata.get("doc") or ""), str(b.metadata.get("doc") or "")
    if doc_a != doc_b or _differs(a, b, "doc_hash"):
        row.doc_changed = True
        row.doc_diff = diff_lines(doc_a, doc_b)
    code_changed = _differs(a, b, "source_hash") and not row.doc_changed
    if a.input != b.input:
        row.input_diff = diff_lines(_text(a.input), _text(b.input))
    out_a, out_b = _text(a.output), _text(b.output)
    row.changed = out_a != out_b or a.status != b.status
    if row.changed:
        row.output_diff = diff_lines(out_a, out_b)
        if a.status != b.status:
            row.output_diff.insert(0, f"status: {a.status} → {b.status}")
    what = f"`{b.name}`"
    if row.doc_changed:
        tail = "and its result changed with it" if row.changed else "its result stayed the same"
        row.cause, row.note = "docstring", f"the docstring of {what} changed; {tail}"
    elif code_changed:
        tail = "and its result changed with it" if row.changed else "its result stayed the same"
        row.cause, row.note = "code", f"the code of {what} changed; {tail}"
    elif row.changed and row.input_diff:
        row.cause, row.note = "prompt", f"{what} was called with other arguments"


def _llm_row(row: Row, a: Call, b: Call, frame: Row | None, changed_turns: set[str]) -> None:
    prompt_a, prompt_b = (
        prompt_text(a.metadata.get("messages")),
        prompt_text(b.metadata.get("messages")),
    )
    out_a, out_b = _text(a.output), _text(b.output)
    row.changed = out_a != out_b
    if prompt_a != prompt_b:
        row.prompt_diff = diff_lines(prompt_a, prompt_b)
    if row.changed:
        row.output_diff = diff_lines(out_a, out_b)
    model_a, model_b = _model(a), _model(b)
    answer = "and this answer changed with it" if row.changed else "but this answer stayed the same"
    fn = f"`{frame.pair.node.name}`" if frame is not None else "the cell"
    if row.prompt_diff:
        if frame is not None and frame.doc_changed:
            row.cause, row.note = "docstring", f"the docstring of {fn} changed, {answer}"
        elif frame is not None and frame.cause == "code":
            row.cause, row.note = (
                "code",
                f"the code of {fn} changed and its prompt with it, {answer}",
            )
        else:
            row.cause, row.note = "prompt", f"the prompt changed (its input), {answer}"
    elif model_a != model_b:
        row.cause = "model"
        row.note = f"same prompt, model {model_a} → {model_b}, {answer}"
    elif row.changed:
        saw = _turns_seen(a) | _turns_seen(b)
        moved = sorted(saw & changed_turns)
        if moved:
            row.cause = "history"
            row.note = (
                "same prompt of its own, but an earlier turn it was sent answered differently "
                f"({', '.join(moved[:3])}), and this answer changed with it"
            )
        else:
            row.cause = "nondeterministic"
            row.note = "same prompt, different answer: the model is not deterministic here"


def _turns_seen(node: Call) -> set[str]:
    ctx = node.metadata.get("context")
    turns = ctx.get("turns") if isinstance(ctx, dict) else None
    return {t for t in turns if isinstance(t, str)} if isinstance(turns, list) else set()


def _model(node: Call) -> str:
    return f"{node.name}/{node.metadata.get('model') or '?'}"


def _differs(a: Call, b: Call, key: str) -> bool:
    va, vb = a.metadata.get(key), b.metadata.get(key)
    return va is not None and vb is not None and va != vb


def _deltas(a: Call, b: Call) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for name, value in (("tokens", _tokens), ("latency_ms", _latency), ("cost", _cost)):
        va, vb = value(a), value(b)
        if va is not None and vb is not None and va != vb:
            out[name] = (va, vb)
    return out


def _tokens(node: Call) -> float | None:
    """Input + output tokens by the one usage rule (``usage_of``); None: no usage recorded."""
    input_tokens, output_tokens, _ = usage_of(node.metadata)
    return None if input_tokens is None else float(input_tokens + output_tokens)


def _latency(node: Call) -> float | None:
    value = node.metadata.get("duration_ms")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _cost(node: Call) -> float | None:
    return usage_of(node.metadata)[2]


def _totals(nodes: Any) -> Totals:
    t = Totals()
    for node in nodes:
        if node is None or node.kind not in CALL_KINDS:
            continue
        t.calls += 1
        if node.kind == "llm":
            t.llm_calls += 1
            t.tokens += int(_tokens(node) or 0)
            t.cost += _cost(node) or 0.0
            t.latency_ms += _latency(node) or 0.0
    return t


def findings(rows: Sequence[Row]) -> list[str]:
    """The report's sentences: why answers moved, what was added or removed."""
    out: list[str] = []
    docs: dict[str, list[Row]] = {}
    for row in rows:
        if row.pair.node.kind == "function" and row.doc_changed:
            docs.setdefault(row.pair.node.name, [])
    for row in rows:
        if row.pair.node.kind == "llm" and row.cause == "docstring":
            name = row.path.split(" › ")[-2]
            docs.setdefault(name, []).append(row)
    for name, calls in docs.items():
        moved = sum(1 for r in calls if r.changed)
        if moved:
            out.append(
                f"the docstring of `{name}` changed, and {_n(moved, 'answer')} changed with it"
            )
        else:
            out.append(f"the docstring of `{name}` changed; its answers stayed the same")
    for cause, say in (
        ("code", "changed because a function's code changed"),
        ("prompt", "changed with their prompt (their input)"),
        ("model", "changed with the model or provider"),
        ("history", "changed because an earlier turn they were sent answered differently"),
    ):
        hit = [r for r in rows if r.pair.node.kind == "llm" and r.cause == cause and r.changed]
        if hit:
            out.append(f"{_n(len(hit), 'answer')} {say}")
    loose = [r for r in rows if r.cause == "nondeterministic"]
    if loose:
        where = ", ".join(r.path for r in loose[:3]) + (" …" if len(loose) > 3 else "")
        out.append(f"same prompt, different answer: the model is not deterministic here ({where})")
    for state, word in (("added", "added (only in B)"), ("removed", "removed (only in A)")):
        tops = [r for r in rows if r.state == state and _top_of_run(rows, r)]
        if tops:
            shown = ", ".join(r.path for r in tops[:5]) + (" …" if len(tops) > 5 else "")
            out.append(f"{_n(len(tops), 'call')} {word}: {shown}")
    if not out:
        out.append("no differences: every call paired, same prompts and answers")
    return out


def _top_of_run(rows: Sequence[Row], row: Row) -> bool:
    """Whether ``row`` is the top of an unpaired subtree (its parent is paired)."""
    return row.pair.parent is None or rows[row.pair.parent].state != row.state


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def prompt_text(messages: Any) -> str:
    """A rendered prompt as text, one ``role: content`` block per message."""
    if not isinstance(messages, list):
        return ""
    parts = []
    for message in messages:
        if isinstance(message, dict):
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
            parts.append(f"{message.get('role')}: {text}")
    return "\n".join(parts)


def _cell_text(node: Call) -> str:
    text = node.input.get("text") if isinstance(node.input, dict) else node.input
    return _text(text)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, indent=1)
    except (TypeError, ValueError):
        return repr(value)


def diff_lines(a: str, b: str) -> list[str]:
    """A unified diff of two texts without its header (``-``/``+``/`` `` lines), clipped;
    empty when they are equal."""
    if a == b:
        return []
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), n=1, lineterm=""))[2:]
    shown = [
        ln[:MAX_LINE] + ("…" if len(ln) > MAX_LINE else "")
        for ln in lines
        if not ln.startswith("@@")
    ]
    if len(shown) > MAX_DIFF_LINES:
        shown = [*shown[:MAX_DIFF_LINES], f"… ({len(shown) - MAX_DIFF_LINES} more diff lines)"]
    return shown
