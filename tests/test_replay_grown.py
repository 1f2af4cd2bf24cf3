"""Replay of a notebook that grew after its first run (issue 19, item 8).

A notebook is run once live, then gains cells before, between and after its turns (one of
them with a new call); ``openprogram run --replay`` answers every originally recorded call
from the recording (the kernel's own provider counts the live calls: none for those) and
names the new cell and its nearest recording when it misses; ``--record-misses`` answers
only the new call live.  A replay never runs ``%openprogram push``/``pull``: the bare
remote's refs stay as they were and the output says the command was skipped.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from openprogram.cli import main as cli_main
from openprogram.store.session.store import SessionStore

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]

SETUP = '''%load_ext openprogram_magics
from pathlib import Path
from openprogram import agentic_function, create_runtime
from openprogram.providers.test import FunctionProvider

LIVE = Path({live!r})

def reply(request):
    """The live model: one line per call in LIVE, so the test sees every live call."""
    content = request.messages[-1]["content"]
    with LIVE.open("a") as f:
        f.write(content.replace("\\n", " ") + "\\n")
    choices = request.extra.get("choices")
    return choices[0] if choices else f"answer to {{content}}"

rt = create_runtime(FunctionProvider(reply))'''

FUNCTIONS = '''@agentic_function
def triage(ticket: str, runtime=None) -> str:
    """Classify the support ticket as bug, feature or question."""
    return runtime.exec(ticket, choices=["bug", "feature", "question"])


@agentic_function
def handle(ticket: str, runtime=None) -> str:
    """You are a support lead. Draft a one-sentence reply."""
    kind = triage(ticket, runtime=runtime)
    return runtime.exec(f"The ticket is a {kind}: {ticket}")'''

CRASH_TEXT = "the app crashes on save"
CRASH = f'triage("{CRASH_TEXT}", runtime=rt)'
DARK = 'handle("please add a dark mode", runtime=rt)'
NEW = 'triage("export to csv is broken", runtime=rt)'


def turn(code: str) -> Any:
    return new_code_cell("%%openprogram\n" + code)


def write_notebook(path: Path, cells: list[Any]) -> None:
    live = path.parent / "live_calls.txt"
    nb = new_notebook(cells=[new_code_cell(SETUP.format(live=str(live))), *cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(nb, path)


def grow(path: Path, target: Path, *, new_call: bool = True) -> None:
    """``path`` with a turn inserted before its first turn, one between its turns and (with
    ``new_call``) a new call at the end — the notebook as it looks a week later."""
    nb = nbformat.read(path, as_version=4)
    first = next(i for i, c in enumerate(nb.cells) if c.source.startswith("%%openprogram"))
    nb.cells.insert(first, turn('print("notes on the tickets")'))
    second = first + 2
    nb.cells.insert(second, turn("tickets = 2\nprint(tickets)"))
    nb.cells.insert(second, new_code_cell("x = 1  # a plain cell, too"))
    if new_call:
        nb.cells.append(turn(NEW))
    nbformat.write(nb, target)


def said(text: str, line: str) -> bool:
    """Whether ``text`` holds ``line``, any cell number standing for ``[N]``."""
    return re.search(re.escape(line).replace(re.escape("[N]"), r"\[\d+\]"), text) is not None


def live_calls(folder: Path) -> list[str]:
    """The calls the live model answered since the last call (and forget them)."""
    log = folder / "live_calls.txt"
    if not log.exists():
        return []
    lines = log.read_text().splitlines()
    log.unlink()
    return lines


def results(path: Path) -> dict[str, list[str]]:
    """The value each ``%%openprogram`` cell showed, by its source."""
    out = {}
    for cell in json.loads(path.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and source.startswith("%%openprogram"):
            out[source] = [
                "".join(o["data"]["text/plain"])
                for o in cell.get("outputs", [])
                if o.get("output_type") == "execute_result"
            ]
    return out


def printed(path: Path) -> list[str]:
    """Every cell's stream text, in order."""
    nb = json.loads(path.read_text())
    return [
        "".join(o.get("text", ""))
        for cell in nb["cells"]
        for o in cell.get("outputs", [])
        if o.get("output_type") == "stream"
    ]


def session_id(path: Path) -> str:
    return str(json.loads(path.read_text())["metadata"]["openprogram"]["session_id"])


def llm_nodes(home: Path, sid: str) -> list[Any]:
    store = SessionStore(home)
    try:
        return [n for n in store.open(sid).nodes() if n.kind == "llm"]
    finally:
        store.close()


def test_a_grown_notebook_replays_every_recorded_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, nb = tmp_path / "home", tmp_path / "tickets.ipynb"
    write_notebook(nb, [new_code_cell(FUNCTIONS), turn(CRASH), turn(DARK)])
    assert cli_main(["--home", str(home), "run", str(nb)]) == 0
    assert live_calls(tmp_path) == [
        "the app crashes on save",
        "please add a dark mode",
        "The ticket is a bug: please add a dark mode",
    ]
    recorded = results(nb)
    sid = session_id(nb)
    first_run = {n.id: n for n in llm_nodes(home, sid)}
    crash_call = next(n for n in first_run.values() if n.input["content"] == CRASH_TEXT)

    # grown without a new call: every call is answered from the recording, none live
    same = tmp_path / "same.ipynb"
    grow(nb, same, new_call=False)
    out = tmp_path / "out.ipynb"
    assert cli_main(["--home", str(home), "run", str(same), "--replay", "-o", str(out)]) == 0
    assert live_calls(tmp_path) == []
    got = results(out)
    assert got[f"%%openprogram\n{CRASH}"] == recorded[f"%%openprogram\n{CRASH}"] == ["'bug'"]
    assert got[f"%%openprogram\n{DARK}"] == recorded[f"%%openprogram\n{DARK}"]

    # grown with a new call: plain --replay replays the old cells, then misses the new one,
    # naming it and the nearest recording (the same function's call in the crash cell)
    grown = tmp_path / "grown.ipynb"
    grow(nb, grown)
    capsys.readouterr()
    assert cli_main(["--home", str(home), "run", str(grown), "--replay", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert live_calls(tmp_path) == []
    assert "ReplayMiss" in err
    assert said(err, f"for cell [N] ({NEW}), LLM call 1 of function triage")
    assert said(err, f"nearest recording is turn 1, cell [N] ({CRASH}), call 1 of function triage")
    assert f"(node {crash_call.id})" in err
    assert "-user: the app crashes on save\n+user: export to csv is broken" in err
    assert results(out)[f"%%openprogram\n{DARK}"] == recorded[f"%%openprogram\n{DARK}"]

    # --record-misses: the recorded calls are replayed, only the new one is live
    assert (
        cli_main(
            ["--home", str(home), "run", str(grown), "--replay", "--record-misses", "-o", str(out)]
        )
        == 0
    )
    assert live_calls(tmp_path) == ["export to csv is broken"]
    got = results(out)
    assert {k: v for k, v in got.items() if k in recorded} == recorded
    assert got[f"%%openprogram\n{NEW}"] == ["'bug'"]
    assert session_id(out).startswith(f"{sid}-replay-")  # a local replay session
    branch = [n for n in llm_nodes(home, session_id(out)) if n.id not in first_run]
    models = sorted(n.metadata.get("model") for n in branch)
    # every call on the replay branch was replayed but the new one, answered live once
    assert models.count("function") == 1 and models.count("replay") == len(branch) - 1
    assert {n.id for n in llm_nodes(home, sid)} == set(first_run)  # the recording as it was

    # and now the grown notebook replays whole, with nothing live
    again = tmp_path / "again.ipynb"
    assert cli_main(["--home", str(home), "run", str(out), "--replay", "-o", str(again)]) == 0
    assert live_calls(tmp_path) == []
    assert results(again) == got

    # an edited docstring: the miss names the call recorded in the same cell
    edited = tmp_path / "edited.ipynb"
    text = grown.read_text().replace("Classify the support ticket", "Sort the support ticket")
    edited.write_text(text)
    capsys.readouterr()
    assert cli_main(["--home", str(home), "run", str(edited), "--replay", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert said(err, f"for cell [N] ({CRASH}), LLM call 1 of function triage")
    assert said(err, f"nearest recording is turn 1, cell [N] ({CRASH}), call 1 of function triage")
    assert "-system: Classify the support ticket" in err
    assert "+system: Sort the support ticket" in err


def refs(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "for-each-ref"], capture_output=True, text=True, check=True
    ).stdout


def test_a_replay_never_pushes_or_pulls(tmp_path: Path) -> None:
    home, nb = tmp_path / "home", tmp_path / "shared.ipynb"
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    write_notebook(
        nb,
        [
            new_code_cell(FUNCTIONS),
            turn(CRASH),
            new_code_cell(f"%openprogram push {remote}"),
            new_code_cell(f"%openprogram pull {remote}"),
            new_code_cell("%openprogram embed"),
        ],
    )
    assert cli_main(["--home", str(home), "run", str(nb)]) == 0
    sid = session_id(nb)
    pushed = refs(remote)
    assert f"refs/openprogram/sessions/{sid}" in pushed  # the live run pushed
    bundle = bundles(nb)
    assert len(bundle) == 1  # and embedded the session
    live_calls(tmp_path)

    grown = tmp_path / "grown.ipynb"
    grow(nb, grown)
    out = tmp_path / "out.ipynb"
    args = ["--home", str(home), "run", str(grown), "--replay", "--record-misses"]
    assert cli_main([*args, "-o", str(out)]) == 0
    assert live_calls(tmp_path) == ["export to csv is broken"]
    assert refs(remote) == pushed  # nothing pushed
    # and the notebook's session is as pushed: the replay's turns are a local replay session
    assert refs(home / "sessions" / sid).split()[0] == pushed.split()[0]
    assert session_id(out) != sid
    notes = [text for text in printed(out) if "skipped" in text]
    assert notes == [
        "openprogram: replay: `%openprogram push` skipped "
        "(a replay never runs push, pull, embed, import or export)\n",
        "openprogram: replay: `%openprogram pull` skipped "
        "(a replay never runs push, pull, embed, import or export)\n",
        "openprogram: replay: `%openprogram embed` skipped "
        "(a replay never runs push, pull, embed, import or export)\n",
    ]
    assert str(remote) not in "".join(printed(out))
    assert bundles(out) == bundle  # the bundle the file carried stays in it

    # a plain replay, in place, skips them too
    assert cli_main(["--home", str(home), "run", str(out), "--replay"]) == 0
    assert refs(remote) == pushed
    assert sum("skipped" in text for text in printed(out)) == 3
    assert bundles(out) == bundle


def bundles(path: Path) -> list[Any]:
    """The session bundles ``%openprogram embed`` left in the notebook's outputs."""
    from openprogram_magics.sharing import BUNDLE_MIME

    return [
        o["data"][BUNDLE_MIME]
        for cell in json.loads(path.read_text())["cells"]
        for o in cell.get("outputs", [])
        if BUNDLE_MIME in o.get("data", {})
    ]


def test_the_replay_a_runner_announces_skips_export_and_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The kernel side without a kernel: the bridge state ``openprogram run --replay``
    hands over makes the side-effect commands notes; a malformed one is refused."""
    from openprogram_magics import bridge, commands
    from openprogram_magics.headless import state_payload
    from tests.test_commands_plain import Host

    monkeypatch.setattr(bridge, "_state", None)
    bundle = tmp_path / "s.bundle"
    replay = {"session_id": "nb_0123456789", "record_misses": True}
    bridge.receive_frontend_state(state_payload(None, "nb.ipynb", replay))
    assert bridge.replay_run() == bridge.ReplayRun("nb_0123456789", True)
    assert commands.run(Host(), f"export {bundle}") is None
    assert commands.run(Host(), f"import {bundle}") is None
    assert not bundle.exists()
    out = capsys.readouterr().out
    assert "`%openprogram export` skipped" in out and "`%openprogram import` skipped" in out
    assert str(bundle) not in out

    bridge.receive_frontend_state(state_payload(None, "nb.ipynb", {"session_id": 3}))
    state = bridge.frontend_state()
    assert state is not None and state.problem and "replay" in state.problem
    assert bridge.replay_run() == bridge.ReplayRun("nb_0123456789", True)  # the last good one
    bridge.receive_frontend_state(state_payload(None, "nb.ipynb"))  # a run that is no replay
    assert bridge.replay_run() is None
