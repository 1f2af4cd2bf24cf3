"""Secrets never reach a session or a notebook by any path — not only under key-like names.

A key passed positionally or under an innocent name, a reply that echoes it, a prompt that
quotes it (stored in the llm node), a traceback, a title and a commit message, and in a
notebook run headless: the cell text, the static DAG, the widget state saved in the file.
Every file under ``$OPENPROGRAM_HOME``, every git object and the saved notebook are scanned.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import nbformat
import pytest
from test_secrets import everything_written
from wire_server import Reply, WireServer

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agent.session_db import default_db
from openprogram.providers.openai_provider import OpenAIProvider
from openprogram.providers.test import TestProvider

ENV_KEY = "sk-fake-env-KEY-4242424242"
GIVEN_KEY = "sk-given-explicitly-9090909090"
PATTERNS = [ENV_KEY.encode(), GIVEN_KEY.encode(), b"4242424242", b"9090909090"]


def assert_clean(home: Path, *extra: Path) -> int:
    scanned = 0
    sources = list(everything_written(home)) + [(str(p), p.read_bytes()) for p in extra]
    for where, data in sources:
        scanned += 1
        for pattern in PATTERNS:
            assert pattern not in data, f"{pattern!r} written to {where}"
    return scanned


@agentic_function
def shout(text: str, runtime: Any = None) -> str:
    """Say the text back, louder."""
    assert runtime is not None
    return runtime.exec(f"repeat after me: {text}")  # the prompt quotes it; the reply echoes


@agentic_function
def fail_with(text: str) -> None:
    """Fail, quoting the text."""
    raise ValueError(f"bad value {text}")


def test_a_key_under_any_name_is_redacted_everywhere(
    op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    with WireServer() as server:
        provider = OpenAIProvider("gpt-x", api_key=GIVEN_KEY, base_url=server.openai_base_url)
        rt = create_runtime(provider, backoff=0.0, max_retries=0)
        server.reply(Reply(text=f"you said {GIVEN_KEY} and {ENV_KEY}"))
        with session_context(runtime=rt, message=f"turn with {ENV_KEY}") as handle:
            sid = handle.session_id
            handle.db.open(sid).set_meta(title=f"keys {GIVEN_KEY}")
            shout(GIVEN_KEY)
            with pytest.raises(ValueError):
                fail_with(ENV_KEY)
        assert any(GIVEN_KEY in str(r.body) for r in server.requests)  # really sent
    with session_context(sid, runtime=create_runtime(TestProvider(), backoff=0.0)):
        shout(ENV_KEY)  # the test provider echoes the prompt's first line
    assert assert_clean(op_home) > 10  # journals and node files while open
    default_db().close()
    assert assert_clean(op_home) > 10
    nodes = default_db().open(sid).nodes()
    shouts = [n for n in nodes if n.name == "shout"]
    assert shouts[0].input == {"text": "***"} and shouts[0].output == "you said *** and ***"
    failed = next(n for n in nodes if n.name == "fail_with")
    assert failed.metadata["error"] == "ValueError: bad value ***"


NOTEBOOK_CELLS = [
    "%load_ext openprogram_magics\n%openprogram provider test",
    "import os\nfrom openprogram import agentic_function\n\n"
    "@agentic_function\n"
    "def shout(text, runtime=None):\n"
    '    """Say the text back, louder."""\n'
    '    return runtime.exec(f"repeat after me: {text}")',
    # assigned: a value the user's own code shows is theirs (IPython's Out), not ours
    '%%openprogram\nloud = shout(os.environ["OPENAI_API_KEY"])',
    '%%openprogram\nlouder = shout("' + ENV_KEY + '")',
    "%openprogram dag",
]


@pytest.mark.kernel
@pytest.mark.timeout(180)
def test_a_notebook_run_saves_no_key(
    op_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openprogram_magics.headless import run_notebook

    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in NOTEBOOK_CELLS]
    path = tmp_path / "leaky.ipynb"
    nbformat.write(nb, path)
    before = path.read_bytes()
    assert ENV_KEY.encode() in before  # the user typed it into a cell: theirs to keep
    result = run_notebook(path)
    assert result.error is None
    saved = json.loads(path.read_bytes())
    outputs = json.dumps([c.get("outputs", []) for c in saved["cells"]])
    widget_state = json.dumps(saved["metadata"].get("widgets", {}))
    assert "***" in outputs  # the turn was drawn, with the key masked
    for text in (outputs, widget_state, json.dumps(saved["metadata"])):
        for pattern in PATTERNS:
            assert pattern.decode() not in text
    assert assert_clean(op_home) > 10
    assert os.environ["OPENAI_API_KEY"] == ENV_KEY
