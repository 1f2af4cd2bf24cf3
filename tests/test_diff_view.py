"""``%openprogram diff``'s output (``diff_view``): one display holding the static
side-by-side drawing (no script: it shows the same after a reopen, untrusted), the
terminal's text, and the report as data for a richer frontend."""

from __future__ import annotations

import pytest

from openprogram.compare.render import DIFF_MIME
from openprogram_magics.diff_view import DiffView
from tests.test_magics import AGENTS, Shell


@pytest.fixture
def shell(bare_shell: Shell) -> Shell:
    bare_shell.run(AGENTS)
    bare_shell.run('%%openprogram\ntriage("the app crashes on save")')
    bare_shell.run('%%openprogram\ntriage("add dark mode")')
    return bare_shell


def test_the_diff_is_one_display_with_the_drawing_the_text_and_the_data(shell: Shell) -> None:
    view = shell.line("diff 1 2")
    assert isinstance(view, DiffView)
    bundle = view.bundle()
    assert set(bundle) == {"text/plain", "text/html", DIFF_MIME}
    assert "<script" not in bundle["text/html"] and "triage" in bundle["text/html"]
    assert bundle[DIFF_MIME]["counts"]["paired"] == view.report.count("paired") > 0
    assert bundle["text/plain"].startswith(f"{view.title}\n")
    assert repr(view) == bundle["text/plain"].split("\n", 1)[1]
    data, _ = shell.ip.display_formatter.format(view)  # what Out[n] and a display send
    assert data == bundle
