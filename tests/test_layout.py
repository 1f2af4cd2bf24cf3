"""Layout of the session DAG on hand-built graphs (pure: no widget, no kernel)."""

from __future__ import annotations

from typing import Any

from dag_sample import sample_nodes

from openprogram.view.layout import (
    FLAG_CYCLE,
    FLAG_DUPLICATE,
    FLAG_MISSING_CALLER,
    FLAG_MISSING_PREDECESSOR,
    FLAG_UNKNOWN_KIND,
    compute_layout,
)
from openprogram.view.placed import Layout


def mk(
    nid: str,
    seq: int,
    kind: str = "function",
    *,
    caller: str | None = None,
    pred: str | None = None,
    status: str = "completed",
) -> dict[str, Any]:
    return {
        "v": 1,
        "id": nid,
        "seq": seq,
        "turn": 0,
        "role": "code",
        "name": nid,
        "input": None,
        "output": None,
        "caller": caller,
        "predecessor": pred,
        "metadata": {"kind": kind, "status": status},
        "created_at": 0.0,
    }


def rows(layout: Layout) -> list[str]:
    """Visible node ids, top to bottom."""
    return [p.id for p in sorted(layout.visible(), key=lambda p: p.y or 0)]


def conversation() -> list[dict[str, Any]]:
    """root → t1 (f1 → [l1, l2]) → t2 (f2) → t3, listed out of seq order on purpose."""
    return [
        mk("t3", 9, "turn", pred="t2"),
        mk("l2", 5, "llm", caller="f1", pred="l1"),
        mk("root", 0, "root"),
        mk("t1", 1, "turn", pred="root"),
        mk("f1", 2, caller="t1"),
        mk("l1", 3, "llm", caller="f1"),
        mk("t2", 6, "turn", pred="t1"),
        mk("f2", 7, caller="t2"),
    ]


def test_trunk_runs_down_lane_zero_with_calls_nested_under_their_caller() -> None:
    layout = compute_layout(conversation(), "t3")
    assert rows(layout) == ["root", "t1", "f1", "l1", "l2", "t2", "f2", "t3"]
    place = layout.placed
    assert {place[t].x for t in ("root", "t1", "t2", "t3")} == {0}
    assert {place[t].lane for t in place} == {0}
    assert (place["f1"].x, place["l1"].x, place["l2"].x) == (1, 2, 2)  # indented per level
    assert (place["f1"].caller, place["l1"].caller, place["t2"].pred) == ("t1", "f1", "t1")
    assert place["f1"].children == 2 and place["t1"].descendants == 3
    assert ("t1", "t2", "pred") in layout.edges() and ("f1", "l2", "caller") in layout.edges()
    assert layout.head_id == "t3"


def test_nested_siblings_follow_seq_and_each_subtree_stays_together() -> None:
    nodes = [
        mk("t", 0, "turn"),
        mk("b", 4, caller="t"),
        mk("a", 1, caller="t"),
        mk("a2", 3, "llm", caller="a"),
        mk("a1", 2, "llm", caller="a"),
    ]
    assert rows(compute_layout(nodes)) == ["t", "a", "a1", "a2", "b"]


def test_a_fork_opens_a_new_lane_and_the_branch_to_head_is_the_trunk() -> None:
    nodes = [
        *conversation(),
        mk("t2b", 10, "turn", pred="t1"),  # a second continuation of t1: a branch
        mk("fb", 11, caller="t2b"),
        mk("t3b", 12, "turn", pred="t2b"),
    ]
    layout = compute_layout(nodes, "t3")
    lanes = {nid: p.lane for nid, p in layout.placed.items()}
    assert lanes["t1"] == lanes["t2"] == lanes["t3"] == 0
    assert lanes["t2b"] == lanes["t3b"] == lanes["fb"] == 1  # the branch keeps its lane
    assert layout.lanes == 2
    assert layout.placed["t2b"].x == 1
    assert layout.placed["fb"].x == 2  # nested calls sit right of every lane
    assert layout.placed["f1"].x == 2

    moved = compute_layout(nodes, "t3b")  # HEAD on the branch: now it is the trunk
    assert moved.placed["t3b"].lane == 0 and moved.placed["t2"].lane == 1


def test_a_finished_branch_gives_its_lane_to_a_later_one() -> None:
    nodes = [mk("root", 0, "root")]
    prev = "root"
    for i in range(1, 7):
        nodes.append(mk(f"t{i}", i * 10, "turn", pred=prev))
        if i % 2:
            nodes.append(mk(f"b{i}", i * 10 + 1, "turn", pred=prev))  # a one-node branch
        prev = f"t{i}"
    layout = compute_layout(nodes, "t6")
    assert {layout.placed[f"b{i}"].lane for i in (1, 3, 5)} == {1}
    assert layout.lanes == 2

    nodes.append(mk("b1x", 12, "turn", pred="root"))  # overlaps b1's rows: needs its own lane
    layout = compute_layout(nodes, "t6")
    assert (layout.placed["b1"].lane, layout.placed["b1x"].lane) == (1, 2)


def test_folding_hides_the_subtree_reports_the_count_and_closes_the_gap() -> None:
    layout = compute_layout(conversation(), "t3", folded={"f1"})
    place = layout.placed
    assert rows(layout) == ["root", "t1", "f1", "t2", "f2", "t3"]
    assert place["l1"].hidden and place["l1"].y is None
    assert place["f1"].folded and place["f1"].hidden_count == 2
    assert place["t2"].y == 3
    assert layout.rows == 6

    outer = compute_layout(conversation(), "t3", folded={"t1", "f1"})
    assert rows(outer) == ["root", "t1", "t2", "f2", "t3"]
    assert outer.placed["t1"].hidden_count == 3
    assert not outer.placed["f2"].folded and outer.placed["t3"].hidden_count == 0


def test_last_turns_folds_all_but_the_most_recent_turns() -> None:
    nodes = [mk("root", 0, "root")]
    prev = "root"
    for i in range(1, 11):
        nodes += [mk(f"t{i}", i * 10, "turn", pred=prev), mk(f"f{i}", i * 10 + 1, caller=f"t{i}")]
        prev = f"t{i}"
    layout = compute_layout(nodes, "t10", last_turns=3)
    folded = {p.id for p in layout.placed.values() if p.folded}
    assert folded == {f"t{i}" for i in range(1, 8)}
    assert [p.id for p in layout.visible() if p.depth > 0] == ["f8", "f9", "f10"]
    assert all(not layout.placed[f"t{i}"].hidden for i in range(1, 11))  # turns stay listed
    assert layout.folded >= {"t1", "t7"}
    assert compute_layout(nodes, "t10", last_turns=0).rows == 11
    assert compute_layout(nodes, "t10", last_turns=50).rows == 21


def test_a_caller_cycle_is_cut_and_flagged_instead_of_looping() -> None:
    nodes = [
        mk("t", 0, "turn"),
        mk("a", 1, caller="b"),
        mk("b", 2, caller="a"),
        mk("c", 3, caller="b"),
        mk("s", 4, caller="s"),  # its own caller
    ]
    layout = compute_layout(nodes)
    assert set(layout.placed) == {"t", "a", "b", "c", "s"}
    cut = [p.id for p in layout.placed.values() if FLAG_CYCLE in p.flags]
    assert sorted(cut) == ["a", "s"]
    assert layout.placed["b"].caller == "a" and layout.placed["c"].caller == "b"
    assert sorted(p.y for p in layout.placed.values() if p.y is not None) == list(range(5))


def test_a_predecessor_cycle_between_turns_still_lays_out() -> None:
    nodes = [mk("x", 1, "turn", pred="y"), mk("y", 2, "turn", pred="x")]
    layout = compute_layout(nodes, "y")
    assert rows(layout) == ["x", "y"]
    assert FLAG_CYCLE in layout.placed["x"].flags
    assert layout.placed["y"].pred == "x"


def test_missing_caller_and_predecessor_are_flagged_and_placed() -> None:
    nodes = [
        mk("root", 0, "root"),
        mk("t1", 1, "turn", pred="gone"),
        mk("orphan", 2, caller="never-written"),
        mk("orphan2", 3, caller="never-written", pred="orphan"),
    ]
    layout = compute_layout(nodes, "t1")
    place = layout.placed
    assert FLAG_MISSING_PREDECESSOR in place["t1"].flags
    assert FLAG_MISSING_CALLER in place["orphan"].flags
    assert place["orphan"].caller is None and place["orphan"].y is not None
    assert place["orphan2"].pred == "orphan"  # the orphans keep their own chain
    assert place["orphan"].lane == place["orphan2"].lane != place["t1"].lane


def test_duplicates_unknown_kinds_and_junk_entries_do_not_break_the_layout() -> None:
    first = mk("d", 1, caller="t")
    second = {**mk("d", 1, caller="t"), "name": "rewritten"}
    nodes: list[Any] = [
        mk("t", 0, "turn"),
        first,
        second,
        mk("w", 2, "wizard", caller="t"),
        None,
        "not a node",
        {"seq": "x", "metadata": "junk"},
    ]
    layout = compute_layout(nodes)
    assert layout.skipped == 2
    assert layout.source["d"]["name"] == "rewritten"  # the last copy wins
    assert FLAG_DUPLICATE in layout.placed["d"].flags
    assert layout.placed["w"].kind == "wizard" and FLAG_UNKNOWN_KIND in layout.placed["w"].flags
    junk = layout.placed["?6"]
    assert {"bad-id", "bad-seq", "bad-metadata"} <= set(junk.flags)
    assert layout.rows == 4


def test_five_thousand_nodes_all_get_distinct_rows() -> None:
    nodes = sample_nodes(5000, fork_every=9)
    layout = compute_layout(nodes, None)
    ys = [p.y for p in layout.placed.values()]
    assert len(ys) == 5000 and sorted(ys) == list(range(5000))  # type: ignore[type-var]
    assert layout.lanes >= 2
    assert not any(p.flags for p in layout.placed.values())


def test_the_layout_does_not_depend_on_the_order_the_nodes_come_in() -> None:
    """A session's nodes come in seq order (the quick path); listed in any other order
    (a merge, a hand-built list) they get the same rows, lanes, folds and counts."""
    import random

    nodes = sample_nodes(600, fork_every=4)
    head = [n["id"] for n in nodes if n["metadata"]["kind"] == "turn"][-3]  # on a branch
    shuffled = nodes[:]
    random.Random(3).shuffle(shuffled)
    for folds in ({"last_turns": 5}, {"folded": [nodes[40]["id"]]}):
        listed = compute_layout(nodes, head, **folds)  # type: ignore[arg-type]
        mixed = compute_layout(shuffled, head, **folds)  # type: ignore[arg-type]
        assert list(listed.placed) == list(mixed.placed)  # row order
        got = {nid: (p.order, p.lane, p.x, p.y, p.children, p.descendants, p.hidden)
               for nid, p in mixed.placed.items()}  # fmt: skip
        assert got == {nid: (p.order, p.lane, p.x, p.y, p.children, p.descendants, p.hidden)
                       for nid, p in listed.placed.items()}  # fmt: skip
        assert (listed.lanes, listed.rows) == (mixed.lanes, mixed.rows) and listed.lanes > 1


def test_both_layouts_read_kind_and_status_as_a_node_does() -> None:
    """A session's list (laid out as it comes) and the same nodes shuffled (repaired first)
    give every node the kind and status ``Call`` gives it, defaults included."""
    import random

    from openprogram.context.nodes import Call

    nodes = [mk("root", 0, "root"), mk("t1", 1, "turn", pred="root")]
    for seq, meta in enumerate(
        [None, {}, {"kind": "llm"}, {"status": "error"}, {"kind": "tool", "status": "running"}],
        start=2,
    ):
        nodes.append({**mk(f"c{seq}", seq, caller="t1"), "metadata": meta})
    shuffled = nodes[:]
    random.Random(1).shuffle(shuffled)
    want = {n["id"]: (Call.from_dict(n).kind, Call.from_dict(n).status) for n in nodes}
    for listed in (nodes, shuffled):
        placed = compute_layout(listed, "t1").placed
        assert {nid: (p.kind, p.status) for nid, p in placed.items()} == want


def interleaved(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``nodes`` as two writers list them: now and then a turn's last call is recorded
    after the next turn began (seqs renumbered: the list stays in seq order)."""
    out = [dict(n) for n in nodes]
    for i in range(len(out) - 2, 0, -1):
        if out[i]["caller"] is not None and out[i + 1]["caller"] is None and i % 7 == 0:
            out[i], out[i + 1] = out[i + 1], out[i]
    for seq, node in enumerate(out):
        node["seq"] = seq
    return out


def test_one_engine_places_every_list_the_same_way() -> None:
    """A session's list, the same with interleaved turns, shuffled, or with junk beside it:
    one engine lays them all out (columns, a ``Placed`` made when asked for), with the same
    rows, lanes and folds."""
    from openprogram.view.placed import Rows

    nodes = sample_nodes(400, fork_every=5)
    head = [n["id"] for n in nodes if n["metadata"]["kind"] == "turn"][-2]
    mixed = interleaved(nodes)
    assert [n["id"] for n in mixed] != [n["id"] for n in nodes]
    shuffled = nodes[:]
    import random

    random.Random(5).shuffle(shuffled)
    with_junk: list[Any] = [*nodes, None, "junk"]
    want = compute_layout(nodes, head, last_turns=4)

    def seen(layout: Layout) -> list[tuple[Any, ...]]:
        return [(p.id, p.order, p.lane, p.x, p.y, p.descendants, p.hidden)
                for p in layout.placed.values()]  # fmt: skip

    for listed in (mixed, shuffled, with_junk):
        layout = compute_layout(listed, head, last_turns=4)
        assert isinstance(layout.placed, Rows)
        assert seen(layout) == seen(want)
        assert (layout.lanes, layout.rows, layout.folded) == (want.lanes, want.rows, want.folded)
    assert compute_layout(with_junk, head).skipped == 2
