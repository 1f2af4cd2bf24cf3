"""``openprogram sessions show ID --html -o dag.html``: one offline page, the same view.

Rendered from a stored session, opened from ``file://`` in Chromium with every network
request refused: nodes drawn, search works, a click shows the docstring and the prompt.
Screenshot: ``/tmp/op-dag-page.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from openprogram import agentic_function, session_context
from openprogram.cli import main as cli_main

DOC = "Classify the ticket as bug, feature or question."


@agentic_function
def triage(ticket: str, runtime: Any = None) -> str:
    """Classify the ticket as bug, feature or question."""
    return str(runtime.exec(ticket, choices=["bug", "feature", "question"]))


@pytest.mark.browser
@pytest.mark.timeout(120)
def test_the_session_page_works_offline(
    op_home: Path, tmp_path: Path, chromium_browser: Any
) -> None:
    from openprogram.providers import create_runtime

    with session_context(runtime=create_runtime("test"), message="first") as handle:
        triage("the app crashes on save")
    with session_context(handle.session_id, runtime=create_runtime("test"), message="2nd"):
        triage("please add a dark mode")
    target = tmp_path / "dag.html"
    assert cli_main(["sessions", "show", handle.session_id, "--html", "-o", str(target)]) == 0
    html = target.read_text()
    assert "<script src" not in html and "@import" not in html

    context = chromium_browser.new_context(viewport={"width": 1200, "height": 800})
    fetched: list[str] = []

    def refuse(route: Any) -> None:
        fetched.append(route.request.url)
        route.abort()

    context.route("http*://**", refuse)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(target.as_uri())
    nodes = page.locator(".op-dag g.op-node")
    nodes.first.wait_for()
    kinds = nodes.evaluate_all("(els) => els.map((e) => e.dataset.kind)")
    assert kinds.count("function") == 2 and kinds.count("llm") >= 2, kinds
    assert handle.session_id in page.locator(".op-title").inner_text()
    page.locator(".op-dag g.op-node[data-kind='function'] .op-shape").first.click()
    assert DOC in page.locator(".op-detail .op-detail-doc").inner_text()
    page.locator(".op-dag g.op-node[data-kind='llm'] .op-shape").first.click()
    assert DOC in page.locator(".op-detail .op-detail-messages").inner_text()
    page.locator(".op-search").fill("llm")
    assert page.locator(".op-count").inner_text().startswith("2 match")
    page.screenshot(path="/tmp/op-dag-page.png", full_page=True)
    assert not errors and not fetched, (errors, fetched)
    context.close()


@pytest.mark.browser
@pytest.mark.timeout(60)
def test_the_page_marks_a_new_kernel_times_turns_and_keeps_the_card_off_its_row(
    tmp_path: Path, chromium_browser: Any
) -> None:
    from openprogram.view.page import render_page

    def turn(i: int, run: str) -> dict[str, Any]:
        return {
            "id": f"t{i}",
            "seq": 2 * i,
            "turn": i,
            "name": f"cell [{i}]",
            "input": {"text": "a long cell source " * 8},
            "caller": None,
            "predecessor": f"t{i - 1}" if i > 1 else None,
            "created_at": 1_700_000_000 + 60 * i,
            "metadata": {"kind": "turn", "status": "completed", "run": run},
        }

    nodes = [turn(1, "k1"), turn(2, "k1"), turn(3, "k2"), turn(4, "k2")]
    target = tmp_path / "runs.html"
    target.write_text(render_page(nodes, "t4", title="runs"))
    page = chromium_browser.new_page(viewport={"width": 1000, "height": 700})
    page.goto(target.as_uri())
    page.locator("g.op-node").first.wait_for()
    assert page.locator(".op-run-line").count() == 1
    third = page.locator("g.op-node[data-id='t3']")
    assert "new kernel" in (third.locator(".op-run-tag").text_content() or "")
    meta = third.locator(".op-meta").text_content() or ""
    assert "Nov 14" in meta or "Nov 15" in meta  # when it ran (1,700,000,180 s)
    preview = meta.split(" · ")[-1]
    cut = preview.removesuffix("…")
    assert preview.endswith("…") and ("a long cell source " * 8).startswith(cut)
    assert ("a long cell source " * 8)[len(cut)] == " "  # cut between words
    for nid in ("t1", "t4"):  # the hover card is beside its row, never over it
        node = page.locator(f"g.op-node[data-id='{nid}']")
        node.locator(".op-shape").hover()
        card = page.locator(".op-card")
        card.wait_for()
        row = node.bounding_box()
        box = card.bounding_box()
        assert row is not None and box is not None
        assert box["y"] >= row["y"] + row["height"] or box["y"] + box["height"] <= row["y"], (
            nid,
            row,
            box,
        )
        assert "a long cell source" in card.inner_text()
    page.close()
