"""Secrets the process did not know by the classifier's names, URL passwords, a
``TurnResult`` and the ``%openprogram call`` line, the shapes a methods appendix masks,
and titles without the user's home (issue 34, item 2).  What a kernel message carries is
in ``test_outputs.py``, the saved-notebook case (a real kernel) in ``test_secret_outputs.py``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from test_commands_plain import Host as CommandHost
from traitlets.config import Config

from openprogram import tool
from openprogram.agent import dispatcher as D
from openprogram.agent.session_db import default_db
from openprogram.context.secrets import (
    redact_key_like,
    redact_secrets,
    redact_url_passwords,
    refresh_secrets,
)
from openprogram_magics import bridge, commands
from openprogram_magics.notebook import NotebookMeta
from openprogram_magics.sessions import shareable_title
from tests.test_secret_outputs import leaks_in_files

KEY = "sk-fake-" + "Shape0123" + "NeverShown"
PASSWORD = "Url-" + "Passw0rd" + "-42"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwi"
    "aWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


@pytest.mark.parametrize(
    "name",
    [
        "AZURE_OPENAI_KEY",
        "MISTRAL_KEY",
        "SERVICE_TOKEN",
        "GITLABTOKEN",
        "APP_SECRET",
        "DB_PASSWORD",
        "GITHUB_PAT",
    ],
)
def test_a_credential_under_any_usual_name_is_masked_and_never_stored(
    name: str, monkeypatch: pytest.MonkeyPatch, op_home: Path
) -> None:
    value = f"{name.lower()}-v4lue-0123"
    monkeypatch.setenv(name, value)
    assert redact_secrets(f"the model said {value}.") == "the model said ***."

    @tool
    def echo() -> str:
        """Say what the environment holds."""
        return f"it is {value}"

    result = D.dispatch_forced_tool_call("nb_names", "echo", {}, tools={"echo": echo})
    assert result.text == "it is ***"
    assert leaks_in_files(op_home, value) == []  # node files, journal, git objects


def test_ordinary_variables_and_mapping_keys_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_PATH", "/opt/some/where/else")
    monkeypatch.setenv("MAX_TOKENS", "123456789")
    monkeypatch.setenv("PWD", "/srv/work/folder")
    text = "cd /srv/work/folder; /opt/some/where/else used 123456789 tokens"
    assert redact_secrets(text) == text
    from openprogram.context.nodes import sanitize

    assert sanitize({"sort_key": "by-name-then-date"}) == {"sort_key": "by-name-then-date"}


def test_a_password_in_a_url_is_masked_in_the_url_and_on_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://ada:{PASSWORD}@127.0.0.1:9/v1")
    refresh_secrets()
    assert redact_secrets(f"auth failed for {PASSWORD}") == "auth failed for ***"
    shown = redact_url_passwords("get http://ada:pw@host/v1 and ssh://git:x9@h/r.git")
    assert shown == "get http://ada:***@host/v1 and ssh://git:***@h/r.git"
    assert redact_url_passwords("mail ada@host, see https://host/a@b") == (
        "mail ada@host, see https://host/a@b"
    )


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.setattr(bridge, "_state", None)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    InteractiveShell.clear_instance()
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    config.InteractiveShell.ipython_dir = str(tmp_path / "ipython")
    config.InteractiveShell.colors = "nocolor"  # IPython 9: lowercase (8: any case)
    ip = InteractiveShell.instance(config=config)
    ip.run_line_magic("load_ext", "openprogram_magics")
    try:
        yield ip
    finally:
        InteractiveShell.clear_instance()


def test_status_prints_the_base_url_without_its_password_and_no_home_path(
    shell: InteractiveShell,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("OPENPROGRAM_PROVIDER", "openai")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://ada:pw1@127.0.0.1:9/v1")  # short: by shape
    monkeypatch.setenv("HOME", str(tmp_path))  # the sessions folder is in the user's home
    shell.run_line_magic("openprogram", "new --id nb_status")
    shell.run_line_magic("openprogram", "status")
    out = capsys.readouterr().out
    assert "base URL: http://ada:***@127.0.0.1:9/v1 (environment OPENAI_BASE_URL)" in out
    assert "path: ~/home/sessions/nb_status (created at the first turn)" in out
    assert "pw1" not in out and str(tmp_path) not in out


@dataclass
class Host(CommandHost):
    shell: Any = None


def test_a_forced_call_prints_and_returns_its_text_masked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)

    @tool
    def whoami() -> str:
        """Say the key."""
        return f"the key is {KEY}"

    host = Host(meta=NotebookMeta("nb_shapes"), shell=SimpleNamespace(user_ns={"whoami": whoami}))
    result = commands.run(host, "call whoami")
    assert result.text == "the key is ***"
    assert capsys.readouterr().out.endswith(" · the key is ***\n")
    failed = D.dispatch_forced_tool_call("nb_shapes", "w", {"n": KEY}, tools={"w": whoami})
    assert KEY not in repr(failed)  # an error that quotes the arguments, masked too
    assert default_db().exists("nb_shapes")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"token was {JWT} ok", "token was *** ok"),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
         "AWS_SECRET_ACCESS_KEY=***"),
        ("id AKIAIOSFODNN7EXAMPLE here", "id *** here"),
        ("base http://alice:hunter2pass@host.example/v1", "base http://alice:***@host.example/v1"),
        ("token 3f2a9c0b8d7e6f5a4b3c2d1e0f9a8b7c here", "token *** here"),
        ("post https://hooks.slack.com/services/T0000AB00/B0000CD00/XyZ123abcDEF456ghiJKL78 now",
         "post *** now"),
        ("X-Api-Token: abcDEF123456ghiJKL", "X-Api-Token: ***"),
        ('{"X-Api-Token": "abcDEF123456ghiJKL"}', '{"X-Api-Token": "***"}'),
        ("password: hunter22", "password: ***"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- end", "*** end"),
    ],
)  # fmt: skip
def test_the_appendix_masks_the_common_shapes(text: str, shown: str) -> None:
    assert redact_key_like(text) == shown


def test_the_appendix_keeps_what_only_resembles_a_secret() -> None:
    text = (
        "commit 3f2a9c0b8d7e6f5a4b3c2d1e0f9a8b7c12345678, max_tokens: 4096, tokens=12345678, "
        "the secret: ingredient, uuid 123e4567-e89b-12d3-a456-426614174000, ip 8.8.8.8, "
        "ada@example.com, https://example.com/a?b=c, doc_hash `0123456789abcdef`"
    )
    assert redact_key_like(text) == text


def test_a_title_names_the_home_folder_as_tilde() -> None:
    home = "/home/ada"
    assert shareable_title("notebook /home/ada/work/nb.ipynb", home) == "notebook ~/work/nb.ipynb"
    for kept in ("notebook /home/adam/nb.ipynb", "notebook /tmp/nb.ipynb", "notebook", None):
        assert shareable_title(kept, home) == kept


def test_a_url_password_no_variable_names_is_stored_and_returned_masked(op_home: Path) -> None:
    @tool
    def endpoint() -> str:
        """Where the service is."""
        return "the service is at http://ada:Pw9@10.0.0.7:8080/v1"

    result = D.dispatch_forced_tool_call("nb_urls", "endpoint", {}, tools={"endpoint": endpoint})
    assert result.text == "the service is at http://ada:***@10.0.0.7:8080/v1"
    assert leaks_in_files(op_home, "ada:Pw9@") == []  # node files, journal, git objects
    assert leaks_in_files(op_home, "ada:***@10.0.0.7") != []  # recorded, masked


def test_the_appendix_writes_the_home_folder_as_tilde(monkeypatch: pytest.MonkeyPatch) -> None:
    from openprogram.compare.appendix import redact

    monkeypatch.setenv("HOME", "/home/ada")
    assert (
        redact("read /home/ada/data/x.csv, not /home/adam/y")
        == "read ~/data/x.csv, not /home/adam/y"
    )
