"""A methods appendix of one line of a session: what a paper's supplement says was run.

``openprogram sessions export ID --appendix -o methods.md`` (or ``methods.html``): every
turn of the line (the cell as written, the session commit that recorded it), every LLM
call (the function it was made in, provider, model, tokens, cost, the whole prompt it was
sent and its answer), each function's docstring with its ``doc_hash`` / ``source_hash``,
and the totals by provider and model.  Everything from the session is redacted first
(:func:`openprogram.context.secrets.redact_value`: known credentials, and
:func:`~openprogram.context.secrets.redact_key_like`: text that looks like a key).

Markdown, and HTML drawn like the DAG page's static form: the line's DAG
(:func:`openprogram.view.static.render_static_html`), then the same sections, inline
styles only, no script.  Pure: nodes in, text out (the CLI reads the session).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any, Final

from openprogram.compare.diffs import prompt_text
from openprogram.compare.sides import Nodes
from openprogram.context.nodes import Call
from openprogram.context.secrets import (
    redact_key_like,
    redact_value,
    refresh_secrets,
    without_home,
)
from openprogram.usage.totals import Totals

MessagesOf = Callable[[Call], Any]  # an llm node -> the whole prompt it was sent
TURN_COMMIT: Final = re.compile(r"^turn (\d+)\b")
# an id as context.nodes.new_id mints it: too short and plain for a key's shape, never a
# path; only a known credential (by value) can be inside one
MINTED_ID: Final = re.compile(r"[a-z]{1,16}_[0-9a-f]{10}")


def redact(value: Any, home: str | None = None) -> str:
    """``value`` as text with the known credentials (read by :func:`refresh_secrets`, once
    per appendix) and whatever looks like a key masked, the home folder (``home``, default
    ``~``) written ``~``."""
    text = redact_key_like(redact_value(value if isinstance(value, str) else str(value)))
    return without_home(text, home)  # a published text names no user's home folder


class Redactor:
    """:func:`redact` for one view: the credentials and the home folder read once, and each
    string redacted once (the same keys, names and docstrings recur in every node)."""

    def __init__(self) -> None:
        refresh_secrets()
        self.home = os.path.expanduser("~")
        self.done: dict[str, str] = {}

    def text(self, value: Any) -> str:
        value = value if isinstance(value, str) else str(value)
        done = self.done.get(value)
        if done is None:
            if MINTED_ID.fullmatch(value):  # a drawing's thousands of ids: no shape search
                done = self.done[value] = redact_value(value)
            else:
                done = self.done[value] = redact(value, self.home)
        return done

    def tree(self, value: Any) -> Any:
        """``value`` (JSON-like) with every string redacted, keys too."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k): self.tree(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.tree(v) for v in value]
        return value


@dataclass
class CallEntry:
    path: str  # "triage › llm 1"
    provider: str
    model: str
    totals: Totals
    prompt: str
    answer: str


@dataclass
class TurnEntry:
    number: int | None
    node_id: str
    name: str
    commit: str  # the session commit that recorded it ("" when not found)
    cell: str
    run: str
    calls: list[CallEntry] = field(default_factory=list)


@dataclass
class FunctionEntry:
    name: str
    doc: str
    doc_hash: str
    source_hash: str


@dataclass
class Appendix:
    session_id: str
    title: str
    tip: str  # the node the line ends at
    head_commit: str
    turns: list[TurnEntry]
    functions: list[FunctionEntry]
    total: Totals
    by_model: dict[tuple[str, str], Totals]


def turn_commits(summaries: Sequence[tuple[str, str]]) -> dict[int, str]:
    """Turn number -> the sha of the commit that recorded it, from ``(sha, summary)`` pairs
    of a session's log (newest first: a turn committed twice keeps its first commit)."""
    out: dict[int, str] = {}
    for sha, summary in reversed(summaries):
        found = TURN_COMMIT.match(summary)
        if found:
            out.setdefault(int(found.group(1)), sha)
    return out


def build_appendix(
    nodes: Sequence[Call],
    *,
    session_id: str,
    tip: str = "head",
    head_id: str | None = None,
    title: str = "",
    commits: Mapping[int, str] | None = None,
    head_commit: str = "",
    messages_of: MessagesOf | None = None,
) -> Appendix:
    """The appendix of the line ending at ``tip`` (a node id, turn number or ``head``)."""
    masked = Redactor()
    index = Nodes(nodes, head_id)
    line = index.line(index.find(tip))
    in_line = {t.id for t in line}
    under: dict[str, list[Call]] = {}
    for node in index.all:
        if node.kind in ("llm", "function") and node.caller is not None:
            top = index.turn_of(node)
            if top.id in in_line:
                under.setdefault(top.id, []).append(node)
    total = Totals()
    by_model: dict[tuple[str, str], Totals] = {}
    functions: dict[str, FunctionEntry] = {}
    turns: list[TurnEntry] = []
    for turn in line:
        text = turn.input.get("text") if isinstance(turn.input, dict) else turn.input
        entry = TurnEntry(
            turn.turn,
            turn.id,
            masked.text(turn.name),
            (commits or {}).get(turn.turn, "") if turn.turn is not None else "",
            masked.text(text if text is not None else ""),
            masked.text(turn.metadata.get("run") or ""),
        )
        counters: dict[str, int] = {}
        for node in under.get(turn.id, []):
            if node.kind == "function":
                _add_function(functions, node, masked)
                continue
            chain = masked.text(_chain(index, node))
            counters[chain] = counters.get(chain, 0) + 1
            messages = messages_of(node) if messages_of else node.metadata.get("messages")
            provider, model = str(node.name), str(node.metadata.get("model") or "")
            used = Totals()
            used.add(node)
            total.add(node)
            by_model.setdefault((provider, model), Totals()).add(node)
            entry.calls.append(
                CallEntry(
                    f"{chain} › llm {counters[chain]}" if chain else f"llm {counters[chain]}",
                    masked.text(provider),
                    masked.text(model),
                    used,
                    masked.text(prompt_text(messages)),
                    masked.text(node.output if node.output is not None else ""),
                )
            )
        turns.append(entry)
    return Appendix(
        session_id,
        masked.text(title),
        tip,
        head_commit,
        turns,
        sorted(functions.values(), key=lambda f: f.name),
        total,
        by_model,
    )


def _add_function(functions: dict[str, FunctionEntry], node: Call, masked: Redactor) -> None:
    meta = node.metadata
    key = f"{node.name} {meta.get('doc_hash')} {meta.get('source_hash')}"
    if key not in functions:
        functions[key] = FunctionEntry(
            masked.text(node.name),
            masked.text(meta.get("doc") or ""),  # one docstring, many frames: redacted once
            str(meta.get("doc_hash") or "-"),
            str(meta.get("source_hash") or "-"),
        )


def _chain(index: Nodes, node: Call) -> str:
    """The functions a call was made in, outermost first (``handle › triage``)."""
    names: list[str] = []
    seen: set[str] = set()
    up = index.by_id.get(node.caller) if node.caller else None
    while up is not None and up.kind == "function" and up.id not in seen:
        seen.add(up.id)
        names.append(str(up.name))
        up = index.by_id.get(up.caller) if up.caller else None
    return " › ".join(reversed(names))


def _usage(t: Totals) -> tuple[str, str, str, str]:
    return str(t.calls), str(t.input_tokens), str(t.output_tokens), t.cost_text()


def _fence(text: str, lang: str = "text") -> str:
    """``text`` in a Markdown code fence longer than any run of backticks inside it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _title(app: Appendix) -> str:
    return f"Methods appendix: session {app.session_id}" + (f" — {app.title}" if app.title else "")


def render_markdown(app: Appendix) -> str:
    out = [f"# {_title(app)}"]
    calls = sum(len(t.calls) for t in app.turns)
    out.append(
        f"\nRecorded with OpenProgram. The line ending at `{app.tip}`: {len(app.turns)} turn(s), "
        f"{calls} LLM call(s)"
        + (f"; session commit `{app.head_commit[:12]}`." if app.head_commit else ".")
        + " Credentials and key-like text are masked as `***`."
    )
    out.append("\n## Totals\n")
    out.append("| provider | model | calls | input tokens | output tokens | cost |")
    out.append("|---|---|---:|---:|---:|---:|")
    for (provider, model), used in sorted(app.by_model.items()):
        names = f"| {_md_cell(provider)} | {_md_cell(model or '-')} | "
        out.append(names + " | ".join(_usage(used)) + " |")
    out.append("| **all** | | " + " | ".join(_usage(app.total)) + " |")
    if app.functions:
        out.append("\n## Functions (docstrings as sent)\n")
        for f in app.functions:
            out.append(f"### `{f.name}` (doc_hash `{f.doc_hash}`, source_hash `{f.source_hash}`)\n")
            out.append(_fence(f.doc))
    out.append("\n## Turns\n")
    for t in app.turns:
        commit = f" · commit `{t.commit[:12]}`" if t.commit else ""
        run = f" · run `{t.run}`" if t.run else ""
        out.append(f"### Turn {t.number} — {_md_cell(t.name)} (`{t.node_id}`){commit}{run}\n")
        if t.cell:
            out.append(_fence(t.cell, "python"))
        for i, c in enumerate(t.calls, 1):
            _, tin, tout, cost = _usage(c.totals)
            out.append(
                f"\n#### Call {i}: `{c.path}` — provider `{c.provider}`, model "
                f"`{c.model or '-'}`, {tin} input / {tout} output tokens, {cost}\n"
            )
            out.append("Prompt:\n\n" + _fence(c.prompt))
            out.append("\nAnswer:\n\n" + _fence(c.answer))
    return "\n".join(out) + "\n"


_CSS: Final = {
    "root": "font:13px/1.45 system-ui,sans-serif;color:#1f2937;max-width:980px",
    "table": "border-collapse:collapse",
    "cell": "border:1px solid #e5e7eb;padding:3px 8px;text-align:left",
    "pre": "white-space:pre-wrap;background:#f8fafc;padding:6px;margin:4px 0;"
    "font:12px/1.35 ui-monospace,monospace",
}


def render_html(app: Appendix, nodes: Sequence[Call] = (), head_id: str | None = None) -> str:
    """One self-contained HTML document: the line's DAG drawn as the DAG page's static form
    (``nodes``: the session's, when given), then the appendix; no script."""
    css = _CSS
    title = _title(app)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title></head>",
        f'<body><div class="op-appendix" style="{css["root"]}">',
        f"<h1>{escape(title)}</h1>",
    ]
    calls = sum(len(t.calls) for t in app.turns)
    commit = (
        f"; session commit <code>{escape(app.head_commit[:12])}</code>" if app.head_commit else ""
    )
    parts.append(
        f"<p>Recorded with OpenProgram. The line ending at <code>{escape(app.tip)}</code>: "
        f"{len(app.turns)} turn(s), {calls} LLM call(s){commit}. Credentials and key-like "
        "text are masked as <code>***</code>.</p>"
    )
    if nodes:
        parts.append("<h2>The line</h2>")
        parts.append(_line_drawing(app, nodes, head_id))
    parts.append("<h2>Totals</h2>")
    head = ("provider", "model", "calls", "input tokens", "output tokens", "cost")
    rows = [(p, m or "-", *_usage(used)) for (p, m), used in sorted(app.by_model.items())]
    rows.append(("all", "", *_usage(app.total)))
    parts.append(_table(head, rows))
    if app.functions:
        parts.append("<h2>Functions (docstrings as sent)</h2>")
        for f in app.functions:
            parts.append(
                f"<h3><code>{escape(f.name)}</code> (doc_hash <code>{escape(f.doc_hash)}</code>, "
                f"source_hash <code>{escape(f.source_hash)}</code>)</h3>{_pre(f.doc)}"
            )
    parts.append("<h2>Turns</h2>")
    for t in app.turns:
        bits = [f"<code>{escape(t.node_id)}</code>"]
        bits += [f"commit <code>{escape(t.commit[:12])}</code>"] if t.commit else []
        bits += [f"run <code>{escape(t.run)}</code>"] if t.run else []
        parts.append(f"<h3>Turn {t.number} — {escape(t.name)} · {' · '.join(bits)}</h3>")
        if t.cell:
            parts.append(_pre(t.cell))
        for i, c in enumerate(t.calls, 1):
            _, tin, tout, cost = _usage(c.totals)
            parts.append(
                f"<h4>Call {i}: <code>{escape(c.path)}</code> — provider "
                f"<code>{escape(c.provider)}</code>, model <code>{escape(c.model or '-')}</code>, "
                f"{tin} input / {tout} output tokens, {escape(cost)}</h4>"
            )
            parts.append(f"<div>Prompt:</div>{_pre(c.prompt)}<div>Answer:</div>{_pre(c.answer)}")
    parts.append("</div></body></html>")
    return "\n".join(parts)


class _MaskedNodes(dict[str, Mapping[str, Any]]):
    """Node id -> the node's dict redacted, made when the drawing first reads it: a long
    line draws its newest rows, and only the nodes it reads are redacted whole."""

    def __init__(self, nodes: Mapping[str, Call], masked: Redactor) -> None:
        super().__init__()
        self.nodes, self.masked = nodes, masked

    def __missing__(self, node_id: str) -> Mapping[str, Any]:
        found = self[node_id] = self.masked.tree(self.nodes[node_id].to_dict())
        return found


def _line_drawing(app: Appendix, nodes: Sequence[Call], head_id: str | None) -> str:
    """The line's DAG as the DAG page's static form, from the session's ``nodes``.  It is
    laid out from what places a node (its id, seq, caller, predecessor, kind and status,
    redacted as everything else), and a node's whole content is redacted only if the
    drawing shows it (its last rows, the HEAD, a branch's start)."""
    from openprogram.view.layout import compute_layout
    from openprogram.view.static import render_static_html

    masked = Redactor()
    line = {t.node_id for t in app.turns}
    index = Nodes(nodes, head_id)
    drawn = [n for n in index.all if n.kind == "root" or index.turn_of(n).id in line]
    layout = compute_layout([_placing(n, masked) for n in drawn], head_id)
    layout.source = _MaskedNodes({masked.text(n.id): n for n in drawn}, masked)
    return render_static_html([], head_id, title=f"session {app.session_id}", layout=layout)


def _placing(node: Call, masked: Redactor) -> dict[str, Any]:
    """What the layout reads of a node (``Call.to_dict``'s fields), redacted."""
    meta = node.metadata
    return {
        "id": masked.text(node.id),
        "seq": node.seq,
        "caller": None if node.caller is None else masked.text(node.caller),
        "predecessor": None if node.predecessor is None else masked.text(node.predecessor),
        "metadata": {k: masked.tree(meta[k]) for k in ("kind", "status") if k in meta},
    }


def _pre(text: str) -> str:
    return f'<pre style="{_CSS["pre"]}">{escape(text)}</pre>'


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    cell = _CSS["cell"]
    out = [f'<table style="{_CSS["table"]}"><tr>']
    out += [f'<th style="{cell}">{escape(h)}</th>' for h in head]
    out.append("</tr>")
    for row in rows:
        out.append("<tr>" + "".join(f'<td style="{cell}">{escape(v)}</td>' for v in row) + "</tr>")
    out.append("</table>")
    return "".join(out)
