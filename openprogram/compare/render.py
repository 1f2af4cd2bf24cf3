"""A comparison drawn as text (terminal, ``text/plain``) and as static HTML (side by side).

The HTML is what survives a save, a reopen without a kernel and ``nbconvert`` (like the
DAG's static drawing): inline styles only (sanitizers drop ``<style>``), everything from a
session escaped, A on the left and B on the right for every row that changed, and every
row in a ``<details>`` list.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Final

from openprogram.compare.diffs import Report, Row, Totals
from openprogram.view.inert import terminal_text

MAX_ROWS_SHOWN: Final = 300  # changed rows drawn in full; the rest are counted
DIFF_MIME: Final = "application/vnd.openprogram.diff+json"

_CSS: Final = {
    "root": "font:12px/1.4 system-ui,sans-serif;color:#1f2937",
    "table": "border-collapse:collapse;width:100%;table-layout:fixed",
    "th": "text-align:left;padding:4px;border-bottom:1px solid #e5e7eb;background:#f8fafc",
    "td": "vertical-align:top;text-align:left;padding:4px;border-bottom:1px solid #f1f5f9;"
    "width:50%",
    "pre": "white-space:pre-wrap;margin:2px 0;font:11px/1.35 ui-monospace,monospace",
    "-": "background:#fee2e2;color:#991b1b",
    "+": "background:#dcfce7;color:#166534",
    " ": "color:#6b7280",
    "note": "margin:2px 0;font-style:italic",
    "find": "margin:2px 0 2px 16px",
}


def delta_text(name: str, a: float, b: float) -> str:
    if name == "cost":
        return f"cost ${a:.4f} → ${b:.4f} ({b - a:+.4f})"
    if name == "latency_ms":
        return f"latency {a:.0f} ms → {b:.0f} ms ({b - a:+.0f})"
    return f"tokens {a:.0f} → {b:.0f} ({b - a:+.0f})"


def summary_lines(report: Report) -> list[str]:
    ta, tb = report.totals
    head = [
        f"diff: A = {report.a.label} ({_size(report.a.turns, ta)}), "
        f"B = {report.b.label} ({_size(report.b.turns, tb)})",
    ]
    if report.shared:
        head.append(f"  both lines start with the same {report.shared} turn(s) (left out)")
    head.append(
        f"  {report.count('paired')} paired ({len(report.changed)} with another answer), "
        f"{report.count('added')} added, {report.count('removed')} removed"
    )
    head.append(
        "  "
        + " · ".join(
            delta_text(k, va, vb)
            for k, va, vb in (
                ("tokens", ta.tokens, tb.tokens),
                ("latency_ms", ta.latency_ms, tb.latency_ms),
                ("cost", ta.cost, tb.cost),
            )
        )
    )
    return head


def _size(turns: Sequence[object], t: Totals) -> str:
    return f"{len(turns)} turn(s), {t.calls} call(s)"


def render_text(report: Report, *, all_rows: bool = False) -> str:
    """The report for a terminal: header, why, each change with its diffs, added/removed."""
    out = summary_lines(report)
    out.append("why:")
    out += [f"  - {line}" for line in report.findings]
    shown = [r for r in report.rows if all_rows or r.interesting]
    if shown:
        out.append("calls:")
    for row in shown[:MAX_ROWS_SHOWN]:
        out += _text_row(row)
    if len(shown) > MAX_ROWS_SHOWN:
        out.append(f"  … {len(shown) - MAX_ROWS_SHOWN} more rows")
    quiet = sum(1 for r in report.rows if not r.interesting)
    if quiet and not all_rows:
        out.append(f"unchanged: {quiet} paired node(s) with the same prompt and answer (--all)")
    return terminal_text("\n".join(out), keep_newlines=True)


def _text_row(row: Row) -> list[str]:
    marks = {"added": "+ ", "removed": "- ", "paired": "~ " if row.changed else "  "}
    line = f"  {marks[row.state]}{row.path}"
    if row.state != "paired":
        line += f"  [{row.state}]"
    elif row.note:
        line += f"  — {row.note}"
    out = [line]
    for title, diff in row_sections(row):
        out.append(f"      {title}:")
        out += [f"        {d}" for d in diff]
    if row.deltas:
        out.append("      " + " · ".join(delta_text(k, *v) for k, v in row.deltas.items()))
    return out


def row_sections(row: Row) -> list[tuple[str, list[str]]]:
    return [
        (title, diff)
        for title, diff in (
            ("cell", row.cell_diff),
            ("docstring", row.doc_diff),
            ("prompt", row.prompt_diff),
            ("arguments", row.input_diff),
            ("answer" if row.pair.node.kind == "llm" else "result", row.output_diff),
        )
        if diff
    ]


def render_html(report: Report, *, title: str = "openprogram diff") -> str:
    """The static, side-by-side drawing (no script; survives sanitizers and nbconvert)."""
    css = _CSS
    parts = [
        # tex2jax_ignore: JupyterLab's MathJax would read "$0.01 → $0.02" as TeX
        f'<div class="op-diff tex2jax_ignore mathjax_ignore" style="{css["root"]}">',
        f'<div style="font-weight:600;margin:4px 0">{escape(title)}</div>',
    ]
    parts += [
        f'<div style="margin:1px 0">{escape(line.strip())}</div>' for line in summary_lines(report)
    ]
    parts.append('<div style="margin:6px 0 2px;font-weight:600">why</div>')
    parts += [f'<div style="{css["find"]}">• {escape(f)}</div>' for f in report.findings]
    changed = [r for r in report.rows if r.interesting]
    if changed:
        parts.append(f'<table style="{css["table"]}">')
        parts.append(
            f'<tr><th style="{css["th"]}">A: {escape(report.a.label)}</th>'
            f'<th style="{css["th"]}">B: {escape(report.b.label)}</th></tr>'
        )
        for row in changed[:MAX_ROWS_SHOWN]:
            parts.append(_html_row(row))
        parts.append("</table>")
        if len(changed) > MAX_ROWS_SHOWN:
            parts.append(f"<div>… {len(changed) - MAX_ROWS_SHOWN} more rows</div>")
    parts.append(f"<details><summary>all {len(report.rows)} rows</summary>")
    parts.append(f'<pre style="{css["pre"]}">')
    parts += [escape(_plain_row(r)) + "\n" for r in report.rows]
    parts.append("</pre></details></div>")
    return "".join(parts)


def _plain_row(row: Row) -> str:
    state = row.state if row.state != "paired" else ("changed" if row.changed else "same")
    return f"{state:<8} {row.path}"


def _html_row(row: Row) -> str:
    css = _CSS
    head = escape(row.path)
    badge = {"added": " [added: only in B]", "removed": " [removed: only in A]"}.get(row.state, "")
    note = f'<div style="{css["note"]}">{escape(row.note)}</div>' if row.note else ""
    deltas = " · ".join(delta_text(k, *v) for k, v in row.deltas.items())
    deltas_html = f'<div style="{css[" "]}">{escape(deltas)}</div>' if deltas else ""
    cells = [
        f'<tr><td colspan="2" style="{css["th"]}"><b>{head}</b>{escape(badge)}{note}'
        f"{deltas_html}</td></tr>"
    ]
    left, right = [], []
    for title, diff in row_sections(row):
        left.append(_side(title, diff, "-"))
        right.append(_side(title, diff, "+"))
    if row.state == "added":
        left, right = ["<i>—</i>"], [escape(row.pair.node.kind)]
    elif row.state == "removed":
        left, right = [escape(row.pair.node.kind)], ["<i>—</i>"]
    if left or right:
        cells.append(
            f'<tr><td style="{css["td"]}">{"".join(left)}</td>'
            f'<td style="{css["td"]}">{"".join(right)}</td></tr>'
        )
    return "".join(cells)


def _side(title: str, diff: list[str], sign: str) -> str:
    """One side of a diff: the lines both have and this side's own (``-`` A, ``+`` B)."""
    css = _CSS
    lines = []
    for line in diff:
        mark = line[:1]
        if mark in ("-", "+") and mark != sign:
            continue
        style = css[mark] if mark in ("-", "+") else css[" "]
        lines.append(f'<span style="{style}">{escape(line[1:] if mark in "-+ " else line)}</span>')
    body = "\n".join(lines)
    return f'<div><b>{escape(title)}</b><pre style="{css["pre"]}">{body}</pre></div>'
