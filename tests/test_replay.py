"""Keyless replay of a shared notebook: run it with a provider, push its session, pull it
into a fresh home with no provider, ``openprogram run --replay`` → the same outputs; an
edited docstring → an error naming the cell and the function, with the prompt's diff."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from openprogram.cli import main as cli_main
from openprogram.store.session.store import SessionStore

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]


def turn_outputs(path: Path) -> list[list[str]]:
    """The value each ``%%openprogram`` cell showed, in order."""
    nb = json.loads(path.read_text())
    out = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and "".join(cell["source"]).startswith("%%openprogram"):
            out.append(
                [
                    "".join(o["data"]["text/plain"])
                    for o in cell.get("outputs", [])
                    if o.get("output_type") == "execute_result"
                ]
            )
    return out


def test_pulled_notebook_replays_without_a_key_and_names_a_changed_function(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nb = tmp_path / "project" / "quickstart.ipynb"
    nb.parent.mkdir()
    shutil.copy(QUICKSTART, nb)
    alice, bob, remote = tmp_path / "alice", tmp_path / "bob", tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    url = f"file://{remote}"

    assert cli_main(["--home", str(alice), "run", str(nb)]) == 0  # the test provider answers
    recorded = turn_outputs(nb)
    assert recorded and all(recorded)
    assert cli_main(["--home", str(alice), "sessions", "push", "--notebook", str(nb), url]) == 0
    assert cli_main(["--home", str(bob), "sessions", "pull", "--notebook", str(nb), url]) == 0
    capsys.readouterr()

    replayed = tmp_path / "replayed.ipynb"
    assert cli_main(["--home", str(bob), "run", str(nb), "--replay", "-o", str(replayed)]) == 0
    assert turn_outputs(replayed) == recorded
    sid = json.loads(nb.read_text())["metadata"]["openprogram"]["session_id"]
    fork = json.loads(replayed.read_text())["metadata"]["openprogram"]["session_id"]
    store = SessionStore(bob)
    llms = [n for n in store.open(fork).nodes() if n.kind == "llm"]
    assert {n.name for n in llms} == {"test", "replay"}  # recorded, then replayed
    assert {n.name for n in store.open(sid).nodes() if n.kind == "llm"} == {"test"}
    store.close()  # (the replay's turns are a local replay session: see test_replay_home)

    edited = tmp_path / "edited.ipynb"
    text = nb.read_text().replace("Classify the support ticket", "Sort the support ticket")
    edited.write_text(text)
    capsys.readouterr()
    assert cli_main(["--home", str(bob), "run", str(edited), "--replay", "-o", str(replayed)]) == 1
    err = capsys.readouterr().err
    assert "ReplayMiss" in err and "function triage" in err and "cell [" in err
    assert "-system: Classify the support ticket" in err
    assert "+system: Sort the support ticket" in err
    # --record-misses: the provider the notebook asks for (test) answers the misses
    args = ["--home", str(bob), "run", str(edited), "--replay", "--record-misses"]
    assert cli_main([*args, "-o", str(replayed)]) == 0
    assert turn_outputs(replayed) == recorded


def test_replay_of_a_session_not_here_says_to_pull(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nb = tmp_path / "nb.ipynb"
    data: dict[str, Any] = json.loads(QUICKSTART.read_text())
    data["metadata"]["openprogram"] = {"session_id": "nb_elsewhere", "version": 1}
    nb.write_text(json.dumps(data))
    assert cli_main(["--home", str(tmp_path / "h"), "run", str(nb), "--replay"]) == 2
    assert "sessions pull --notebook nb.ipynb" in capsys.readouterr().err
