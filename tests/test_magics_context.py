"""What a notebook's calls see of earlier cells: ``%config OpenProgramMagics.history_*``,
failed cells left out, ``%openprogram context``, and what the ``llm`` nodes keep."""

from __future__ import annotations

import json

import pytest

from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.prompt import sent_messages
from openprogram.context.policy import DEFAULT_POLICY, estimate_tokens
from openprogram.providers.test import TestProvider
from tests.test_magics import AGENTS, Shell, session_nodes


@pytest.fixture
def shell(bare_shell: Shell) -> Shell:
    """The extension loaded, the test provider, ``triage`` and ``handle`` defined."""
    bare_shell.run(AGENTS)
    return bare_shell


DOC = "Classify the support ticket as bug, feature or question."
CHOICES = "Reply with just the answer, nothing else. Allowed answers: bug, feature, question."


def requests(shell: Shell) -> list[list[dict[str, str]]]:
    provider = shell.magics.runtime().provider
    assert isinstance(provider, TestProvider)
    return [r.messages for r in provider.requests]


def test_the_settings_default_to_the_documented_policy(shell: Shell) -> None:
    m = shell.magics
    assert (m.history_turns, m.history_tokens, m.history_failed) == (
        DEFAULT_POLICY.turns,
        DEFAULT_POLICY.tokens,
        DEFAULT_POLICY.failed,
    )


def test_history_0_turns_sends_only_the_docstring_and_the_content(shell: Shell) -> None:
    shell.run('%%openprogram\ntriage("the first ticket")')
    shell.run("%config OpenProgramMagics.history_turns = 0")
    shell.run('%%openprogram\ntriage("the second ticket")')
    expected = [
        {"role": "system", "content": DOC},
        {"role": "user", "content": CHOICES},  # the call's own: its allowed answers
        {"role": "user", "content": "the second ticket"},
    ]
    assert requests(shell)[-1] == expected
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    llm = [n for n in session_nodes(sid) if n.kind == "llm"][-1]
    assert sent_messages(default_db().open(sid), llm) == expected
    assert llm.metadata["context"]["turns"] == []


def test_a_failed_cell_is_absent_from_the_next_prompt_and_context_says_so(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run('%%openprogram\ntriage("a fine ticket")')
    shell.run('%%openprogram\ntriage("UNLUCKY TICKET")\n1 / 0', error=ZeroDivisionError)
    capsys.readouterr()
    lines = shell.line("context")
    out = capsys.readouterr().out
    assert "sees 1 earlier turns" in out and "left out: 1 failed" in out
    assert "a fine ticket" in out and "UNLUCKY" not in out
    assert lines[0].startswith("the next call sees 1")
    shell.run('%%openprogram\ntriage("the next ticket")')
    text = json.dumps(requests(shell)[-1])
    assert "a fine ticket" in text and "UNLUCKY TICKET" not in text
    shell.run("%config OpenProgramMagics.history_failed = True")
    shell.run('%%openprogram\ntriage("and one more")')
    assert "UNLUCKY TICKET" in json.dumps(requests(shell)[-1])


def test_a_token_budget_bounds_every_prompt_across_200_cells(shell: Shell) -> None:
    shell.run("%config OpenProgramMagics.history_tokens = 300")
    provider = shell.magics.runtime().provider
    assert isinstance(provider, TestProvider)
    provider.keep = None  # every request: each one is compared with its node below
    for i in range(200):
        shell.run(f'%%openprogram\ntriage("ticket {i}: " + "the app crashes on save " * 5)')
    sid = shell.magics.turns.kernel_meta.session_id  # type: ignore[union-attr]
    llms = [n for n in session_nodes(sid) if n.kind == "llm"]
    assert len(llms) == 200
    own = estimate_tokens(requests(shell)[-1][:1]) + estimate_tokens(requests(shell)[-1][-1:])
    for node, messages in zip(llms, requests(shell), strict=True):
        assert node.metadata["context"]["tokens"] <= 300
        assert estimate_tokens(messages) <= 300 + own
    assert len(llms[-1].metadata["context"]["turns"]) >= 2  # bounded, not emptied
    sizes = [len(json.dumps(n.to_dict())) for n in llms[20:]]
    assert max(sizes) - min(sizes) < 200  # a node does not grow with the notebook


def test_context_shows_what_this_notebooks_next_call_sends_when_the_session_moved_on(
    shell: Shell, capsys: pytest.CaptureFixture[str]
) -> None:
    from openprogram import session_context

    shell.run('%%openprogram\ntriage("alpha ticket")')
    shell.run('%%openprogram\ntriage("beta ticket")')
    meta = shell.magics.turns.kernel_meta
    assert meta is not None
    triage = shell.ip.user_ns["triage"]
    with session_context(meta.session_id):  # another writer of the same session
        triage("gamma ticket from elsewhere")
    assert default_db().open(meta.session_id).head_id != meta.last_turn_id
    capsys.readouterr()

    lines = shell.line("context --full")
    out = capsys.readouterr().out
    assert lines[0].startswith("the next call sees 2 earlier turns")
    assert f"the next cell forks from {meta.last_turn_id}" in out
    assert "alpha ticket" in out and "beta ticket" in out and "gamma" not in out

    shell.run('%%openprogram\ntriage("delta ticket")')
    sent = requests(shell)[-1]
    assert sent[0] == {"role": "system", "content": DOC}
    assert sent[-1] == {"role": "user", "content": "delta ticket"}
    assert sent[-2] == {"role": "user", "content": CHOICES}  # the call's own, not history
    # between the docstring and the content: the earlier turns' exact text, line by line
    shown = "\n".join(
        lines[lines.index("  [system]    (the called function's docstring, if any)") + 1 : -1]
    )
    assert shown == "\n".join(
        f"  [{m['role']}]{' ' * (10 - len(m['role']))}"
        + m["content"].replace("\n", "\n" + " " * 14)
        for m in sent[1:-2]
    )
    assert "%%openprogram" not in shown and "(done)" not in shown  # plain statements
    assert "- triage was called with ticket='alpha ticket' and returned 'bug'." in shown
