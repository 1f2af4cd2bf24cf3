"""The three-way merge of whole notebooks (``nbthreeway``), as data: nbdime for a cell
both sides edited, every cell of both sides kept between markers when nbdime fails, the
notebook's metadata merged key by key.  The cell-by-cell merge is ``test_cellmerge.py``."""

from __future__ import annotations

from typing import Any

import nbformat
from test_cellmerge import cell

from openprogram_magics.nbthreeway import merge_documents, merge_metadata, nbdime_document


def test_the_nbdime_helper_merges_edits_to_different_parts_of_a_cell() -> None:
    def nb(source: str, tags: list[str]) -> dict[str, Any]:
        c = cell("a", source)
        c["metadata"] = {"tags": tags} if tags else {}
        return dict(nbformat.v4.new_notebook(cells=[c]))

    base, ours, theirs = nb("x = 1", []), nb("x = 2", []), nb("x = 1", ["keep"])
    done = merge_documents(base, ours, theirs)
    assert done.conflicts == []
    assert done.notebook["cells"][0]["source"] == "x = 2"
    assert done.notebook["cells"][0]["metadata"] == {"tags": ["keep"]}


def test_when_nbdime_crashes_every_cell_of_both_sides_is_kept_between_markers() -> None:
    """nbdime 4.0.4 aligns two similar added cells as one and raises in nbformat.validate."""
    base = nbformat.v4.new_notebook(cells=[cell("a", "def triage(x): ...")])
    ours = nbformat.v4.new_notebook(cells=[*base.cells, cell("o", 'triage("crash when printing")')])
    theirs = nbformat.v4.new_notebook(cells=[*base.cells, cell("t", 'triage("crash when saving")')])
    done = nbdime_document(dict(base), dict(ours), dict(theirs), 7)
    assert done.conflicts and "nbdime could not merge it" in done.notes[0]
    sources = [c["source"] for c in done.notebook["cells"]]
    assert 'triage("crash when printing")' in sources and 'triage("crash when saving")' in sources
    assert any("<<<<<<<" in s for s in sources)
    nbformat.validate(nbformat.from_dict(done.notebook))


def test_notebook_metadata_merges_key_by_key() -> None:
    base = {"kernelspec": {"name": "python3"}, "widgets": {"w": 1}, "old": 1}
    ours = {"kernelspec": {"name": "python3"}, "widgets": {"w": 2}, "old": 1, "mine": 1}
    theirs = {"kernelspec": {"name": "py311"}, "widgets": {"w": 3}, "theirs": 1}
    merged, notes = merge_metadata(base, ours, {"metadata": theirs})
    assert merged == {
        "kernelspec": {"name": "py311"},
        "widgets": {"w": 2},
        "mine": 1,
        "theirs": 1,
    }  # "old": deleted there, unchanged here
    assert len(notes) == 1 and "widgets" in notes[0]
