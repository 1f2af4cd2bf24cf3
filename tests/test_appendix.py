"""A methods appendix (issue 24): ``openprogram sessions export ID --appendix -o FILE`` of a
session built in a real IPython shell with the ``function`` provider lists every prompt,
model, provider, commit and the totals, with credentials masked, as Markdown and HTML."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from openprogram.cli import main as cli_main
from openprogram.compare import appendix
from openprogram.compare.appendix import build_appendix, render_html, render_markdown
from openprogram.context.nodes import COMPLETED, Call, make_call
from openprogram.context.secrets import redact_key_like
from openprogram.providers.base import LLMRequest, LLMResponse, Usage
from openprogram.usage.prices import clear_prices, set_price
from tests.test_magics import Shell, turns_of
from tests.test_stale import AGENTS, OLD, session_id

KNOWN = "opk-known-0123456789abcdef"  # in the environment: this machine knows it is a key
LOOKS = "sk-proj-AbCdEf0123456789XYZabcdef"  # looks like a key, known nowhere
CELLS = [
    '%%openprogram\nhandle("the app crashes on save")',
    f'%%openprogram\ntriage("my key {LOOKS} and {KNOWN} leaked in the log")',
]


def reply(request: LLMRequest) -> LLMResponse:
    last = str(request.messages[-1].get("content"))
    return LLMResponse("bug" if "crash" in last else "question", usage=Usage(100, 10))


@pytest.fixture
def priced() -> Iterator[None]:
    set_price("function", 1.0, 2.0)  # USD per million tokens: 0.00012 a call
    yield
    clear_prices()


def test_appendix_lists_prompts_models_commits_totals_and_no_secret(
    bare_shell: Shell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, priced: None
) -> None:
    monkeypatch.setenv("EXAMPLE_API_KEY", KNOWN)
    shell = bare_shell
    shell.use_provider(reply)
    shell.run(AGENTS.replace("{doc}", OLD))
    for cell in CELLS:
        shell.run(cell)
    sid = session_id(shell)
    turns = turns_of(sid)
    assert len(turns) == 2

    md = tmp_path / "methods.md"
    assert cli_main(["sessions", "export", sid, "--appendix", "-o", str(md)]) == 0
    text = md.read_text()
    # every prompt (the docstring as sent, the ticket) and its answer, by the function
    assert text.count("Classify the support ticket as bug, feature or question.") >= 3
    assert "user: the app crashes on save" in text
    assert "#### Call 1: `handle › triage › llm 1` — provider `function`, model `function`" in text
    assert "#### Call 1: `triage › llm 1`" in text
    assert "100 input / 10 output tokens, $0.0001" in text
    # the totals: two calls, 200 in, 20 out, 2 x 0.00012
    assert "| function | function | 2 | 200 | 20 | $0.0002 |" in text
    assert "| **all** | | 2 | 200 | 20 | $0.0002 |" in text
    # the functions with their hashes, the cells and the commits that recorded them
    assert re.search(r"### `handle` \(doc_hash `[0-9a-f]{16}`, source_hash `[0-9a-f]{16}`\)", text)
    assert OLD in text
    assert '```python\n%%openprogram\nhandle("the app crashes on save")\n```' in text
    shas = re.findall(r"· commit `([0-9a-f]{12})`", text)
    assert len(shas) == 2 and shas[0] != shas[1]
    assert re.search(r"session commit `[0-9a-f]{12}`", text)
    # no secret: the known one and the one that only looks like a key are masked
    assert KNOWN not in text and LOOKS not in text
    assert "my key *** and *** leaked in the log" in text

    html_file = tmp_path / "methods.html"
    assert cli_main(["sessions", "export", sid, "--appendix", "-o", str(html_file)]) == 0
    html = html_file.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html
    assert 'data-op-dag="static"' in html  # the line drawn as the DAG page's static form
    assert "user: the app crashes on save" in html and "$0.0002" in html
    assert KNOWN not in html and LOOKS not in html


def test_appendix_of_another_line_and_bad_input(
    bare_shell: Shell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shell = bare_shell
    shell.use_provider(reply)
    shell.run(AGENTS.replace("{doc}", OLD))
    shell.run(CELLS[0])
    shell.run('%%openprogram\ntriage("add a dark mode")')
    sid = session_id(shell)
    first = turns_of(sid)[0]
    md = tmp_path / "first.md"
    args = ["sessions", "export", sid, "--appendix", "--line", first.id, "-o", str(md)]
    assert cli_main(args) == 0
    text = md.read_text()
    assert "1 turn(s), 1 LLM call(s)" in text and "dark mode" not in text
    capsys.readouterr()
    assert cli_main([*args[:5], "n_nothere00", "-o", str(md)]) == 2
    assert "no node 'n_nothere00'" in capsys.readouterr().err


# -- a deeply nested turn (issue 34): the work grows with the nodes shown, not faster -----------
def nested(depth: int) -> tuple[list[Call], str]:
    """A root, a cell's turn, ``depth`` frames each called by the one above, and an llm call
    in the innermost; returns (nodes, the turn's id)."""
    root = make_call("root", "root", status=COMPLETED)
    turn = make_call(
        "turn", "cell [1]", input={"text": "level_0()"}, predecessor=root.id, status=COMPLETED
    )
    nodes = [root, turn]
    caller = turn.id
    for level in range(depth):
        frame = make_call(
            "function", f"level_{level}", caller=caller, status=COMPLETED, doc="Descend."
        )
        nodes.append(frame)
        caller = frame.id
    llm = make_call(
        "llm", "function", caller=caller, status=COMPLETED, model="m", messages=[], usage={}
    )
    llm.output = "the bottom"
    nodes.append(llm)
    for seq, node in enumerate(nodes):
        node.seq, node.turn = seq, 0 if node is root else 1
    return nodes, turn.id


def appendix_work(depth: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    """(node kinds looked at, Markdown, HTML) of the appendix of a turn nested ``depth`` deep:
    the kind is read at each step of every walk up the callers."""
    looked = 0
    kind = Call.kind.fget
    assert kind is not None

    def counted(node: Call) -> str:
        nonlocal looked
        looked += 1
        return kind(node)  # type: ignore[no-any-return]

    nodes, turn_id = nested(depth)
    with monkeypatch.context() as patch:
        patch.setattr(Call, "kind", property(counted))
        app = build_appendix(nodes, session_id="s_deep", head_id=turn_id)
        md, html = render_markdown(app), render_html(app, nodes, turn_id)
    return looked, md, html


def test_a_deeply_nested_turn_costs_work_in_proportion_to_its_depth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small, md, html = appendix_work(2000, monkeypatch)
    large, _, _ = appendix_work(4000, monkeypatch)
    assert large < 2.2 * small, (small, large)  # twice the nodes, about twice the work
    # and what it shows is whole: the one call, named by all 2,000 frames it was made in
    path = " › ".join(f"level_{i}" for i in range(2000))
    assert "1 turn(s), 1 LLM call(s)" in md
    assert f"#### Call 1: `{path} › llm 1` — provider `function`, model `m`" in md
    assert md.count("### `level_") == 2000  # every function's docstring
    assert "the bottom" in html and html.count("level_1999") >= 2  # the DAG and the call


def test_the_html_redacts_a_node_whole_only_when_its_drawing_shows_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The line's DAG shows its newest rows (300): the other 1,700 frames of a 2,000-deep
    turn are placed by their ids and links, and their content is not redacted for nothing
    (each node's whole dict was: 2.4 s of a 10,000-deep appendix)."""
    nodes, turn_id = nested(2000)
    for node in nodes:
        if node.kind == "function":
            node.input = {"note": f"note of {node.name}"}
    nodes[-2].input = {"note": f"deepest, holding {LOOKS}"}
    redacted: list[str] = []

    def counted(text: str) -> str:
        redacted.append(text)
        return redact_key_like(text)

    app = build_appendix(nodes, session_id="s_deep", head_id=turn_id)
    monkeypatch.setattr(appendix, "redact_key_like", counted)
    html = render_html(app, nodes, turn_id)

    notes = [t for t in redacted if t.startswith("note of level_")]
    assert 0 < len(notes) <= 300  # the drawn rows' notes, not all 2,000
    assert "note of level_1998" in html  # a drawn row's content is there, redacted
    assert LOOKS not in html and "deepest, holding ***" in html


def test_a_node_id_shaped_like_a_key_is_masked_in_the_drawing() -> None:
    nodes, turn_id = nested(3)
    token = "ghp_" + "Ab3" * 12  # a valid node id, and a GitHub token's shape
    frame, llm = nodes[-2], nodes[-1]
    frame.id, llm.caller = token, token
    app = build_appendix(nodes, session_id="s_deep", head_id=turn_id)

    html = render_html(app, nodes, turn_id)

    assert token not in html
    assert "the bottom" in html and "level_2" in html  # drawn, under its masked id


def test_a_minted_id_skips_the_shape_search_but_not_the_known_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ids the store mints (``n_`` and ten hex digits) are drawn without the
    credential-shape search (thousands of them in a deep line), yet a known credential
    inside one is still masked."""
    from openprogram.context.secrets import register_secret

    nodes, turn_id = nested(50)
    searched: list[str] = []

    def counted(text: str) -> str:
        searched.append(text)
        return redact_key_like(text)

    monkeypatch.setattr(appendix, "redact_key_like", counted)
    known = "c0ffee0123"  # a key this process was given, ten hex digits like an id's
    frame, llm = nodes[-2], nodes[-1]
    frame.id = llm.caller = f"n_{known}"
    register_secret(known)
    app = build_appendix(nodes, session_id="s_deep", head_id=turn_id)
    html = render_html(app, nodes, turn_id)

    assert not [t for t in searched if appendix.MINTED_ID.fullmatch(t)]
    assert nodes[1].id in html  # a minted id is drawn as it is
    assert known not in html and "n_***" in html
