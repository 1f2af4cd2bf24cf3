"""Replays stay home (issue 35 item 4, issue 38 item 6): a replay's turns live in a local
replay session, marked, never pushed unless asked; a replay that reproduces every output
changes no byte of the notebook; what a replay stores names no path of the machine.

The parts without a kernel (the store, the output comparison, the tracebacks) run here
quickly; the story runs ``openprogram run --replay`` in real kernels with two homes and a
bare repository (marked ``kernel``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from openprogram import agentic_function
from openprogram.cli import main as cli_main
from openprogram.context.nodes import make_call
from openprogram.context.outcome import traceback_text
from openprogram.context.paths import portable_path
from openprogram.errors import SyncError
from openprogram.providers import create_runtime
from openprogram.store.session import session_context
from openprogram.store.session.remotes import live_turns
from openprogram.store.session.store import SessionStore
from openprogram.store.session.sync import fork_for_replay, push
from openprogram_magics.replay_outputs import differing_cells

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"


@agentic_function
def echo(text: str, runtime=None) -> str:  # type: ignore[no-untyped-def]
    """Repeat the text."""
    return str(runtime.exec(text))


def refs(repo: Path) -> dict[str, str]:
    out = subprocess.run(
        ["git", "-C", str(repo), "for-each-ref", "--format=%(refname) %(objectname)"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return dict(line.split(" ", 1) for line in out.splitlines())


# -- the store: a replay session is its own, pushed only when asked -------------------------
def test_a_replay_session_holds_the_history_and_is_pushed_only_when_asked(
    tmp_path: Path,
) -> None:
    store = SessionStore(tmp_path / "home")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    for text in ("one", "two"):
        with session_context("s_work", db=store, message=text, runtime=create_runtime("test")):
            echo(text)
    work = store.open("s_work")
    recorded = {e["id"] for e in work.index()}
    main_before = work.git.read_ref()

    fork = fork_for_replay(store, "s_work")
    assert fork.startswith("s_work-replay-") and fork != fork_for_replay(store, "s_work")
    replay = store.open(fork)
    assert recorded <= {e["id"] for e in replay.index()}  # the recorded run, to compare with
    with session_context(fork, db=store, message="replayed", runtime=create_runtime("test")) as h:
        replay.set_meta(replay_of="s_work")
        root = next(e["id"] for e in replay.index() if e["kind"] == "root")
        turn = make_call("turn", "cell [1]", input={"text": "echo('one')"}, predecessor=root)
        turn.metadata["replay_of"] = "s_work"
        h.writer.append(turn, turn_level=True)
    assert store.open("s_work").git.read_ref() == main_before  # the work is untouched
    assert {e["id"] for e in store.open("s_work").index()} == recorded

    url = f"file://{remote}"
    with pytest.raises(SyncError) as refused:
        push(store, fork, url, "file")
    message = str(refused.value)
    assert f"session {fork} is a replay of session s_work" in message
    assert f"openprogram sessions push {fork} --with-replays" in message
    assert refs(remote) == {}

    assert "pushed to" in push(store, "s_work", url, "file")
    assert refs(remote) == {"refs/openprogram/sessions/s_work": main_before.hex()}
    assert "pushed to" in push(store, fork, url, "file", with_replays=True)
    sent = refs(remote)
    assert sent["refs/openprogram/sessions/s_work"] == main_before.hex()  # still the work
    assert f"refs/openprogram/sessions/{fork}" in sent
    store.close()


def test_live_turns_are_the_replay_turns_a_provider_answered() -> None:
    def node(kind: str, turn: int, **meta: Any) -> Any:
        call = make_call(kind, f"{kind} {turn}", input={"text": f"%%openprogram\nf({turn})"})
        call.turn = turn
        call.metadata.update(meta)
        return call

    nodes = [
        node("turn", 1),  # the recorded run
        node("llm", 1, model="test"),
        node("turn", 2, replay_of="s"),
        node("llm", 2, model="replay"),
        node("turn", 3, replay_of="s"),
        node("llm", 3, model="replay"),
        node("llm", 3, model="test"),  # a stale cell, run live
    ]
    assert [t.turn for t in live_turns(nodes)] == [3]


def test_a_replay_whose_kernel_never_started_leaves_no_replay_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbformat
    from jupyter_client.kernelspec import NoSuchKernel

    from openprogram_magics.headless import run_notebook

    home = tmp_path / "home"
    monkeypatch.setenv("OPENPROGRAM_HOME", str(home))
    store = SessionStore(home)
    with session_context("s_nb", db=store, message="one", runtime=create_runtime("test")):
        echo("one")
    store.close()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("%%openprogram\n1")])
    nb.metadata["openprogram"] = {"session_id": "s_nb", "version": 1}
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    before = path.read_bytes()
    with pytest.raises(NoSuchKernel):
        run_notebook(path, replay=True, kernel_name="no-such-kernel-here")
    assert sorted(p.name for p in (home / "sessions").iterdir()) == ["s_nb"]
    assert path.read_bytes() == before


# -- the notebook: what a reader sees, not the ids -------------------------------------------
def _cell(source: str, *outputs: dict[str, Any]) -> dict[str, Any]:
    return {"cell_type": "code", "source": source, "outputs": list(outputs), "metadata": {}}


def _turn_output(session: str, turn: int) -> dict[str, Any]:
    payload = {"session_id": session, "last_turn_id": f"n_{turn}", "turn": turn}
    return {
        "output_type": "display_data",
        "data": {
            "application/vnd.openprogram.session+json": payload,
            "text/plain": f"openprogram · session {session} · turn {turn}",
        },
        "metadata": {},
    }


def test_a_replay_that_shows_the_same_differs_in_no_cell() -> None:
    value = {"output_type": "execute_result", "data": {"text/plain": "'bug'"}, "metadata": {}}
    before = [
        _cell("%load_ext openprogram_magics"),
        _cell(
            "%%openprogram\ntriage('x')",
            {"output_type": "stream", "name": "stdout", "text": "openprogram: new session s\n"},
            _turn_output("s", 1),
            {**value, "execution_count": 3},
        ),
        _cell("%openprogram status", {"output_type": "stream", "name": "stdout", "text": "s\n"}),
    ]
    after = [
        _cell("%load_ext openprogram_magics"),
        _cell("%%openprogram\ntriage('x')", _turn_output("s-replay-1", 7), value),
        _cell("%openprogram status", {"output_type": "stream", "name": "stdout", "text": "r\n"}),
    ]
    assert differing_cells(before, after) == []
    after[1]["outputs"].append({"output_type": "stream", "name": "stdout", "text": "other\n"})
    assert differing_cells(before, after) == [1]


# -- tracebacks name no path of this machine -------------------------------------------------
def test_a_stored_traceback_names_files_relative_to_where_they_were_imported_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "lab" / "tools"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "parse.py").write_text(
        "import json\n\ndef read(text):\n    return json.loads(text)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "lab"))
    monkeypatch.chdir(tmp_path)
    from tools.parse import read  # type: ignore[import-not-found]

    with pytest.raises(ValueError) as caught:
        read("{")
    text = traceback_text(caught.value)
    assert 'File "tools/parse.py", line 4, in read' in text
    assert 'File "json/__init__.py"' in text  # the standard library, by its import root
    assert str(tmp_path) not in text and sys.prefix not in text
    assert portable_path("/somewhere/else/entirely.py", roots=[], cwd=str(tmp_path)) == (
        "…/else/entirely.py"
    )
    assert portable_path("<string>") == "<string>"


# -- the story, in real kernels ---------------------------------------------------------------
def outputs_shown(path: Path) -> list[list[str]]:
    nb = json.loads(path.read_text())
    return [
        [
            "".join(o["data"]["text/plain"])
            for o in c.get("outputs", [])
            if o["output_type"] == "execute_result"
        ]
        for c in nb["cells"]
        if c["cell_type"] == "code"
    ]


def session_of(path: Path) -> str:
    return str(json.loads(path.read_text())["metadata"]["openprogram"]["session_id"])


def homes_sessions(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "sessions").iterdir() if not p.name.startswith("."))


def absolute_paths(text: str, *places: str) -> list[str]:
    """The absolute paths of this machine found in ``text`` (JSON text: ``/`` as is)."""
    return [p for p in places if p and p != "/" and p in text]


@pytest.mark.kernel
@pytest.mark.timeout(600)
def test_replays_stay_home(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    url = f"file://{remote}"
    nb = tmp_path / "project" / "quickstart.ipynb"
    nb.parent.mkdir()
    shutil.copy(QUICKSTART, nb)
    assert cli_main(["--home", str(alice), "run", str(nb)]) == 0
    sid = session_of(nb)
    assert cli_main(["--home", str(alice), "sessions", "push", "--notebook", str(nb), url]) == 0
    shared = refs(remote)
    assert cli_main(["--home", str(bob), "sessions", "pull", "--notebook", str(nb), url]) == 0
    turns_before = json.loads((bob / "sessions" / sid / "meta.json").read_text())["turns"]

    # a replay in place that reproduces every output changes no byte, leaves nothing behind
    original = nb.read_bytes()
    capsys.readouterr()
    assert cli_main(["--home", str(bob), "run", str(nb), "--replay"]) == 0
    out = capsys.readouterr().out
    assert nb.read_bytes() == original
    assert "quickstart.ipynb unchanged: the replay reproduced every output" in out
    assert "wrote" not in out
    assert homes_sessions(bob) == [sid]

    # written elsewhere: the replay's turns are a local replay session, marked and drawn so
    replayed = tmp_path / "replayed.ipynb"
    assert cli_main(["--home", str(bob), "run", str(nb), "--replay", "-o", str(replayed)]) == 0
    out = capsys.readouterr().out
    fork = session_of(replayed)
    assert fork.startswith(f"{sid}-replay-") and homes_sessions(bob) == sorted([sid, fork])
    assert f"the replay's turns: session {fork}, kept on this machine" in out
    assert outputs_shown(replayed) == outputs_shown(nb)  # the turns' values
    assert ["'bug'"] in outputs_shown(nb)
    text = replayed.read_text()
    assert f"replay of session {sid}" in text and "the session had moved on" not in text
    meta = json.loads((bob / "sessions" / fork / "meta.json").read_text())
    assert meta["replay_of"] == sid and meta["title"].startswith(f"replay of {sid}")
    assert json.loads((bob / "sessions" / sid / "meta.json").read_text())["turns"] == turns_before
    assert cli_main(["--home", str(bob), "sessions", "show", fork]) == 0
    shown = capsys.readouterr().out
    assert f"replay of {sid} · " in shown  # its lane, named a replay
    assert f"replay   of session {sid} (kept here" in shown
    assert cli_main(["--home", str(bob), "sessions", "show", sid]) == 0
    assert f"replays  1 here, never pushed: {fork}\n" in capsys.readouterr().out
    store = SessionStore(bob)
    nodes = store.open(fork).nodes()
    replay_turns = [n for n in nodes if n.kind == "turn" and n.metadata.get("replay_of") == sid]
    assert len(replay_turns) == 2 and not live_turns(nodes)
    assert not any(n.metadata.get("replay_of") for n in store.open(sid).nodes())
    store.close()

    # the next push sends no replay: the remote and the colleague's DAG are as they were
    assert cli_main(["--home", str(bob), "sessions", "push", "--notebook", str(nb), url]) == 0
    assert "already at" in capsys.readouterr().out and refs(remote) == shared
    assert cli_main(["--home", str(bob), "sessions", "push", "--notebook", str(replayed), url]) == 2
    assert "--with-replays" in capsys.readouterr().err and refs(remote) == shared
    assert cli_main(["--home", str(alice), "sessions", "pull", "--notebook", str(nb), url]) == 0
    store = SessionStore(alice)
    assert not any(n.metadata.get("replay_of") for n in store.open(sid).nodes())
    store.close()

    # a failed replay in place leaves the notebook as it was; what it stored names no path
    edited = nb.read_text().replace("Classify the support ticket", "Sort the support ticket")
    nb.write_text(edited)
    capsys.readouterr()
    assert cli_main(["--home", str(bob), "run", str(nb), "--replay"]) == 1
    out = capsys.readouterr().out
    assert nb.read_text() == edited
    assert "unchanged (the replay failed" in out
    failed = next(s for s in homes_sessions(bob) if s not in (sid, fork))
    store = SessionStore(bob)
    nodes = store.open(failed).nodes()
    store.close()
    stored = [n for n in nodes if n.kind != "root" and n.turn > turns_before]
    errors = [n for n in stored if n.metadata.get("traceback")]
    assert errors and any(
        "openprogram/providers/replay.py" in n.metadata["traceback"] for n in errors
    )
    dumped = json.dumps([n.to_dict() for n in stored], ensure_ascii=False)
    found = absolute_paths(
        dumped, str(tmp_path), str(REPO), os.path.expanduser("~"), sys.prefix,
        tempfile.gettempdir() + "/",
    )  # fmt: skip
    assert found == [], re.findall(r'File \\"([^"\\]+)', dumped)[:5]


@pytest.mark.kernel
@pytest.mark.timeout(600)
def test_a_replay_written_in_place_keeps_the_notebooks_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay whose outputs differ rewrites the notebook in place, but the notebook still
    names its own session: the next cells continue it (and push it), not the local replay
    session, which `sessions push` would refuse."""
    import nbformat

    home = tmp_path / "home"
    nb_path = tmp_path / "quickstart.ipynb"
    nb = nbformat.read(QUICKSTART, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import uuid\nprint(uuid.uuid4())"))  # differs
    nbformat.write(nb, nb_path)
    assert cli_main(["--home", str(home), "run", str(nb_path)]) == 0
    sid = session_of(nb_path)
    before = nb_path.read_bytes()
    capsys.readouterr()
    assert cli_main(["--home", str(home), "run", str(nb_path), "--replay"]) == 0
    assert nb_path.read_bytes() != before  # a printed value differed: written in place
    assert session_of(nb_path) == sid  # ... still naming the notebook's own session
    assert any(s.startswith(f"{sid}-replay-") for s in homes_sessions(home))  # kept apart
    turns = json.loads((home / "sessions" / sid / "meta.json").read_text())["turns"]
    assert cli_main(["--home", str(home), "run", str(nb_path)]) == 0  # a live run after it
    assert session_of(nb_path) == sid
    assert json.loads((home / "sessions" / sid / "meta.json").read_text())["turns"] > turns
