"""The merge driver's write never loses ``ours`` (review of issue 35's driver).

A version may carry a lone surrogate as a JSON escape (``"\\ud800"``: valid JSON that
other tools write, e.g. ``json.dumps`` with its default ``ensure_ascii``); it cannot be
encoded as UTF-8, and the driver used to open ``%A`` for writing before encoding, so the
failure left it empty and ``git merge-file`` then merged an empty "ours": our cells gone.
"""

from __future__ import annotations

import json
from pathlib import Path

from openprogram_magics.gitmerge import merge_notebook


def _nb(*cells: tuple[str, str]) -> dict[str, object]:
    return {
        "cells": [
            {
                "cell_type": "code",
                "id": cid,
                "metadata": {},
                "source": src,
                "outputs": [],
                "execution_count": None,
            }
            for cid, src in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def test_a_lone_surrogate_in_one_version_keeps_both_sides_cells(tmp_path: Path) -> None:
    base, ours, theirs = tmp_path / "O", tmp_path / "A", tmp_path / "B"
    base.write_text(json.dumps(_nb(("a", "x"))))
    ours.write_text(json.dumps(_nb(("a", "x"), ("mine", "print('\ud800 mine')"))))
    theirs.write_text(json.dumps(_nb(("a", "x"), ("theirs", "print('theirs')"))))

    status = merge_notebook(str(base), str(ours), str(theirs), "7", "nb.ipynb")

    assert status == 0
    merged = json.loads(ours.read_bytes().decode("utf-8"))
    sources = ["".join(c["source"]) for c in merged["cells"]]
    assert sources == ["x", "print('\ud800 mine')", "print('theirs')"]
