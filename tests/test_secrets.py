"""No API key, token or ``Authorization`` / ``x-api-key`` header value ever reaches what
openprogram writes: node files, journals, the index cache, ``meta.json`` and every git
object (decompressed) of every session under ``$OPENPROGRAM_HOME``.
"""

from __future__ import annotations

import os
import subprocess
import urllib.parse
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import settled
from wire_server import Reply, WireServer

from openprogram import agentic_function, create_runtime, session_context
from openprogram.agent.session_db import default_db
from openprogram.agentic_programming.runtime import Runtime
from openprogram.providers.anthropic_provider import AnthropicProvider
from openprogram.providers.base import ProviderError
from openprogram.providers.openai_provider import OpenAIProvider
from openprogram.providers.test import TestProvider

ARG_KEY = "sk-test-SECRET-123"
OPENAI_ENV_KEY = "sk-fake-openai-ENVKEY-777"
ANTHROPIC_ENV_KEY = "sk-ant-fake-ENVKEY-888"
SECRETS = [ARG_KEY, OPENAI_ENV_KEY, ANTHROPIC_ENV_KEY]
PATTERNS = [s.encode() for s in SECRETS] + [b"Bearer sk-", b"SECRET-123", b"ENVKEY"]

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[WireServer]:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_ENV_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_ENV_KEY)
    with WireServer() as srv:
        yield srv


def everything_written(home: Path) -> Iterator[tuple[str, bytes]]:
    """(where, bytes) for every file under ``home`` and every git object, decompressed."""
    for path in sorted(p for p in settled(home).rglob("*") if p.is_file()):
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # a loose object packed meanwhile (detached maintenance):
            continue  # its content is in the pack, scanned below through git
        yield str(path), data
        if "/.git/objects/" in str(path) and "/pack/" not in str(path):
            yield f"{path} (inflated)", zlib.decompress(data)
    for git_dir in home.rglob(".git"):
        repo = git_dir.parent
        out = subprocess.run(
            ["git", "cat-file", "--batch-all-objects", "--batch"],
            cwd=repo,
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
        assert out, f"no git objects in {repo}?"
        yield f"{repo} (all git objects)", out


def assert_no_secret(home: Path) -> int:
    scanned = 0
    for where, data in everything_written(home):
        scanned += 1
        for pattern in PATTERNS:
            assert pattern not in data, f"{pattern!r} written to {where}"
    return scanned


@agentic_function
def call_service(query: str, api_key: str, headers: dict[str, str], runtime: Any = None) -> Any:
    """Query the service and summarise the answer."""
    assert runtime is not None
    return runtime.exec(f"summarise the answer to {query}")


@agentic_function
def configure(config: dict[str, Any], token: str | None = None) -> str:
    """Configure the client."""
    return "configured"


@agentic_function
def leaky() -> None:
    """Fail with a message that quotes the configured keys."""
    import os

    raise RuntimeError(
        f"could not log in with {os.environ['OPENAI_API_KEY']} / {os.environ['ANTHROPIC_API_KEY']}"
    )


def run_everything(server: WireServer) -> list[str]:
    """Calls through the test provider and both SDKs (explicit keys and env keys), including
    failing ones whose vendor error message echoes the key.  Returns the session ids."""
    headers = {"Authorization": f"Bearer {ARG_KEY}", "x-api-key": ARG_KEY}
    sessions = []
    runtimes: list[tuple[Runtime, str | None]] = [
        (create_runtime(TestProvider(), backoff=0.0), None),
        (
            create_runtime(
                OpenAIProvider("gpt-x", api_key=ARG_KEY, base_url=server.openai_base_url),
                backoff=0.0,
                max_retries=0,
            ),
            ARG_KEY,
        ),
        (
            create_runtime(
                AnthropicProvider("claude-x", api_key=ARG_KEY, base_url=server.anthropic_base_url),
                backoff=0.0,
                max_retries=0,
            ),
            ARG_KEY,
        ),
        # keys from the environment (OPENAI_API_KEY / ANTHROPIC_API_KEY)
        (
            create_runtime(
                OpenAIProvider("gpt-x", base_url=server.openai_base_url), backoff=0, max_retries=0
            ),
            OPENAI_ENV_KEY,
        ),
        (
            create_runtime(
                AnthropicProvider("claude-x", base_url=server.anthropic_base_url),
                backoff=0,
                max_retries=0,
            ),
            ANTHROPIC_ENV_KEY,
        ),
    ]
    for rt, sent_key in runtimes:
        if sent_key:
            server.reply(Reply(text="an answer"), Reply(chunks=["stream", "ed"]))
        with session_context(runtime=rt) as handle:
            sessions.append(handle.session_id)
            call_service("weather", api_key=ARG_KEY, headers=headers)
            configure({"api_key": ARG_KEY, "nested": {"password": ARG_KEY}}, token=ARG_KEY)
            rt.exec("one more, streamed", on_delta=lambda _chunk: None)
            # user code that puts an environment key in an exception message
            with pytest.raises(RuntimeError):
                leaky()
            if sent_key:
                # a vendor that echoes the key it got back in its error message (OpenAI does)
                server.reply(
                    Reply(status=401, error_message=f"Incorrect API key provided: {sent_key}")
                )
                with pytest.raises(ProviderError) as info:
                    call_service("again", api_key=ARG_KEY, headers=headers)
                assert sent_key not in str(info.value)
    return sessions


def test_no_secret_is_written_anywhere(server: WireServer, op_home: Path):
    sessions = run_everything(server)
    # the keys really were sent: the scan below is not vacuous
    auth = {r.headers.get(h) for r in server.requests for h in ("authorization", "x-api-key")}
    sent = " ".join(value for value in auth if value)
    assert all(secret in sent for secret in SECRETS)

    # while the sessions are still open: journals and node files in flight
    scanned_open = assert_no_secret(op_home)
    default_db().close()
    scanned = assert_no_secret(op_home)
    assert scanned_open > 10 and scanned > 10

    # and the nodes do say what happened, with the secrets masked
    from openprogram.store.session.store import SessionStore

    store = SessionStore(op_home)
    nodes = [n for sid in sessions for n in store.open(sid).nodes()]
    store.close()
    calls = [n for n in nodes if n.name == "call_service"]
    assert calls[0].input["api_key"] == "***"
    assert calls[0].input["headers"] == {"Authorization": "***", "x-api-key": "***"}
    assert next(n.input for n in nodes if n.name == "configure") == {
        "config": {"api_key": "***", "nested": {"password": "***"}},
        "token": "***",
    }
    failed = [n for n in nodes if n.kind == "llm" and n.status == "error"]
    assert len(failed) == 4
    assert all("401" in n.metadata["error"] for n in failed)
    leaks = [n for n in nodes if n.name == "leaky"]
    assert len(leaks) == 5
    assert all(
        n.metadata["error"] == "RuntimeError: could not log in with *** / ***" for n in leaks
    )


def test_credential_keys_are_masked_and_token_counts_are_not() -> None:
    from openprogram.context.nodes import sanitize

    masked = [
        "api_key",
        "x-api-key",
        "Authorization",
        "private_key",
        "passwd",
        "Cookie",
        "credentials",
        "bearer",
        "auth_token",
        "access_token",
        "client_secret",
        "token",
    ]
    kept = ["max_tokens", "input_tokens", "output_tokens", "tokens", "keyboard", "author"]
    out = sanitize({k: "value" for k in masked + kept})
    assert {k for k, v in out.items() if v == "***"} == set(masked)


AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # '/': percent-encoded in a URL


@agentic_function
def build_urls(service: str, runtime: Any = None) -> list[str]:
    """Build the URLs a tool would call."""
    query = urllib.parse.urlencode({"secret": os.environ["AWS_SECRET_ACCESS_KEY"]})
    return [f"https://{service}/v1?{query}", f"https://bob:{PASSWORD_WITH_AT}@{service}/"]


PASSWORD_WITH_AT = "p@ssw0rd-long-123"  # unencoded: urllib and httpx read all of it


def test_a_secret_percent_encoded_or_a_password_holding_an_at_is_written_nowhere(
    op_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A credential put in a URL query the usual way (``urlencode``) and a URL whose password
    holds an ``@`` (before: ``bob:***@ssw0rd-long-123@…`` was committed) are masked."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    with session_context(runtime=create_runtime("test")):
        urls = build_urls("api.example.org")
    assert urllib.parse.quote_plus(AWS_SECRET) in urls[0]  # the caller has the real value
    forms = [urllib.parse.quote_plus(AWS_SECRET).encode(), b"ssw0rd-long-123"]
    scanned = 0
    for where, data in everything_written(op_home):
        scanned += 1
        for form in forms:
            assert form not in data, f"{form!r} written to {where}"
    assert scanned > 3


@pytest.mark.parametrize(
    ("shown", "expected"),
    [  # a query parameter is a credential's by its last word, inside a URL only
        ("https://h.org/v1?apiToken=abc123&page=2", "https://h.org/v1?apiToken=***&page=2"),
        ("https://h.org/cb#access_token=abc123&token_type=bearer",
         "https://h.org/cb#access_token=***&token_type=bearer"),
        ("https://h.org/?x-api-key=abc123;q=1", "https://h.org/?x-api-key=***;q=1"),
        ("see https://pandas.pydata.org\nrow;key=3;value=7", "see https://pandas.pydata.org\nrow;key=3;value=7"),
    ],
)  # fmt: skip
def test_a_credential_in_a_query_is_masked_by_its_name_and_nothing_else(
    shown: str, expected: str
) -> None:
    from openprogram.context.secrets import redact_shown

    assert redact_shown(shown) == expected


@pytest.mark.parametrize(
    ("command", "expected"),
    [  # docker's -e NAME=V and env NAME=V; a value holding a comma; flags that hold none
        ("docker run -e GITHUB_PERSONAL_ACCESS_TOKEN=ghp_abcdefgh1234 img",
         "docker run -e GITHUB_PERSONAL_ACCESS_TOKEN=*** img"),
        ("env BRAVE_API_KEY=BSAabcdef123456 npx server", "env BRAVE_API_KEY=*** npx server"),
        ("server --password p@ss,word1", "server --password ***"),
        ("server --auth-mode oauth --key-file /etc/key.pem",
         "server --auth-mode oauth --key-file /etc/key.pem"),
    ],
)  # fmt: skip
def test_a_command_lines_credentials_are_masked_by_the_words_that_name_them(
    command: str, expected: str
) -> None:
    from openprogram.context.secrets import redact_command

    assert redact_command(command, command.split()) == expected
