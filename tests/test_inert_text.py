"""Text from a session is inert wherever it is shown (issue 19, item 4).

A session may come from anyone (a pulled line, an imported bundle, a model's reply): its
commit messages, title, source, node names and previews reach a terminal through
``openprogram sessions list|show|log|usage`` and ``%openprogram list|log``, and a browser
through ``sessions show --html``.  On a terminal every escape is *shown* (``\\x1b``), never
sent; in the page the embedded JSON parses and gives back every text exactly.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from openprogram import session_context
from openprogram.context.nodes import COMPLETED, make_call
from openprogram.view.inert import json_for_html, terminal_text

ROOT = Path(__file__).resolve().parent.parent

# a title change, a screen clear, a carriage return over the line, a right-to-left override,
# an 8-bit CSI (C1), a newline: each would act on a terminal if printed raw
EVIL = "\x1b]0;pwned\x07\x1b[2J\rok\u202egnp.exe\x9b31m\nline2"
EVIL_SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J"
HOSTILE_HTML = "<!-- </script> <script>alert(1)</script> <!-- <script> \u2028\u2029 &amp; >"
RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e")


def make_hostile_session(sid: str) -> str:
    """One turn whose title, source, commit message, node names and texts carry ``EVIL``;
    a function's output carries ``HOSTILE_HTML``.  Returns the function node's id."""
    with session_context(sid, title="T " + EVIL, source="S " + EVIL, message="M " + EVIL) as h:
        w = h.writer
        turn = make_call("turn", "cell " + EVIL, status=COMPLETED, input={"text": "src " + EVIL})
        top = w.append(turn, turn_level=True)
        fn = make_call("function", "fn " + EVIL, caller=top.id, status=COMPLETED)
        fn.output = "out " + EVIL + HOSTILE_HTML
        w.append(fn)
        llm = make_call("llm", "model " + EVIL, caller=fn.id, status=COMPLETED)
        llm.metadata["usage"] = {"input_tokens": 3, "output_tokens": 4}
        w.append(llm)
        return fn.id


def run_cli(*argv: str) -> subprocess.CompletedProcess[bytes]:
    """The real console script in a child process (same OPENPROGRAM_HOME), raw bytes out."""
    return subprocess.run(
        [sys.executable, "-m", "openprogram.cli", *argv],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=120,
    )


def assert_inert(out: bytes) -> str:
    text = out.decode("utf-8")  # a lone surrogate or raw byte would fail here
    for char in RAW:
        assert char not in text, (char, text)
    return text


def add_foreign_commit(session_dir: Path, message: str) -> None:
    """A commit on ``main`` as another machine could have made it (a pulled line): same
    tree, ``message`` as given, written with git plumbing (no hook, no sanitizing)."""

    def git(*args: str, stdin: str | None = None) -> str:
        env = {**os.environ, "GIT_AUTHOR_NAME": "m", "GIT_AUTHOR_EMAIL": "m@x", "HOME": "/"}
        env |= {"GIT_COMMITTER_NAME": "m", "GIT_COMMITTER_EMAIL": "m@x"}
        done = subprocess.run(
            ["git", "-C", str(session_dir), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        return done.stdout.strip()

    head = git("rev-parse", "refs/heads/main")
    sha = git("commit-tree", f"{head}^{{tree}}", "-p", head, stdin=message)
    git("update-ref", "refs/heads/main", sha, head)


def test_list_show_log_usage_show_escapes_instead_of_sending_them(op_home: Path) -> None:
    make_hostile_session("hostile")
    listed = assert_inert(run_cli("sessions", "list").stdout)
    assert f"T {EVIL_SHOWN}\\rok\\u202egnp.exe\\x9b31m\\nline2" in listed
    assert len(listed.splitlines()) == 2  # the title's newline did not break its row

    shown = run_cli("sessions", "show", "hostile")
    assert shown.returncode == 0, shown.stderr
    text = assert_inert(shown.stdout)
    assert f"title    T {EVIL_SHOWN}" in text and f"source S {EVIL_SHOWN}" in text
    tree = text.split("\n\n", 1)[1]
    assert f"cell {EVIL_SHOWN}" in tree and f"function fn {EVIL_SHOWN}" in tree
    assert f"llm model {EVIL_SHOWN}" in tree and f"· src {EVIL_SHOWN}" in tree
    assert len(tree.splitlines()) == 5  # header, root, turn, function, llm: one line each

    logged = run_cli("sessions", "log", "hostile")
    assert logged.returncode == 0, logged.stderr
    assert f"turn 1: M {EVIL_SHOWN}" in assert_inert(logged.stdout)

    usage = run_cli("sessions", "usage", "hostile")
    assert usage.returncode == 0, usage.stderr
    assert "fn \\x1b]0;pwned" in assert_inert(usage.stdout)


def test_a_pulled_commit_message_is_shown_escaped_on_one_line(op_home: Path) -> None:
    make_hostile_session("pulled")
    add_foreign_commit(op_home / "sessions" / "pulled", "turn 9: \x1b[31mred\rover\u2067x\n\nbody")
    logged = run_cli("sessions", "log", "pulled")
    assert logged.returncode == 0, logged.stderr
    lines = assert_inert(logged.stdout).splitlines()
    assert lines[0].endswith(" turn 9: \\x1b[31mred\\rover\\u2067x"), lines[0]
    assert len(lines) == 3  # the foreign commit, the turn, the creation


def test_the_notebook_commands_show_escapes_too(op_home: Path) -> None:
    from openprogram_magics.commands.context import context_lines
    from openprogram_magics.sessions import session_log

    make_hostile_session("from_nb")
    for line in session_log("from_nb"):
        assert not any(char in line for char in RAW), line
    assert any(f"M {EVIL_SHOWN}" in line for line in session_log("from_nb"))

    from openprogram.providers import create_runtime
    from openprogram_magics.notebook import NotebookMeta

    lines = context_lines(NotebookMeta(session_id="from_nb"), create_runtime("test"))
    # earlier turns are statements of their calls (render.turn_text): the hostile function
    # name and output are shown, escaped
    assert any(f"- fn {EVIL_SHOWN}" in line for line in lines), lines
    assert not any(char in line for line in lines for char in RAW)


def test_terminal_text_escapes_controls_and_keeps_ordinary_unicode() -> None:
    ordinary = "naïve 漢字 café — “quotes” 👩‍💻 עברית ∑ x\u00a0y \\ back\\slash"
    assert terminal_text(ordinary) == ordinary
    for code in [*range(0x20), 0x7F, *range(0x80, 0xA0)]:
        shown = terminal_text(f"a{chr(code)}b")
        assert shown.isprintable() and shown.startswith("a\\") and shown.endswith("b"), code
    for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029, 0xD800]:
        assert terminal_text(chr(code)) == f"\\u{code:04x}"
    assert terminal_text("a\nb\tc\rd") == "a\\nb\\tc\\rd"
    assert terminal_text("a\nb\tc\rd\x1b", keep_newlines=True) == "a\nb\tc\\rd\\x1b"
    assert terminal_text(42) == "42"


@pytest.mark.parametrize(
    "text",
    [
        HOSTILE_HTML,
        "</SCRIPT><!--",
        "\u2028\u2029",
        "a\\u003cb </script",
        "\ud800 lone surrogate",
        "\x00\x1b",
    ],
)
def test_json_for_html_round_trips_and_cannot_leave_its_element(text: str) -> None:
    value = {"k<": [text, 1, None, True], "n": 2.5}
    embedded = json_for_html(value)
    assert json.loads(embedded) == value
    assert not re.search("[<>&\u2028\u2029\ud800-\udfff]", embedded)


def page_data(html: str) -> dict[str, object]:
    """The JSON a browser would read from the page's data element: its text runs to the
    first ``</script`` (how the HTML tokenizer ends a script element's data)."""
    opening = '<script type="application/json" id="op-dag-data">'
    start = html.index(opening) + len(opening)
    data: dict[str, object] = json.loads(html[start : html.index("</script", start)])
    return data


def test_the_html_page_embeds_hostile_node_text_so_that_it_round_trips(
    op_home: Path, tmp_path: Path
) -> None:
    fn_id = make_hostile_session("paged")
    target = tmp_path / "dag.html"
    done = run_cli("sessions", "show", "paged", "--html", "-o", str(target))
    assert done.returncode == 0, done.stderr
    html = target.read_text(encoding="utf-8")
    data = page_data(html)
    details = data["details"]
    assert isinstance(details, dict)
    assert details[fn_id]["output"]["text"] == "out " + EVIL + HOSTILE_HTML
    summary = data["summary"]
    assert isinstance(summary, list)
    assert {"fn " + EVIL, "cell " + EVIL, "model " + EVIL} <= {row["name"] for row in summary}
    # the module script after the data is intact: the data element did not swallow it
    assert html.count('<script type="module">') == 1 and html.rstrip().endswith("</html>")
