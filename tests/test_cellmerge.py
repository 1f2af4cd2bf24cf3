"""The cell-by-cell three-way merge (``cellmerge``), as data; its guard, ``nbthreeway``, is
in ``test_nbthreeway.py``."""

from __future__ import annotations

from typing import Any

import nbformat
import pytest

from openprogram_magics.cellmerge import fallback_merge, merge_cells, usable_ids
from openprogram_magics.notebook import MIME_TYPE


def cell(cid: str, source: str = "", turn: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cell_type": "code",
        "id": cid,
        "metadata": {},
        "source": source or f"x_{cid} = 1",
        "outputs": [],
        "execution_count": None,
    }
    if turn is not None:
        part = {"session_id": "nb_aaaaaaaaaa", "turn": turn, "version": 1}
        out["outputs"] = [
            {"output_type": "display_data", "data": {MIME_TYPE: part}, "metadata": {}}
        ]
    return out


def ids(cells: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for c in cells]


def test_cells_each_side_added_at_one_place_are_all_kept_each_sides_order_kept() -> None:
    base = [cell("a"), cell("z")]
    ours = [cell("a"), cell("o1"), cell("o2"), cell("z")]
    theirs = [cell("a"), cell("t1"), cell("z"), cell("t2")]
    done = merge_cells(base, ours, theirs)
    assert done.conflicts == []
    assert ids(done.cells) == ["a", "o1", "o2", "t1", "z", "t2"]


def test_added_run_cells_interleave_in_turn_order() -> None:
    base = [cell("a")]
    ours = [cell("a"), cell("o1", turn=3), cell("o2", turn=6)]
    theirs = [cell("a"), cell("t1", turn=4), cell("t2", turn=5)]
    assert ids(merge_cells(base, ours, theirs).cells) == ["a", "o1", "t1", "t2", "o2"]
    assert ids(merge_cells(base, theirs, ours).cells) == ["a", "o1", "t1", "t2", "o2"]


def test_a_one_sided_change_is_taken_and_execution_counts_alone_are_no_change() -> None:
    base = [cell("a", "x = 1"), cell("b")]
    theirs = [cell("a", "x = 2"), cell("b")]
    ours = [cell("a", "x = 1"), {**cell("b"), "execution_count": 7}]
    done = merge_cells(base, ours, theirs)
    assert done.conflicts == []
    assert [c["source"] for c in done.cells] == ["x = 2", "x_b = 1"]


def test_a_move_on_one_side_is_kept() -> None:
    base = [cell("a"), cell("b"), cell("c")]
    theirs = [cell("c"), cell("a"), cell("b")]
    ours = [cell("a"), cell("b"), cell("n"), cell("c")]
    assert ids(merge_cells(base, ours, theirs).cells) == ["c", "a", "b", "n"]


def test_both_sides_adding_the_same_cell_keep_one() -> None:
    done = merge_cells([], [cell("a")], [cell("a")])
    assert ids(done.cells) == ["a"] and done.conflicts == []


def test_a_cell_both_changed_goes_to_the_helper_then_to_a_conflict_block() -> None:
    base, ours, theirs = [cell("a", "x = 1")], [cell("a", "x = 2")], [cell("a", "x = 3")]
    merged = merge_cells(base, ours, theirs, both_changed=lambda b, o, t: {**o, "source": "x"})
    assert [c["source"] for c in merged.cells] == ["x"] and merged.conflicts == []
    done = merge_cells(base, ours, theirs, both_changed=lambda b, o, t: None)
    assert len(done.conflicts) == 1
    assert [c["source"] for c in done.cells][1::2] == ["x = 2", "x = 3"]
    assert "<<<<<<< ours" in done.cells[0]["source"] and "theirs" in done.cells[-1]["source"]
    assert usable_ids(done.cells)


@pytest.mark.parametrize("with_ids", [True, False])
def test_the_fallback_keeps_the_common_ends_and_is_a_valid_notebook(with_ids: bool) -> None:
    ours = [cell("a"), cell("o"), cell("z")]
    theirs = [cell("a"), cell("t"), cell("z")]
    if not with_ids:
        for c in (*ours, *theirs):
            del c["id"]
    done = fallback_merge(ours, theirs, with_ids)
    sources = [c["source"] for c in done.cells]
    assert sources[0] == "x_a = 1" and sources[-1] == "x_z = 1"
    assert "x_o = 1" in sources and "x_t = 1" in sources and len(sources) == 7
    nb = {
        "cells": done.cells,
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5 if with_ids else 4,
    }
    nbformat.validate(nbformat.from_dict(nb))
