"""The whole session as one self-contained HTML page: ``openprogram sessions show ID --html``.

The same interactive view as the notebook (``assets/dag.js`` and ``dag.css``, inlined),
drawn from the saved-view data (:func:`openprogram.view.saved.saved_view`) embedded as
JSON; nothing is fetched, so the file works offline and as an e-mail attachment.  The
static drawing is in ``<noscript>`` for readers without JavaScript.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any, Final

from openprogram.view.inert import json_for_html
from openprogram.view.layout import compute_layout
from openprogram.view.saved import saved_view
from openprogram.view.static import render_static_html

ASSETS: Final = Path(__file__).resolve().parent / "assets"
PAGE_BUDGET: Final = 64 * 1024 * 1024  # a page holds every node's detail (clipped per field)
_PAGE_CSS: Final = """
body{margin:16px;background:#fff}
.op-dag .op-canvas,.op-dag .op-detail{max-height:80vh}
"""


STYLE_IMPORT: Final = 'import STYLE from "./style.json";'


def dag_module_source() -> str:
    """``dag.js`` with ``style.json`` inlined: one module a browser runs from a string (the
    live widget's ESM, the HTML page).  The extension's bundler resolves the import itself."""
    source = (ASSETS / "dag.js").read_text(encoding="utf-8")
    if STYLE_IMPORT not in source:
        raise RuntimeError(f"dag.js no longer starts with {STYLE_IMPORT!r}")
    style = (ASSETS / "style.json").read_text(encoding="utf-8")
    return source.replace(STYLE_IMPORT, f"const STYLE = {json.dumps(json.loads(style))};", 1)


def dag_css() -> str:
    return (ASSETS / "dag.css").read_text(encoding="utf-8")


def render_page(
    nodes: Sequence[Any],
    head_id: str | None,
    *,
    title: str,
    last_turns: int | None = None,
) -> str:
    """One HTML document: the view of ``nodes`` with every node's detail, offline."""
    layout = compute_layout(nodes, head_id, last_turns=last_turns)
    data = saved_view(layout, title=title, budget=PAGE_BUDGET)
    payload = json_for_html(data)  # any text in it round-trips through JSON.parse
    module = _script_safe(dag_module_source())
    static = render_static_html((), None, title=title, layout=layout)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{escape(title)}</title>",
            f"<style>{dag_css()}{_PAGE_CSS}</style>",
            "</head><body>",
            '<div id="op-dag"></div>',
            f"<noscript>{static}</noscript>",
            f'<script type="application/json" id="op-dag-data">{payload}</script>',
            '<script type="module">',
            module,
            'const data = JSON.parse(document.getElementById("op-dag-data").textContent);',
            'renderSaved(document.getElementById("op-dag"), data);',
            "</script>",
            "</body></html>",
        ]
    )


def _script_safe(text: str) -> str:
    """Our own module's source (not data: that is :func:`json_for_html`) made unable to
    end the ``<script>`` element it is inlined in."""
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")
