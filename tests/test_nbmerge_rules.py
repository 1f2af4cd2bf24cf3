"""``nbmerge`` by example: the notebook's ``metadata.openprogram`` merged field by field,
and a code cell both sides edited left to nbdime."""

from __future__ import annotations

from typing import Any

import nbformat

from openprogram_magics.nbmerge import merge_session_metadata, resolve_derived


def test_metadata_merge_rules() -> None:
    base = {"session_id": "nb_aaaaaaaaaa", "version": 1, "last_turn_id": "n_1"}
    ours = {"session_id": "nb_aaaaaaaaaa", "version": 1, "provider": "test", "remote": "r1"}
    theirs = {"session_id": "nb_aaaaaaaaaa", "version": 1, "remote": "r2", "model": "m"}
    merged, note = merge_session_metadata(base, ours, theirs)
    assert note is None
    assert merged == {
        "session_id": "nb_aaaaaaaaaa",
        "version": 1,
        "provider": "test",
        "remote": "r1",  # both set it: ours
        "model": "m",  # only theirs set it
    }
    one_side = merge_session_metadata(base, {**base, "session_id": "nb_bbbbbbbbbb"}, base)[0]
    assert one_side is not None and one_side["session_id"] == "nb_bbbbbbbbbb"
    merged, note = merge_session_metadata(
        base, {**base, "session_id": "nb_bbbbbbbbbb"}, {**base, "session_id": "nb_cccccccccc"}
    )
    assert merged is None and note is not None and "nb_bbbbbbbbbb" in note


def test_a_code_cell_both_sides_edited_is_left_to_nbdime() -> None:
    def nb(source: str, text: str) -> dict[str, Any]:
        cell = nbformat.v4.new_code_cell(source)
        cell.id = "c1"
        cell.outputs = [nbformat.v4.new_output("stream", text=text)]
        return dict(nbformat.v4.new_notebook(cells=[cell]))

    base, ours, theirs = nb("x = 1", "1"), nb("x = 2", "2"), nb("x = 3", "3")
    resolution = resolve_derived(base, ours, theirs)
    assert resolution.cells == []
    assert theirs["cells"][0]["outputs"][0]["text"] == "3"  # untouched: a real conflict
