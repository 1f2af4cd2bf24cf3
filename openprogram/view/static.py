"""The DAG without JavaScript: self-contained HTML with an inline SVG, and a text tree.

This is what GitHub, nbviewer and nbconvert show, where widgets are not live.  It is drawn
from the same layout as the widget.  Everything from a node is escaped (node content is
untrusted); colours are SVG presentation attributes, so the picture survives sanitizers
that strip ``<style>``; each node has a ``<title>`` (the hover card) and a ``<details>``
entry (the click panel), so it can be read without clicking anything live.  A turn's view
saved under its own cell (``cell=``) is kept small: no repeat of the cell's text, no HEAD
mark (it is the turn itself), hover cards only where they say more than the label, and
``<details>`` only for its errors (the session and the extension's panel hold the rest).

The HTML is one line (its line breaks written ``&#10;``, which parses to the same text): in
a notebook under git, a re-run that changes a node id or a token count changes one line of
the ``.ipynb``, not a line per tooltip and ``<pre>`` line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any, Final

from openprogram.context.nodes import OPEN_STATUSES
from openprogram.view.branches import branch_lines
from openprogram.view.inert import terminal_text
from openprogram.view.layout import KNOWN_KINDS, compute_layout
from openprogram.view.placed import Layout, Placed
from openprogram.view.summary import clip, content_summary, node_detail

STYLE: Final[dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parent / "assets" / "style.json").read_text(encoding="utf-8")
)  # the same file dag.js draws with
ROW: Final[int] = STYLE["row"]  # px per row
COL: Final[int] = STYLE["col"]  # px per column
R: Final[int] = STYLE["radius"]  # node radius
PAD: Final[int] = STYLE["pad"]
LABEL_CHARS: Final = 90
PREVIEW_IN_LABEL: Final = 60  # characters of a node's preview its label shows
STATIC_FIELD_LIMIT: Final = 800  # characters per field in the static <details>
KIND_COLORS: Final[dict[str, str]] = STYLE["kindColors"]
LANE_COLORS: Final[tuple[str, ...]] = tuple(STYLE["laneColors"])
GLYPHS: Final = {
    "root": "◆",
    "turn": "●",
    "reply": "▲",
    "llm": "▲",
    "function": "■",
    "tool": "■",
    "ask_user": "⬢",
    "error": "✖",
}
RED: Final[str] = STYLE["colors"]["error"]
FADED: Final = frozenset({"cancelled", "interrupted"})

# Inline styles only: an untrusted notebook in JupyterLab drops <style> and <svg> (keeping
# style attributes, <details> and the SVG's text), so the picture's labels are one per line.
_STYLE: Final = {
    "root": "font:12px/1.4 system-ui,sans-serif;color:#1f2937",
    "head": "margin:4px 0",
    "canvas": "overflow:auto;max-height:480px;border:1px solid #e5e7eb;white-space:pre-line",
    "node": "margin-left:12px",
    "pre": "white-space:pre-wrap;background:#f8fafc;margin:0",
}
STATIC_DETAILS_BUDGET: Final = 96 * 1024  # characters of <details> entries per drawing
OLDER_NOTE: Final = (
    "{older} older nodes of the session are not in this view"
    " (`openprogram sessions show ID --page 2` lists them)"
)


def render_static_html(
    nodes: Sequence[Any],
    head_id: str | None,
    *,
    title: str = "",
    folded: Iterable[str] = (),
    last_turns: int | None = None,
    max_rows: int = 300,
    layout: Layout | None = None,
    older: int = 0,
    cell: str | None = None,
) -> str:
    """The DAG as one self-contained HTML fragment (inline SVG + a ``<details>`` list).

    Only the last ``max_rows`` visible rows are drawn (a long session would otherwise put
    megabytes into the notebook); a line says how many earlier rows were left out, and the
    ``older`` nodes of the session a view of its newest window does not hold.
    Pass ``layout`` to reuse one already computed from these nodes.  ``cell``: the turn
    of the cell the drawing is saved under, whose text (shown by the cell) it leaves out.
    """
    lay = layout or compute_layout(nodes, head_id, folded=folded, last_turns=last_turns)
    start = max(lay.rows - max_rows, 0)
    window = lay.visible(start)
    head = lay.placed.get(lay.head_id) if lay.head_id else None
    name_of = content_summary(lay.source[head.id])["name"] if head else None
    header = [f"<b>{_text(title)}</b>" if title else "<b>session DAG</b>"]
    header.append(f"{len(lay.placed) + older} nodes")
    if lay.rows < len(lay.placed):
        header.append(f"{len(lay.placed) - lay.rows} folded away")
    if head is not None and head.id != cell:  # (a cell's view: HEAD is its turn)
        header.append(f"HEAD: {_text(str(name_of))} <code>{_text(head.id)}</code>")
    parts = [
        f'<div class="op-dag-static" data-op-dag="static" style="{_STYLE["root"]}">',
        f'<div class="op-static-head" style="{_STYLE["head"]}">{" · ".join(header)}</div>',
    ]
    if start:
        parts.append(f"<div><i>{start} earlier rows not shown (live widget shows all)</i></div>")
    if older:
        parts.append(f"<div><i>{OLDER_NOTE.format(older=older)}</i></div>")
    parts += [_branch_html(lane, text) for lane, text in branch_lines(lay, window)]
    parts.append(f'<div class="op-static-canvas" style="{_STYLE["canvas"]}">')
    parts.append(_svg(lay, window, start, cell))
    parts.append("</div>")
    # a cell's drawing details its errors only: a turn's output stays small in the notebook
    # (its labels and hover cards say the rest; the session and the extension's panel
    # hold every field)
    detailed = window if cell is None else [p for p in window if p.status == "error"]
    if detailed:
        parts.append(f"<details><summary>Nodes ({len(detailed)} shown)</summary>")
        parts += _detail_entries(lay, detailed, cell)
        parts.append("</details>")
    parts.append("</div>")
    return one_line("".join(parts))  # (line breaks only where a stripped <svg> needs them)


def _detail_entries(lay: Layout, rows: list[Placed], cell: str | None) -> list[str]:
    """The ``<details>`` entries of ``rows``, the newest first within the budget."""
    entries: list[str] = []
    used = 0
    for p in reversed(rows):
        entry = _details(lay, p, cell)
        used += len(entry)
        if used > STATIC_DETAILS_BUDGET:
            left = len(rows) - len(entries)
            entries.append(f"<div><i>{left} earlier nodes not detailed here</i></div>")
            break
        entries.append(entry)
    return entries[::-1]


def one_line(html: str) -> str:
    """``html`` with its line breaks written as character references: the same document
    (in text, in ``<pre>``, in attribute values), on one line."""
    return html.replace("\r", "&#13;").replace("\n", "&#10;")


def render_text_tree(
    nodes: Sequence[Any],
    head_id: str | None,
    *,
    folded: Iterable[str] = (),
    last_turns: int | None = None,
    max_lines: int = 300,
    layout: Layout | None = None,
    stop: int | None = None,
    total: int | None = None,
    older: int = 0,
    page: int = 1,
    usage: bool = True,
    cell: str | None = None,
) -> str:
    """The DAG as an indented text tree, one line per visible node (for ``text/plain``);
    a node's text is shown with its control characters escaped (it may reach a terminal).
    ``stop``: the row after the last one shown (the newest, by default); a view of the
    newest nodes says the session's ``total`` nodes and the ``older`` ones it leaves out,
    and which ``page`` shows the rows around it.  ``usage=False``: no node's tokens or cost
    (a turn's saved text says its total in its header: see :func:`usage_text`).  ``cell``:
    the turn of the cell the text is saved under (no first line; its own line leaves the
    cell's text out)."""
    lay = layout or compute_layout(nodes, head_id, folded=folded, last_turns=last_turns)
    stop = lay.rows if stop is None else min(stop, lay.rows)
    start = max(stop - max_lines, 0)
    total = len(lay.placed) + older if total is None else total
    # (a cell's text: the cell's header names the turn, its rows count themselves)
    lines = [] if cell else [f"session DAG: {total} nodes, {lay.lanes} lane(s)"]
    if start or older:
        more = f" and {older} older nodes" if older else ""
        next_page = f" (--page {page + 1})"
        lines.append(f"… {start} earlier rows{more} not shown{next_page}")
    rows = lay.visible(start, stop)
    named = branch_lines(lay, rows)
    lines += [terminal_text(f"  {'⑂' if lane >= 0 else ' '} {t}") for lane, t in named]
    starts = run_starts(lay, start)
    for p in rows:
        s = shown_summary(lay, p.id, cell)
        if p.id in starts:
            lines.append("── new kernel (a restart, or the notebook run again) ──")
        bits = [
            "  " * p.depth + GLYPHS.get(p.kind, "?"),
            f"{p.kind} {s['name']}" if p.kind != "turn" else s["name"],
            f"[{s['status']}]",
        ]
        bits += [_duration(s["ms"])] if "ms" in s else []
        bits += [f"{s['tokens']} tok"] if usage and "tokens" in s else []
        bits += [cost_text(s["cost"])] if usage and "cost" in s else []
        bits += [f"(branch {p.lane})"] if p.depth == 0 and p.lane else []
        bits += [f"▸ +{p.hidden_count} folded"] if p.folded else []
        bits += [f"⚠ {', '.join(p.flags)}"] if p.flags else []
        bits += ["← HEAD"] if p.id == lay.head_id and p.id != cell else []
        bits += ["⟳ stale"] if "stale" in s else []
        bits += [f"· {clip(s['preview'], 60)}"] if "preview" in s else []
        lines.append(terminal_text(" ".join(bits)))  # names, previews: a session's text
    if stop < lay.rows:
        lines.append(f"… {lay.rows - stop} newer rows (--page {page - 1})")
    return "\n".join(lines)


def usage_text(lay: Layout) -> str:
    """The tokens and cost of every node of ``lay`` together (``120 tok · $0.0012``), or ""."""
    tokens, cost, any_cost = 0, 0.0, False
    for nid in lay.placed:
        s = content_summary(lay.source[nid])
        tokens += s.get("tokens", 0)
        if "cost" in s:
            cost, any_cost = cost + s["cost"], True
    parts = [f"{tokens} tok"] if tokens else []
    return " · ".join(parts + ([cost_text(cost)] if any_cost else []))


def _branch_html(lane: int, text: str) -> str:
    """One branch of the view, in its lane's colour (see :mod:`openprogram.view.branches`)."""
    dot = f'<span style="color:{lane_color(lane)}">●</span> ' if lane >= 0 else ""
    return f'<div class="op-static-branch" style="margin:1px 0">{dot}{_text(text)}</div>'


def run_starts(lay: Layout, start: int = 0) -> set[str]:
    """Turn-level nodes (from visible row ``start`` on) that ran in another kernel process
    than the turn-level node above (``metadata.run``, set by the notebook's turns): where a
    restart or a re-run begins.  Turn-level rows are never folded away."""
    ids = lay.visible_ids()
    runs = [(nid, run) for nid in ids[start:] if (run := _run(lay, nid))]
    if not runs:
        return set()
    last = next(filter(None, (_run(lay, nid) for nid in reversed(ids[:start]))), None)
    out: set[str] = set()
    for nid, run in runs:
        if last is not None and run != last:
            out.add(nid)
        last = run
    return out


def _run(lay: Layout, nid: str) -> str | None:
    """``metadata.run`` of a turn-level node (None for nested calls, or if it has none)."""
    meta = lay.source[nid].get("metadata")
    run = meta.get("run") if isinstance(meta, Mapping) else None
    return run if isinstance(run, str) and run and not lay.placed[nid].depth else None


def node_color(kind: str) -> str:
    return KIND_COLORS.get(kind, "#9ca3af")


def lane_color(lane: int) -> str:
    return LANE_COLORS[lane % len(LANE_COLORS)]


def shape_svg(kind: str, status: str, cx: float, cy: float, r: float = R) -> str:
    """One node's shape as SVG markup (presentation attributes only)."""
    known = kind in KNOWN_KINDS
    fill = node_color(kind)
    stroke = RED if status == "error" or kind == "error" else "#ffffff" if known else "#6b7280"
    attrs = f'fill="{fill}" stroke="{stroke}" stroke-width="{2 if stroke == RED else 1.5}"'
    if not known or status in OPEN_STATUSES:
        attrs += ' stroke-dasharray="3 2"'
    if not known:
        attrs = attrs.replace(f'fill="{fill}"', f'fill="{STYLE["unknownFill"]}"')
    if status in FADED:
        attrs += ' opacity="0.4"'
    shape: str | list[list[float]] = STYLE["shapes"].get(kind, "square") if known else "square"
    if shape == "circle":
        body = f'<circle cx="{cx}" cy="{cy}" r="{r}" {attrs}/>'
    elif shape == "square":
        s = r * 0.85
        body = f'<rect x="{cx - s}" y="{cy - s}" width="{2 * s}" height="{2 * s}" rx="2" {attrs}/>'
    else:
        assert not isinstance(shape, str), shape
        points = " ".join(f"{cx + x * r:.1f},{cy + y * r:.1f}" for x, y in shape)
        body = f'<polygon points="{points}" {attrs}/>'
    mark = "!" if stroke == RED else "?" if not known else ""
    if mark:
        color = "#ffffff" if known else "#374151"
        body += (
            f'<text x="{cx}" y="{cy + 3.5}" text-anchor="middle" font-size="10" '
            f'font-weight="bold" fill="{color}">{mark}</text>'
        )
    return body


def _xy(p: Placed, start: int) -> tuple[float, float]:
    return PAD + p.x * COL, PAD + ((p.y or 0) - start) * ROW


def _label_x(lay: Layout, p: Placed) -> float:
    """Labels start right of every lane line, so a branch's line never crosses them."""
    return PAD + max(p.x, lay.lanes - 1) * COL + R + 6


def _svg(lay: Layout, window: list[Placed], start: int, cell: str | None) -> str:
    starts = run_starts(lay, start)
    width = PAD * 2 + lay.columns * COL + 520
    height = PAD * 2 + max(len(window) - 1, 0) * ROW
    out = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-size="12">']
    for p in window:  # edges under the nodes
        src_id = p.caller or p.pred
        src = lay.placed.get(src_id) if src_id else None
        if src is None or src.hidden:
            continue
        (px, py), (cx, cy) = _xy(src, start), _xy(p, start)
        color = lane_color(p.lane)
        if p.caller is not None:
            d = f"M{px} {py + R} V{cy} H{cx - R}"
            out.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-opacity="0.55"/>')
            continue
        if px == cx or cy <= py:
            d = f"M{px} {py} L{cx} {cy}"
        else:
            mid = py + ROW / 2
            d = f"M{px} {py} C{px} {mid} {cx} {mid} {cx} {py + ROW} L{cx} {cy}"
        out.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="2"/>')
    color = STYLE["colors"]["run"]
    for p in window:
        if p.id in starts:  # a restart or a re-run begins here
            y = _xy(p, start)[1] - ROW / 2
            out.append(
                f'<line x1="0" x2="{width}" y1="{y}" y2="{y}" stroke="{color}" '
                f'stroke-dasharray="6 3"/>'
            )
    for p in window:  # one line each: what is left when a sanitizer drops the <svg> tags
        out.append("\n" + _node_svg(lay, p, start, cell))
    out.append("</svg>")
    return "".join(out)


def _node_svg(lay: Layout, p: Placed, start: int, cell: str | None) -> str:
    s = shown_summary(lay, p.id, cell)
    cx, cy = _xy(p, start)
    parts = [
        f'<g class="op-node" data-id="{escape(p.id)}" data-kind="{escape(p.kind)}" '
        f'data-status="{escape(p.status)}">',
    ]
    if cell is None or _card_adds(p, s):
        parts.append(f"<title>{_text(_card(p, s))}</title>")
    marked = p.id == lay.head_id and p.id != cell
    if marked:
        parts.append(
            f'<circle cx="{cx}" cy="{cy}" r="{R + 4}" fill="{STYLE["colors"]["halo"]}" '
            f'fill-opacity="0.35" stroke="{STYLE["colors"]["haloStroke"]}"/>'
        )
    parts.append(shape_svg(p.kind, p.status, cx, cy))
    label = f"{s['name']}{f' (+{p.hidden_count})' if p.folded else ''}"
    rest = " · ".join(
        x
        for x in (
            s["status"] if s["status"] != "completed" else "",
            _duration(s["ms"]) if "ms" in s else "",
            f"{s['tokens']} tok" if "tokens" in s else "",
            cost_text(s["cost"]) if "cost" in s else "",
            clip(s.get("preview", ""), PREVIEW_IN_LABEL),
        )
        if x
    )
    head_tag = f' <tspan fill="{STYLE["colors"]["head"]}" font-weight="bold">HEAD</tspan>'
    head = head_tag if marked else ""
    if "stale" in s:
        head += ' <tspan fill="#b45309" font-weight="bold">⟳ stale</tspan>'
    parts.append(
        f'<text x="{_label_x(lay, p)}" y="{cy + 4}" fill="#111827">'
        f'<tspan font-weight="600">{_text(clip(label, LABEL_CHARS))}</tspan>{head}'
        + (f'<tspan fill="#6b7280"> {_text(clip(rest, LABEL_CHARS))}</tspan>' if rest else "")
        + "</text></g>"
    )
    return "".join(parts)


def cost_text(usd: float) -> str:
    """A call's cost for a label: ``$0.0012`` (four decimals; ``<$0.0001`` below that)."""
    return f"${usd:.4f}" if usd >= 0.0001 or usd == 0 else "<$0.0001"


def _card_adds(p: Placed, s: Mapping[str, Any]) -> bool:
    """Whether a node's hover card says more than its label (its kind is its shape and
    colour; a label shows a status other than completed, the tokens, the preview's start)."""
    long_preview = len(s.get("preview", "")) > PREVIEW_IN_LABEL
    return s["status"] != "completed" or bool(p.flags) or "stale" in s or long_preview


def _card(p: Placed, s: Mapping[str, Any]) -> str:
    lines = [f"{p.kind} · {s['name']} · {s['status']}"]
    if "tokens" in s:
        lines.append(
            f"{s['tokens']} tokens" + (f" · {cost_text(s['cost'])}" if "cost" in s else "")
        )
    if "ms" in s:
        lines.append(_duration(s["ms"]))
    if p.flags:
        lines.append("flags: " + ", ".join(p.flags))
    if "stale" in s:
        lines.append(f"stale: {s['stale']}")
    if "preview" in s and len(s["preview"]) > PREVIEW_IN_LABEL:  # else the label has it
        lines.append(s["preview"])
    return "\n".join(lines)


def shown_summary(lay: Layout, nid: str, cell: str | None) -> dict[str, Any]:
    """:func:`content_summary` of node ``nid``; for ``cell`` (the turn of the cell a view
    is saved under) without the preview that repeats the cell's text, unless an error."""
    s = content_summary(lay.source[nid])
    if nid == cell and s.get("status") != "error":
        s = {k: v for k, v in s.items() if k != "preview"}
    return s


def _details(lay: Layout, p: Placed, cell: str | None) -> str:
    d = node_detail(lay.source[p.id], limit=STATIC_FIELD_LIMIT)
    if p.id == cell or "messages" in d:  # the cell's text; a call's prompt holds its input
        d.pop("input", None)
    summary = f"{GLYPHS.get(p.kind, '?')} {d['kind']} {d['name']} [{d['status']}]"
    rows = [] if p.kind in ("turn", "reply") else [f"<b>id</b> <code>{_text(p.id)}</code>"]
    for key in ("duration_ms", "model", "cost"):
        if key in d:
            rows.append(f"<b>{key}</b> {_text(str(d[key]))}")
    if "tokens" in d:
        t = d["tokens"]
        rows.append(f"<b>tokens</b> {t['input']} in / {t['output']} out")
    if p.flags:
        rows.append(f"<b>flags</b> {_text(', '.join(p.flags))}")
    stale = _meta_text(lay.source[p.id], "stale")
    if stale:
        rows.append(f"<b>stale</b> {_text(clip(stale, 200))}")
    if p.kind in ("turn", "reply"):  # copy into a cell: a branch from this turn
        rows.append(f"<b>continue from here</b> <code>%%openprogram --from {_text(p.id)}</code>")
    for key in ("doc", "input", "output", "error", "traceback"):
        if key in d:
            rows.append(f"<b>{key}</b>{_pre(d[key])}")
    if "messages" in d:
        msgs = d["messages"]
        items = "".join(
            f"<div><i>{_text(m['role'])}</i>{_pre(m['content'])}</div>" for m in msgs["items"]
        )
        rows.append(f"<b>prompt ({msgs['count']} messages)</b>{items}")
    indent = "&nbsp;" * (2 * p.depth)
    return (
        f'<details style="{_STYLE["node"]}"><summary>{indent}{_text(str(summary))}</summary>'
        f"{'<br>'.join(rows)}</details>"
    )


def _text(value: str) -> str:
    """``value`` escaped as an element's text (quotes need no escaping there)."""
    return escape(value, quote=False)


def _meta_text(node: Mapping[str, Any], key: str) -> str:
    meta = node.get("metadata")
    value = meta.get(key) if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) else ""


def _pre(field: Mapping[str, Any]) -> str:
    more = f"\n… ({field['length']} characters in all)" if field["truncated"] else ""
    return f'<pre style="{_STYLE["pre"]}">{_text(field["text"] + more)}</pre>'


def _duration(ms: float) -> str:
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    return f"{int(ms // 60_000)}m {int(ms % 60_000 // 1000)}s"
