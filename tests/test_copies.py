"""Which notebook a kernel's notebook is a copy of (:mod:`openprogram_magics.copies`), with
real files: the notebook is found by name in the kernel's working folder, which ``%cd``
may have moved to a folder holding another notebook of the same name."""

from __future__ import annotations

import json
from pathlib import Path

from openprogram_magics.copies import original_of
from openprogram_magics.sessions import place_of


def notebook(path: Path, session_id: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"openprogram": {"session_id": session_id, "version": 1}}
    path.write_text(json.dumps({"metadata": meta, "cells": [], "nbformat": 4}))
    return path


def test_a_notebook_whose_kernel_changed_folder_is_not_taken_for_a_copy(tmp_path: Path) -> None:
    report = notebook(tmp_path / "explore" / "report.ipynb", "nb_explore0001")
    notebook(tmp_path / "model" / "report.ipynb", "nb_model00001")  # another project's
    # the frontend sends the path relative to the server's root; the kernel did `%cd ../model`
    here = place_of("notebook explore/report.ipynb", cwd=tmp_path / "model")

    assert original_of("nb_explore0001", here, f"notebook {report}") is None


def test_a_real_copy_is_still_found(tmp_path: Path) -> None:
    review = notebook(tmp_path / "review.ipynb", "nb_review0001")
    notebook(tmp_path / "review-copy.ipynb", "nb_review0001")
    here = place_of("notebook review-copy.ipynb", cwd=tmp_path)

    assert original_of("nb_review0001", here, f"notebook {review}") == review


def test_the_same_file_under_another_path_is_not_a_copy(tmp_path: Path) -> None:
    review = notebook(tmp_path / "review.ipynb", "nb_review0001")
    (tmp_path / "shared").mkdir()
    linked = tmp_path / "shared" / "review.ipynb"
    linked.hardlink_to(review)  # as a bind mount shows it too: one file
    here = place_of("notebook review.ipynb", cwd=tmp_path / "shared")

    assert original_of("nb_review0001", here, f"notebook {review}") is None
