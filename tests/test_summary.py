"""What the DAG view shows of a node (``view/summary.py``): a small summary per node (the
line a user reads next to it, tokens, cost, who ran a turn) and, on a click, the full
detail with long values clipped and the whole of one field on "show more"."""

from __future__ import annotations

from typing import Any

import pytest
from test_static import mk, small_session

from openprogram.view import compute_layout, node_detail, summarize
from openprogram.view.summary import DETAIL_LIMIT, PREVIEW_CHARS, content_summary


def test_each_nodes_summary_says_what_a_user_wants_to_see_next_to_it() -> None:
    layout = compute_layout(small_session(), "t2")
    by_id = {s["id"]: s for s in summarize(layout)}
    assert by_id["e1"]["preview"] == "ValueError: boom"  # an error shows the error
    assert by_id["a1"]["preview"] == "Which one?"  # a question, unanswered
    assert by_id["t1"]["preview"] == "x = research('sparse attention')"
    assert by_id["l1"]["caller"] == "f1" and by_id["t2"]["pred"] == "t1"
    assert set(by_id) == {n["id"] for n in small_session()}


def test_a_summary_is_small_and_leaves_out_what_is_empty() -> None:
    node = mk("l9", 9, "llm", output="word " * 1000, metadata={"usage": {"input_tokens": 30}})
    node["metadata"]["cost"] = 0.002
    node["metadata"]["duration_ms"] = 812.6
    summary = content_summary(node)
    assert len(summary["preview"]) <= PREVIEW_CHARS and summary["preview"].endswith("…")
    assert (summary["tokens"], summary["cost"], summary["ms"]) == (30, 0.002, 813)
    assert "by" not in summary and "run" not in summary
    turn = mk("t9", 9, "turn", metadata={"author": {"name": "Ada  Lovelace"}, "run": "k1"})
    assert content_summary(turn)["by"] == "Ada Lovelace" and content_summary(turn)["run"] == "k1"


def test_the_detail_clips_long_values_and_show_more_gives_one_field_whole() -> None:
    long = "x" * (DETAIL_LIMIT + 500)
    node: dict[str, Any] = mk("f9", 9, "function", output=long, input={"q": "short"})
    detail = node_detail(node)
    assert detail["output"]["truncated"] and detail["output"]["length"] == len(long)
    assert len(detail["output"]["text"]) <= DETAIL_LIMIT
    shown = '{\n  "q": "short"\n}'  # anything but a string: as indented JSON
    assert detail["input"] == {"text": shown, "length": len(shown), "truncated": False}
    more = node_detail(node, full_field="output")
    assert more["output"]["text"] == long and not more["output"]["truncated"]
    with pytest.raises(ValueError, match="unknown detail field"):
        node_detail(node, full_field="password")
