"""Settling a notebook's session-derived parts before nbdime merges the rest
(``nbmerge``), as data: ``metadata.openprogram`` merged field by field, a cell both sides
re-ran keeps this side's turn output (an embedded bundle only theirs has appended), and
what people wrote is left for nbdime."""

from __future__ import annotations

import copy
from typing import Any

from openprogram_magics.nbmerge import merge_session_metadata, resolve_derived
from openprogram_magics.notebook import METADATA_KEY, MIME_TYPE
from openprogram_magics.sharing import BUNDLE_MIME


def turn_output(turn: int) -> dict[str, Any]:
    part = {"session_id": "nb_shared", "turn": turn, "version": 1}
    return {"output_type": "display_data", "data": {MIME_TYPE: part}, "metadata": {}}


def code(cid: str, source: str, outputs: list[dict[str, Any]], count: int | None = None):  # type: ignore[no-untyped-def]
    return {
        "cell_type": "code",
        "id": cid,
        "source": source,
        "outputs": outputs,
        "execution_count": count,
        "metadata": {},
    }


def notebook(meta: dict[str, Any], *cells: dict[str, Any]) -> dict[str, Any]:
    return {"cells": list(cells), "metadata": {METADATA_KEY: meta}, "nbformat": 4}


def test_session_metadata_merges_field_by_field_and_ours_wins_a_clash() -> None:
    base = {"session_id": "nb_shared", "provider": "test", "last_turn_id": "n_1", "version": 1}
    ours = {**base, "model": "small", "provider": "openai"}
    theirs = {**base, "remote": "origin", "provider": "anthropic"}
    merged, note = merge_session_metadata(base, ours, theirs)
    assert note is None
    assert merged == {
        "session_id": "nb_shared",
        "provider": "openai",  # both changed it: this clone's
        "model": "small",
        "remote": "origin",
        "version": 1,
    }  # last_turn_id: files no longer keep it
    merged, note = merge_session_metadata(
        base, {**base, "session_id": "nb_mine"}, {**base, "session_id": "nb_theirs"}
    )
    assert merged is None and note is not None and "nb_mine" in note and "nb_theirs" in note
    assert merge_session_metadata(base, None, None) == (None, None)


def test_a_cell_both_sides_reran_keeps_our_turn_output_and_their_bundle() -> None:
    meta = {"session_id": "nb_shared", "version": 1}
    cell = "%%openprogram\ntriage('crash')"
    bundle = {"output_type": "display_data", "data": {BUNDLE_MIME: "..."}, "metadata": {}}
    base = notebook(meta, code("a", cell, [turn_output(1)], 1), code("b", "x = 1", []))
    ours = notebook(meta, code("a", cell, [turn_output(2)], 2), code("b", "x = 2", []))
    theirs = notebook(meta, code("a", cell, [turn_output(3), bundle], 5), code("b", "x = 3", []))
    written = copy.deepcopy((ours["cells"][1], theirs["cells"][1]))
    done = resolve_derived(base, ours, theirs)
    assert done.cells == ["a"] and len(done.notes) == 1
    kept = [turn_output(2), bundle]
    assert ours["cells"][0]["outputs"] == theirs["cells"][0]["outputs"] == kept
    assert theirs["cells"][0]["execution_count"] == 2
    assert base["cells"][0]["outputs"] == kept  # nbdime then sees no change there
    assert (ours["cells"][1], theirs["cells"][1]) == written  # what people wrote: nbdime's


def test_a_plain_cell_both_sides_reran_is_left_to_nbdime() -> None:
    meta = {"session_id": "nb_shared", "version": 1}
    printed = [{"output_type": "stream", "name": "stdout", "text": t} for t in ("1", "2", "3")]
    base, ours, theirs = (notebook(meta, code("p", "print(n)", [out])) for out in printed)
    assert resolve_derived(base, ours, theirs).cells == []
    assert theirs["cells"][0]["outputs"] == [printed[2]]
