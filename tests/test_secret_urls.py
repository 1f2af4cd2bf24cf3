"""A token in a remote's URL reaches no notebook: pushing to
``https://ghp_TOKEN@127.0.0.1:PORT/…`` (a real smart-HTTP git server behind TLS on
loopback) prints the URL without it, the notebook remembers it without it, and neither the
session's ``.git/config``, its objects nor an error message (git quotes the URL it was
given) carry it."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from wsgiref.simple_server import make_server

import nbformat
import pytest
from git_servers import _Quiet, _Threading, http_backend_app

from openprogram.store.session.store import SessionStore
from openprogram_magics.headless import run_notebook
from openprogram_magics.notebook import parse_metadata
from tests.test_magics import ipython_dir, shell  # noqa: F401  (fixtures)
from tests.test_secret_outputs import leaks_in_files

REPO = Path(__file__).resolve().parents[1]
TOKEN = "ghp_" + "SECRETTOKEN" + "0123456789abcdefXYZ"  # a GitHub-style personal token


@contextmanager
def smart_https(root: Path, user: str, password: str, cert: Path) -> Iterator[str]:
    """``git http-backend`` for ``root`` over HTTPS on 127.0.0.1 (``cert``: its key and
    self-signed certificate); yields ``127.0.0.1:PORT``."""
    server = make_server("127.0.0.1", 0, http_backend_app(root, user, password), _Threading, _Quiet)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def https_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A bare repository served over HTTPS that accepts ``TOKEN`` as the user name (as
    GitHub does), and a home whose git trusts the server's certificate."""
    cert = tmp_path / "server.pem"
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(cert), "-out", str(cert)],
        capture_output=True, check=False,
    )  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"openssl cannot make a certificate: {made.stderr.decode()[:200]}")
    home = tmp_path / "user"
    home.mkdir()
    (home / ".gitconfig").write_text(f"[http]\n\tsslCAInfo = {cert}\n")  # the user's config
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    served = tmp_path / "srv"
    subprocess.run(["git", "init", "-q", "--bare", str(served / "team.git")], check=True)
    with smart_https(served, TOKEN, "", cert) as host:
        yield host, served / "team.git"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "openprogram.cli", *args], capture_output=True, text=True
    )


@pytest.mark.kernel
@pytest.mark.timeout(300)
def test_a_token_in_the_push_url_is_printed_stored_and_quoted_nowhere(
    tmp_path: Path, op_home: Path, monkeypatch: pytest.MonkeyPatch, https_git: tuple[str, Path]
) -> None:
    host, served = https_git
    monkeypatch.setenv("PUSH_URL", f"https://{TOKEN}@{host}/team.git")  # kept out of the cells
    path = tmp_path / "work" / "nb.ipynb"
    path.parent.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(c)
        for c in (
            "%load_ext openprogram_magics\n%openprogram provider test",
            "%%openprogram\n6 * 7",
            'import os\nurl = os.environ["PUSH_URL"]',
            "%openprogram push $url",
            "%%openprogram\n7 * 6",  # a turn after the push: its output carries the remote
        )
    ]
    nbformat.write(nb, path)
    result = run_notebook(path, timeout=120)
    assert result.error is None, result.error
    saved = nbformat.read(path, as_version=4)
    pushed = "".join(o.get("text", "") for o in saved.cells[3].outputs)
    assert f"pushed to https://{host}/team.git" in pushed  # it worked, and says where
    assert saved.metadata["openprogram"]["remote"] == f"https://{host}/team.git"  # remembered
    ref = f"refs/openprogram/sessions/{result.session_id}"
    assert subprocess.run(["git", "-C", str(served), "rev-parse", ref], check=False).returncode == 0

    # the command line, the token as the user name and in the x-access-token form; then a
    # wrong token, which git refuses quoting the URL it was given
    printed = [cli("sessions", "push", "--notebook", str(path), os.environ["PUSH_URL"])]
    assert printed[0].returncode == 0, printed[0].stderr
    assert f"pushed to https://{host}/team.git (" in printed[0].stdout  # the later turn
    for url in (
        f"https://{TOKEN[:-3]}@{host}/team.git",  # a wrong (shorter) token as the user name
        f"https://x-access-token:{TOKEN}@{host}/team.git",
        f"https://alice:{TOKEN}@{host}/team.git",
    ):
        done = cli("sessions", "push", "--notebook", str(path), url)
        assert done.returncode != 0 and f"push to https://{host}/team.git failed" in done.stderr
        printed.append(done)
    for done in printed:
        assert TOKEN[:-3] not in done.stdout + done.stderr, done.stderr

    session = SessionStore(op_home).session_path(result.session_id or "")
    assert TOKEN[:-3] not in (session / ".git" / "config").read_text()
    assert leaks_in_files(path.parent, TOKEN[:-3]) == []  # the notebook, outputs included
    assert leaks_in_files(op_home, TOKEN[:-3]) == []  # every session file and git object


def test_a_token_an_older_notebook_kept_in_its_remote_is_not_passed_on() -> None:
    recorded = {"session_id": "nb_x", "remote": f"https://{TOKEN}@example.com/team.git"}
    meta = parse_metadata(recorded)
    assert meta is not None and meta.remote == "https://example.com/team.git"
    assert TOKEN not in json.dumps(meta.to_json())
    kept = parse_metadata({"session_id": "nb_x", "remote": "git@example.com:team.git"})
    assert kept is not None and kept.remote == "git@example.com:team.git"  # a user, no secret


@pytest.mark.parametrize("odd", ["'", '"', "#", "?", " "])
def test_a_password_holding_a_quote_hash_or_space_is_printed_and_recorded_nowhere(
    tmp_path: Path, odd: str
) -> None:
    """git sends ``alice:Hunter2'Secret`` as the credential: its messages, ours and what a
    notebook records of the remote hold no part of it (real git, a refused connection)."""
    from openprogram.sharing import check_url, record_remote

    port = refused_port()
    url = check_url(f"https://alice:Hunter2{odd}Secret@127.0.0.1:{port}/x.git", from_notebook=False)
    assert record_remote(url, tmp_path) == f"https://127.0.0.1:{port}/x.git"
    said = push_and_pull_fail(url, tmp_path)
    assert all(f"127.0.0.1:{port}/x.git" in text for text in said), said
    assert not any(part in text for text in said for part in ("Hunter2", "Secret")), said


def test_a_password_after_a_user_name_holding_an_at_is_masked_shown_and_dropped_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One rule reads a URL's credentials to its last ``@`` before the host (as urllib and
    git do), for what is shown and for a remote alike: the password after the user name
    ``ada@corp.example`` is masked in an output and known from the environment."""
    from openprogram.context.secrets import (
        mask_binary,
        redact_secrets,
        redact_url_passwords,
        refresh_secrets,
    )
    from openprogram.store.session.remotes import redact_url

    password = "Proxy-" + "Passw0rd" + "-42"
    url = f"http://ada@corp.example:{password}@127.0.0.1:9/v1"
    monkeypatch.setenv("HTTPS_PROXY", url)  # no credential by its name: by its URL
    refresh_secrets()
    assert redact_secrets(f"proxy refused {password}") == "proxy refused ***"
    assert redact_url_passwords(f"via {url}.") == "via http://ada@corp.example:***@127.0.0.1:9/v1."
    assert password.encode() not in mask_binary(f"\0{url}\0".encode())
    assert redact_url(url) == "http://127.0.0.1:9/v1"


def refused_port() -> int:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def push_and_pull_fail(url: str, tmp_path: Path) -> list[str]:
    """What a push, then a pull, of a new one-turn session to ``url`` (unreachable) say."""
    from openprogram.errors import SyncError
    from openprogram.store.session.sync import pull, push
    from tests.test_untrusted_git import one_turn

    one_turn("s1", "one", tmp_path / "home")
    store = SessionStore(tmp_path / "home")
    said = []
    for send in (push, pull):
        with pytest.raises(SyncError) as failed:
            send(store, "s1", url, "https")
        said.append(str(failed.value))
    store.close()
    return said


@pytest.mark.parametrize(
    "name",
    [
        "private_token",
        "access_token",
        "Token",
        "api_key",
        "APIKEY",
        "key",
        "password",
        "secret",
        "sig",
        "signature",
        "X-Amz-Signature",
        "x-amz-credential",
        "X-Goog-Signature",
        "client_secret",
    ],
)
def test_a_token_in_the_query_is_printed_and_recorded_nowhere(tmp_path: Path, name: str) -> None:
    """``https://host/x.git?private_token=…`` (GitLab's way): git quotes the URL, query and
    all, when it cannot reach it; our message and what a notebook records keep the
    parameter's name and mask its value, as they do a password (real git)."""
    from openprogram.sharing import check_url, record_remote

    port = refused_port()
    url = check_url(f"https://127.0.0.1:{port}/x.git?ref=main&{name}={TOKEN}", from_notebook=False)
    shown = f"https://127.0.0.1:{port}/x.git?ref=main&{name}=***"
    assert record_remote(url, tmp_path) == shown
    said = push_and_pull_fail(url, tmp_path)
    assert all(shown in text for text in said), said
    assert not any(TOKEN[4:12] in text for text in said), said
    old = parse_metadata({"session_id": "nb_x", "remote": url})  # an older notebook's
    assert old is not None and old.remote == shown


@pytest.mark.parametrize(
    "query",
    [
        "?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential={}&X-Goog-Signature={}",
        "?X-Amz-Security-Token={}&X-Amz-Signature={}",
        "?client_secret={}&refresh_token={}",
        "?id_token={}&api-key={}",
        "?auth={}&passwd={}&pwd={}",
        "#access_token={}&token_type=bearer",  # OAuth's implicit flow: in the fragment
    ],
)
def test_every_credential_of_a_signed_or_oauth_url_is_masked_shown_and_in_a_remote(
    query: str,
) -> None:
    """A signed Cloud Storage / S3 URL, an OAuth token request or redirect: each credential
    parameter's value is masked in what is shown, in a remote as recorded and in a binary
    buffer, and is known as a URL's secret; the parameters that are none stay."""
    from openprogram.context.secrets import holds_secret, mask_binary, redact_shown, url_passwords
    from openprogram.store.session.remotes import redact_url

    values = [f"{TOKEN}{i}" for i in range(query.count("{}"))]
    url = "https://h.example.com/o" + query.format(*values)
    masked = "https://h.example.com/o" + query.format(*["***"] * len(values))
    assert redact_shown(f"fetched {url} ok") == f"fetched {masked} ok"
    assert redact_url(url) == masked
    assert holds_secret(url.encode()) and set(values) <= url_passwords(url)
    assert not any(v.encode() in mask_binary(f"\0{url}\0".encode()) for v in values)


def test_a_push_to_a_url_with_a_query_token_leaves_it_in_no_message_node_or_notebook(
    shell: Any,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The user's path: ``%openprogram push URL?private_token=…`` in a notebook, to a
    server that cannot be reached."""
    from IPython.core.error import UsageError

    monkeypatch.setenv("OPENPROGRAM_HOME", str(tmp_path / "home"))
    shell.run('%%openprogram\ntriage("the app crashes")')
    url = f"https://127.0.0.1:{refused_port()}/team.git?private_token={TOKEN}"
    result = shell.run(f"%openprogram push {url}", error=UsageError)
    said = str(result.error_in_exec)
    assert "push to https://127.0.0.1:" in said and "/team.git?private_token=***" in said, said
    assert TOKEN[4:12] not in said
    meta = shell.magics.current_meta()
    assert meta is not None and TOKEN[4:12] not in json.dumps(meta.to_json())
    assert leaks_in_files(tmp_path / "home", TOKEN[4:12]) == []  # nodes, live.db, git objects
