"""Branches side by side in the whole-session view (issue 24): each branch of turns is
named with who ran it and when, in its lane's colour, in the text tree, the static HTML
and (the same rule in dag.js) the widget; a session of one line names none."""

from __future__ import annotations

import time
from typing import Any

from openprogram.context.nodes import COMPLETED, make_call
from openprogram.view import compute_layout
from openprogram.view.branches import branch_lines, branches
from openprogram.view.static import lane_color, render_static_html, render_text_tree

T0 = 1_800_000_000  # 2027-01-15


def turn(name: str, pred: str | None, who: str, at: float) -> dict[str, Any]:
    node = make_call("turn", name, status=COMPLETED).to_dict()
    node["predecessor"] = pred
    node["metadata"]["author"] = {"name": who, "email": f"{who.lower()}@example.org"}
    node["created_at"] = at
    return node


def forked() -> list[dict[str, Any]]:
    """root → cell [1] (Ada) → cell [2] (Ada), and cell [3] (Bob) from cell [1] → cell [4]
    (Bob): HEAD on Bob's branch, so Ada's cell [2] is the side lane."""
    root = make_call("root", "root", status=COMPLETED).to_dict()
    root["created_at"] = T0
    one = turn("cell [1]", root["id"], "Ada", T0 + 60)
    two = turn("cell [2]", one["id"], "Ada", T0 + 120)
    three = turn("cell [3]", one["id"], "Bob", T0 + 3600)
    four = turn("cell [4]", three["id"], "Bob", T0 + 7200)
    nodes = [root, one, two, three, four]
    for seq, node in enumerate(nodes):
        node["seq"] = seq
    return nodes


def when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def test_each_branch_is_named_with_its_authors_and_times() -> None:
    nodes = forked()
    lay = compute_layout(nodes, nodes[-1]["id"])
    found = branches(lay)
    assert [(b.lane, b.turns, b.authors) for b in found] == [
        (0, 3, ["Ada", "Bob"]),  # the line from the start to HEAD: cells 1, 3, 4
        (1, 1, ["Ada"]),  # cell [2], beside it
    ]
    assert found[1].fork == nodes[1]["id"] and found[1].fork_name == "cell [1]"
    lines = dict(branch_lines(lay))
    assert lines[0] == f"from the start · 3 turns · by Ada, Bob · {when(T0)} – {when(T0 + 7200)}"
    assert lines[1] == f"branch from cell [1] · 1 turn · by Ada · {when(T0 + 120)}"

    text = render_text_tree(nodes, nodes[-1]["id"])
    assert f"⑂ branch from cell [1] · 1 turn · by Ada · {when(T0 + 120)}" in text
    html = render_static_html(nodes, nodes[-1]["id"])
    assert html.count('class="op-static-branch"') == 2
    assert f'<span style="color:{lane_color(1)}">●</span> branch from cell [1]' in html


def test_one_line_names_no_branch_and_a_view_cut_short_says_so() -> None:
    nodes = forked()
    line = [nodes[0], nodes[1], nodes[3], nodes[4]]  # no fork
    assert branch_lines(compute_layout(line, line[-1]["id"])) == []
    assert "⑂" not in render_text_tree(line, line[-1]["id"])
    # a view that starts after the fork point (a window of the newest turns)
    window = [nodes[2], nodes[3], nodes[4]]
    texts = [t for _, t in branch_lines(compute_layout(window, nodes[4]["id"]))]
    assert texts and all(t.startswith("from older turns") for t in texts), texts


def test_a_stored_session_with_a_branch(db: Any) -> None:
    """Through the store: a turn continued from the first (``--from``) is its own branch,
    and the author the store records is named."""
    session = db.create_session("s_branches")
    tops = []
    for t, pred in enumerate([None, 0, 0]):
        turn_no = session.begin_turn()
        top = make_call("turn", f"cell [{t + 1}]", status=COMPLETED)
        if pred is not None:
            top.predecessor = tops[pred].id
        session.append(top, turn=turn_no, advance_head=True)
        tops.append(top)
    session.commit("three turns, a fork")
    nodes = [c.to_dict() for c in session.nodes()]
    text = render_text_tree(nodes, session.head_id)
    named = [ln for ln in text.splitlines() if "⑂" in ln]
    assert len(named) == 2, text
    by = nodes[-1]["metadata"]["author"]["name"]
    assert any("branch from cell [1] · 1 turn" in ln and f"by {by}" in ln for ln in named), text
