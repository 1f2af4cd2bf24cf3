"""Issue 19 in a real browser: after a pull joined two people's lines, B's JupyterLab draws
the merged DAG with both lines, and each turn's card says who ran it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from openprogram.store.session.records import forget_author
from openprogram.store.session.store import SessionStore
from openprogram.store.session.sync import pull, push
from tests.test_sync import turns

from .jupyterlab import LabPage, write_notebook


def as_person(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("GIT_AUTHOR_NAME", name)
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", f"{name.lower()}@example.invalid")
    forget_author()


@pytest.mark.browser
@pytest.mark.timeout(180)
def test_bs_lab_draws_the_joined_dag_with_both_authors(
    lab: LabPage, notebook_dir: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = f"s_team_{tmp_path.name[-8:].replace('-', '_')}"
    remote = tmp_path / "team.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    alice, bob = SessionStore(tmp_path / "alice"), SessionStore(lab.server.openprogram_home)
    as_person(monkeypatch, "Alice")
    turns(alice, sid, "alice one", "alice two")
    push(alice, sid, f"file://{remote}", "file")
    as_person(monkeypatch, "Bob")
    turns(bob, sid, "bob before pulling")
    assert pull(bob, sid, f"file://{remote}", "file").status == "joined"
    by_author = {
        e["id"]: bob.open(sid).get(e["id"]).metadata.get("author", {}).get("name")
        for e in bob.open(sid).index()
        if e["caller"] is None and e["kind"] != "root"
    }
    assert sorted(by_author.values()) == ["Alice", "Alice", "Bob"]
    alice.close()
    bob.close()

    abs_dir, rel_dir = notebook_dir
    write_notebook(
        abs_dir / "team.ipynb",
        [f"%load_ext openprogram_magics\n%openprogram use {sid}", "%openprogram dag"],
    )
    lab.open_notebook(f"{rel_dir}/team.ipynb")
    lab.wait_kernel_idle()
    lab.run_cell_expect(0, 1)
    lab.run_cell_expect(1, 2, timeout=60_000)
    cell = lab.cell(1)
    for node_id, name in by_author.items():
        row = cell.locator(f"g.op-node[data-id='{node_id}']")
        row.wait_for(timeout=30_000)
        row.locator(".op-name").hover()
        card = cell.locator(".op-card:not(.op-hidden)")
        card.locator(".op-card-meta", has_text=f"by {name}").wait_for(timeout=10_000)
    # two lines from the root: Bob's turn is drawn in a lane of its own
    lane = {
        name: cell.locator(f"g.op-node[data-id='{node_id}']").evaluate(
            "(g) => g.getAttribute('transform').split(',')[0]"
        )
        for node_id, name in by_author.items()
    }
    assert lane["Bob"] != lane["Alice"], lane
    lab.screenshot("team-dag")
