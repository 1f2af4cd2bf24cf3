"""A methods appendix (issue 24): ``openprogram sessions export ID --appendix -o FILE`` of a
session built in a real IPython shell with the ``function`` provider lists every prompt,
model, provider, commit and the totals, with credentials masked, as Markdown and HTML."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from openprogram.cli import main as cli_main
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
