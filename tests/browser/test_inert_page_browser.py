"""``sessions show --html`` of a session whose node text holds ``<!-- </script> <script>``:
the page still draws every row in Chromium, runs no script from the text, and the click
panel shows the text exactly (issue 19, item 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from openprogram.cli import main as cli_main
from tests.test_inert_text import EVIL, HOSTILE_HTML, make_hostile_session


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_hostile_node_text_neither_blanks_the_page_nor_runs(
    op_home: Path, tmp_path: Path, chromium_browser: Any
) -> None:
    make_hostile_session("paged")
    target = tmp_path / "dag.html"
    assert cli_main(["sessions", "show", "paged", "--html", "-o", str(target)]) == 0

    context = chromium_browser.new_context(viewport={"width": 1200, "height": 800})
    context.route("http*://**", lambda route: route.abort())
    page = context.new_page()
    errors: list[str] = []
    dialogs: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(target.as_uri())
    nodes = page.locator(".op-dag g.op-node")
    nodes.first.wait_for()
    kinds = nodes.evaluate_all("(els) => els.map((e) => e.dataset.kind)")
    assert sorted(kinds) == ["function", "llm", "root", "turn"], kinds
    page.locator(".op-dag g.op-node[data-kind='function'] .op-shape").first.click()
    shown = page.locator(".op-detail .op-detail-output").evaluate("(e) => e.textContent")
    assert "out " + EVIL + HOSTILE_HTML in shown  # exactly the text the session holds
    assert not errors and not dialogs, (errors, dialogs)
    context.close()
