"""Issue 24 in a real kernel (nbclient, ``openprogram run``): ``%%openprogram --from NODE``
starts a branch headless, and ``--only-stale`` after one docstring edit sends exactly that
cell's calls to the provider and replays the rest."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from openprogram.cli import main as cli_main
from openprogram.store.session.store import SessionStore
from tests.test_compare import AGENTS, OLD_DOC

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]

DEFS = "%load_ext openprogram_magics\n%openprogram provider test\n" + AGENTS
CELLS = [
    '%%openprogram\ntriage("the app crashes on save")',
    '%%openprogram\ntriage("add a dark mode")',
    '%%openprogram\nsummarize("today")\nsummarize("this week")',
]


def notebook(path: Path, doc: str, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nb.cells = [
        nbformat.v4.new_code_cell(
            DEFS.replace("{doc}", OLD_DOC).replace("Summarize the day's tickets in one line.", doc)
        )
    ]
    nb.cells += [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, path)
    return path


def session_of(path: Path) -> str:
    return str(nbformat.read(path, as_version=4).metadata["openprogram"]["session_id"])


def carry(src: Path, dst: Path) -> None:
    """``dst`` continues ``src``'s session (its metadata and its turns' outputs)."""
    old, new = nbformat.read(src, as_version=4), nbformat.read(dst, as_version=4)
    new.metadata["openprogram"] = old.metadata["openprogram"]
    for a, b in zip(old.cells, new.cells, strict=True):
        b.outputs = a.outputs
    nbformat.write(new, dst)


def test_only_stale_runs_the_edited_cell_live_and_replays_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("OPENPROGRAM_HOME", str(home))
    nb = notebook(tmp_path / "nb.ipynb", "Summarize the tickets in one line.", CELLS)
    assert cli_main(["--home", str(home), "run", str(nb)]) == 0
    sid = session_of(nb)

    edited = notebook(tmp_path / "edited.ipynb", "Summarize the tickets in one word.", CELLS)
    carry(nb, edited)
    capsys.readouterr()
    assert cli_main(["--home", str(home), "run", str(edited), "--only-stale"]) == 0
    said = capsys.readouterr().out
    # the run names the cells it ran live, in one line
    assert 'openprogram: ran live (stale): cell [4] (summarize("today"))\n' in said
    # its turns are a local replay session beside the recorded run (issue 35 item 4)
    (fork,) = [p.name for p in (home / "sessions").glob(f"{sid}-replay-*")]
    store = SessionStore(home)
    nodes = store.open(fork).nodes()
    assert len([n for n in store.open(sid).nodes() if n.kind == "turn"]) == 3
    store.close()
    runs = sorted({n.metadata["run"] for n in nodes if n.kind == "turn"})
    assert len(runs) == 2
    by_id = {n.id: n for n in nodes}

    def turn_of(node_id: str | None) -> str | None:
        while node_id is not None and by_id[node_id].kind not in ("turn", "root"):
            node_id = by_id[node_id].caller
        return node_id

    first_run = [n for n in nodes if n.kind == "turn"][:3]
    again = [n for n in nodes if n.kind == "turn"][3:]
    assert len(again) == 3
    llms = [n for n in nodes if n.kind == "llm" and turn_of(n.caller) in {t.id for t in again}]
    # answered by the provider (its model), or from the recording (model "replay")
    live = [n for n in llms if n.metadata.get("model") == "test"]
    replayed = [n for n in llms if n.metadata.get("model") == "replay"]
    assert [turn_of(n.caller) for n in live] == [again[2].id, again[2].id]  # the edited cell
    assert len(replayed) == 2  # the two triage cells
    assert all(n.output for n in llms)
    assert len(first_run) == 3

    # the diff of the two runs names the edited docstring and nothing else
    capsys.readouterr()
    assert cli_main(["--home", str(home), "sessions", "diff", fork, "--runs"]) == 0
    out = capsys.readouterr().out
    assert "the docstring of `summarize` changed" in out
    assert "triage" not in "".join(ln for ln in out.splitlines() if "docstring" in ln)


def test_from_node_makes_a_branch_headless(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("OPENPROGRAM_HOME", str(home))
    nb = notebook(tmp_path / "nb.ipynb", "Summarize.", CELLS[:2])
    assert cli_main(["--home", str(home), "run", str(nb)]) == 0
    sid = session_of(nb)
    store = SessionStore(home)
    first = [n for n in store.open(sid).nodes() if n.kind == "turn"]
    store.close()
    branch = notebook(
        tmp_path / "branch.ipynb",
        "Summarize.",
        [
            f'%%openprogram --from {first[0].id}\ntriage("export to csv")',
            '%%openprogram\ntriage("and to json")',
        ],
    )
    carry(nb, branch)
    assert cli_main(["--home", str(home), "run", str(branch)]) == 0
    store = SessionStore(home)
    turns = [n for n in store.open(sid).nodes() if n.kind == "turn"]
    store.close()
    assert len(turns) == 4
    assert turns[2].predecessor == first[0].id  # a branch at the first turn
    assert turns[3].predecessor == turns[2].id  # and the next cell continues it
    assert turns[1].predecessor == first[0].id  # the old line is still there
