"""An evaluation drawn as a table: text (terminal, ``text/plain``), Markdown and static HTML.

One row per case (its scores, tokens and cost of the calls sent now, how many calls were
reused from the earlier recording, and how its scores moved since), then the means and
totals; under it, when there is an earlier evaluation, the cases whose scores changed, each
with the call-by-call diff that explains it (:mod:`openprogram.compare.render`).  The HTML
has inline styles only and escapes everything from the session, like the diff's, so it
survives a save, nbconvert and sanitizers.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Final

from openprogram.compare.render import render_html, render_text
from openprogram.view.inert import terminal_text

if TYPE_CHECKING:  # the result types call these renderers (no import cycle)
    from openprogram.scale.evals.result import (
        CaseChange,
        CaseResult,
        EvalComparison,
        EvalResult,
    )

KEY_WIDTH: Final = 28
OUTPUT_CHARS: Final = 60
OPEN_CHANGES: Final = 3  # this few changed cases: their diffs are shown unfolded
_TD: Final = "padding:2px 8px;border-bottom:1px solid #f1f5f9;text-align:left;vertical-align:top"
_TH: Final = "padding:2px 8px;border-bottom:1px solid #e5e7eb;background:#f8fafc;text-align:left"
_UP: Final = "color:#166534"
_DOWN: Final = "color:#991b1b"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _cost(value: float | None) -> str:
    return "unpriced" if value is None else f"${value:.4f}"


def _clip(value: object, width: int) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _moved(change: CaseChange | None, name: str) -> str:
    if change is None or name not in change.after:
        return ""
    before = change.before.get(name)
    if before is None:
        return "(new)"
    delta = change.after[name] - before
    return f"{delta:+.2f}" if delta else ""


def headline(result: EvalResult) -> str:
    parts = [f"evaluate {result.function}: {len(result.cases)} case(s)"]
    if result.failed:
        parts.append(f"{result.failed} failed")
    parts.append(f"{result.tokens} tokens")
    parts.append(_cost(result.cost))
    parts.append(f"{result.sent} LLM call(s) sent, {result.reused} reused from the recording")
    return " · ".join(parts)


def _changes(result: EvalResult) -> dict[str, CaseChange]:
    comparison = result.comparison
    return {c.key: c for c in comparison.changed} if comparison is not None else {}


def _cells(case: CaseResult, names: list[str], change: CaseChange | None) -> list[str]:
    scores = []
    for name in names:
        moved = _moved(change, name)
        scores.append(_num(case.scores.get(name)) + (f" {moved}" if moved else ""))
    output = f"error: {case.error}" if case.error else case.output
    return [
        case.key,
        _clip(output, OUTPUT_CHARS),
        *scores,
        str(case.tokens),
        _cost(case.cost),
        f"{case.reused}/{case.calls}",
    ]


def _header(names: list[str]) -> list[str]:
    return ["case", "output", *names, "tokens", "cost", "reused"]


def _mean_row(result: EvalResult, names: list[str]) -> list[str]:
    means = result.mean()
    return [
        "mean · total",
        "",
        *[_num(means.get(n)) for n in names],
        str(result.tokens),
        _cost(result.cost),
        f"{result.reused}/{result.sent + result.reused}",
    ]


def result_text(result: EvalResult) -> str:
    names = result.names
    changes = _changes(result)
    rows = [_header(names)]
    rows += [_cells(c, names, changes.get(c.key)) for c in result.cases]
    rows.append(_mean_row(result, names))
    widths = [min(max(len(r[i]) for r in rows), KEY_WIDTH + 40) for i in range(len(rows[0]))]
    widths[0] = min(widths[0], KEY_WIDTH)
    lines = [headline(result)]
    for row in rows:
        lines.append("  ".join(_clip(v, w).ljust(w) for v, w in zip(row, widths, strict=True)))
    if result.comparison is not None:
        lines += comparison_text(result.comparison)
    return terminal_text("\n".join(lines).rstrip(), keep_newlines=True)


def comparison_line(comparison: EvalComparison) -> str:
    parts = [
        f"since the {comparison.before.label}: {len(comparison.changed)} case(s) changed "
        f"score ({len(comparison.better)} better, {len(comparison.worse)} worse), "
        f"{comparison.same} the same"
    ]
    if comparison.added:
        parts.append(f"{len(comparison.added)} new")
    if comparison.removed:
        parts.append(f"{len(comparison.removed)} no longer evaluated")
    return ", ".join(parts)


def _score_moves(change: CaseChange) -> str:
    moves = []
    for name in dict.fromkeys([*change.before, *change.after]):
        before, after = change.before.get(name), change.after.get(name)
        if before != after:
            moves.append(f"{name} {_num(before)} → {_num(after)}")
    if (change.error_before is None) != (change.error_after is None):
        moves.append("failed" if change.error_after else "no longer fails")
    return ", ".join(moves)


def comparison_text(comparison: EvalComparison) -> list[str]:
    lines = ["", comparison_line(comparison)]
    for change in comparison.changed:
        lines.append(f"~ case {change.key}: {_score_moves(change)}")
        if change.report is not None:
            lines += ["    " + ln for ln in render_text(change.report).splitlines()]
    return lines


# -- Markdown --------------------------------------------------------------------------------
def _md(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def result_markdown(result: EvalResult) -> str:
    names = result.names
    changes = _changes(result)
    header = _header(names)
    lines = [f"**{_md(headline(result))}**", ""]
    lines.append("| " + " | ".join(_md(h) for h in header) + " |")
    lines.append("|" + "---|" * len(header))
    for case in result.cases:
        cells = _cells(case, names, changes.get(case.key))
        lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
    lines.append(
        "| " + " | ".join(f"**{_md(c)}**" if c else "" for c in _mean_row(result, names)) + " |"
    )
    if result.comparison is not None:
        lines += ["", comparison_markdown(result.comparison)]
    return "\n".join(lines)


def comparison_markdown(comparison: EvalComparison) -> str:
    lines = [_md(comparison_line(comparison))]
    for change in comparison.changed:
        lines += ["", f"- **case {_md(change.key)}**: {_md(_score_moves(change))}"]
        lines += [f"  - {_md(why)}" for why in change.why]
        if change.report is not None:
            lines += ["", "```diff", *render_text(change.report).splitlines(), "```"]
    return "\n".join(lines)


# -- HTML ------------------------------------------------------------------------------------
def _row_html(cells: list[str], *, tag: str = "td", style: str = _TD) -> str:
    return "<tr>" + "".join(f'<{tag} style="{style}">{escape(c)}</{tag}>' for c in cells) + "</tr>"


def result_html(result: EvalResult) -> str:
    names = result.names
    changes = _changes(result)
    parts = [
        '<div class="op-eval tex2jax_ignore mathjax_ignore" '
        'style="font:12px/1.4 system-ui,sans-serif;color:#1f2937">',
        f'<div style="font-weight:600;margin:4px 0">{escape(headline(result))}</div>',
        '<table style="border-collapse:collapse">',
        _row_html(_header(names), tag="th", style=_TH),
    ]
    for case in result.cases:
        change = changes.get(case.key)
        style = _TD
        if change is not None:
            style += ";" + (_UP if change.delta > 0 else _DOWN if change.delta < 0 else "")
        parts.append(_row_html(_cells(case, names, change), style=style))
    parts.append(_row_html(_mean_row(result, names), style=_TD + ";font-weight:600"))
    parts.append("</table>")
    if result.comparison is not None:
        parts.append(comparison_html(result.comparison))
    parts.append("</div>")
    return "".join(parts)


def comparison_html(comparison: EvalComparison) -> str:
    parts = [f'<div style="margin:6px 0 2px">{escape(comparison_line(comparison))}</div>']
    shown_open = " open" if len(comparison.changed) <= OPEN_CHANGES else ""
    for change in comparison.changed:
        style = _UP if change.delta > 0 else _DOWN if change.delta < 0 else ""
        summary = f"case {change.key}: {_score_moves(change)}"
        why = "".join(f"<div>• {escape(w)}</div>" for w in change.why)
        diff = (
            render_html(change.report, title=f"why case {change.key} moved")
            if change.report
            else ""
        )
        head = f'<details{shown_open}><summary style="{style}">{escape(summary)}</summary>'
        parts.append(f"{head}{why}{diff}</details>")
    return "".join(parts)
