"""Literature tools against loopback servers this test starts (never the real arXiv): an
Atom feed shaped like arXiv's, an HTML page, a PDF the test makes — parsed, recorded as
``tool`` nodes, and refused with one line when too big, too slow, malformed or offline."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from git_servers import serving

from openprogram import create_runtime, session_context
from openprogram.agent.session_db import default_db
from openprogram.errors import LiteratureError
from openprogram.programs.research import literature, survey_topic
from openprogram.programs.research.literature import (
    fetch_page,
    read_pdf,
    search_arxiv,
)
from openprogram.providers.test import TestProvider

FEED = b"""<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom" xmlns:arxiv="http://arxiv.org/schemas/atom">
  <title type="html">ArXiv Query: search_query=all:agents</title>
  <id>http://arxiv.org/api/abc</id>
  <entry>
    <id>http://arxiv.org/abs/2401.00001v1</id>
    <published>2024-01-02T00:00:00Z</published>
    <title>Reliable Tool Use
      for Language Agents</title>
    <summary>  We study how agents fail on long tasks.  </summary>
    <author><name>Ada Lovelace</name></author>
    <author><name>Alan Turing</name></author>
    <link href="http://arxiv.org/abs/2401.00001v1" rel="alternate" type="text/html"/>
    <link title="pdf" href="http://arxiv.org/pdf/2401.00001v1" rel="related"/>
    <arxiv:primary_category term="cs.CL"/>
  </entry>
  <entry>
    <id>http://arxiv.org/abs/2312.09999v2</id>
    <published>2023-12-30T00:00:00Z</published>
    <title>Planning with Verifiers</title>
    <summary>Verifiers help.</summary>
    <author><name>Grace Hopper</name></author>
  </entry>
</feed>
"""

PAGE = b"""<!doctype html><html><head><title>Agent reliability  survey</title>
<style>p { color: red }</style><script>var secret = "do not show";</script></head>
<body><h1>Why agents fail</h1><p>Long tasks compound small errors.</p>
<ul><li>Tool misuse</li><li>Lost context</li></ul></body></html>"""


def make_pdf(text: str) -> bytes:
    """A one-page PDF with ``text`` in Helvetica, xref offsets computed."""
    stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


PDF = make_pdf("Compounding errors in long-horizon agents")
ROUTES: dict[str, tuple[str, bytes]] = {
    "/api/query": ("application/atom+xml", FEED),
    "/page.html": ("text/html; charset=utf-8", PAGE),
    "/paper.pdf": ("application/pdf", PDF),
    "/big.html": ("text/html", b"<p>" + b"x" * 50_000 + b"</p>"),
    "/not-a-feed": ("application/atom+xml", b"<html><body>rate limited</body></html>"),
    "/broken-xml": ("application/atom+xml", b"<feed><entry>"),
    "/broken.pdf": ("application/pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog"),
    "/page.pdf": ("application/pdf", PAGE),
    "/image.png": ("image/png", b"\x89PNG\r\n"),
}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        self.server.seen.append(self.path)  # type: ignore[attr-defined]
        if path == "/big-unsized":  # no Content-Length: the size shows while reading
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<p>" + b"x" * 50_000 + b"</p>")
            return
        if path == "/silent":  # nothing at all for a long time
            time.sleep(2)
        if path not in ROUTES:
            self.send_error(404, "Not Found")
            return
        kind, body = ROUTES[path]
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.seen = []  # type: ignore[attr-defined]
    httpd.daemon_threads = True
    with serving(httpd) as url:
        yield url


def test_search_arxiv_parses_the_feed_and_records_a_tool_node(server: str, op_home: Path) -> None:
    with session_context(runtime=create_runtime(TestProvider())) as s:
        papers = search_arxiv("agents", max_results=5, base_url=f"{server}/api/query")
    assert papers[0] == {
        "id": "2401.00001v1",
        "title": "Reliable Tool Use for Language Agents",
        "authors": ["Ada Lovelace", "Alan Turing"],
        "year": "2024",
        "summary": "We study how agents fail on long tasks.",
        "pdf": "https://arxiv.org/pdf/2401.00001v1",  # the feed's http link: https
    }
    assert [p["title"] for p in papers][1] == "Planning with Verifiers" and papers[1]["pdf"] == ""
    (node,) = [n for n in default_db().open(s.session_id).nodes() if n.kind == "tool"]
    assert node.name == "search_arxiv" and node.status == "completed"
    assert node.input["url"].endswith("search_query=all%3Aagents&start=0&max_results=5")
    assert node.output[0]["authors"] == ["Ada Lovelace", "Alan Turing"]


def test_the_base_url_comes_from_the_environment(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENPROGRAM_ARXIV_URL", f"{server}/api/query")
    assert len(search_arxiv("anything")) == 2  # outside a session: no node, same result


def test_fetch_page_gives_the_readable_text(server: str) -> None:
    page = fetch_page(f"{server}/page.html")
    assert page["title"] == "Agent reliability survey"
    assert (
        page["text"]
        == "Why agents fail\nLong tasks compound small errors.\nTool misuse\nLost context"
    )
    assert "secret" not in page["text"] and "color" not in page["text"]


def test_read_pdf_from_a_url_and_a_file(server: str, tmp_path: Path) -> None:
    remote = read_pdf(f"{server}/paper.pdf")
    assert remote["pages"] == 1 and "Compounding errors in long-horizon agents" in remote["text"]
    local = tmp_path / "paper.pdf"
    local.write_bytes(PDF)
    assert read_pdf(str(local))["text"] == remote["text"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: search_arxiv("x", base_url=f"{s}/not-a-feed"), "not an Atom feed"),
        (lambda s: search_arxiv("x", base_url=f"{s}/broken-xml"), "not XML"),
        (lambda s: read_pdf(f"{s}/broken.pdf"), "is not a readable PDF"),
        (lambda s: read_pdf(f"{s}/page.pdf"), "is not a PDF"),
        (lambda s: fetch_page(f"{s}/image.png"), "image/png is not a web page"),
        (lambda s: fetch_page(f"{s}/missing"), "HTTP 404"),
        (lambda s: fetch_page("file:///etc/passwd"), r"not an http\(s\) URL"),
        (lambda s: read_pdf("/no/such/file.pdf"), "no such file"),
    ],
    ids=["feed-html", "feed-xml", "pdf-damaged", "pdf-html", "page-image", "404", "file", "path"],
)
def test_malformed_answers_are_refused_with_one_line(server: str, call: Any, message: str) -> None:
    with pytest.raises(LiteratureError, match=message) as info:
        call(server)
    assert "\n" not in str(info.value)


PASSWORD = "hunter2secretpw"


@pytest.mark.parametrize(
    "call",
    [
        lambda s: fetch_page(f"{s}/image.png"),
        lambda s: fetch_page(f"{s}/missing"),
        lambda s: read_pdf("http://alice:hunter2secretpw@127.0.0.1:1/x.pdf"),
    ],
    ids=["not-a-page", "404", "unreachable"],
)
def test_a_url_password_is_masked_in_every_literature_error(server: str, call: Any) -> None:
    with pytest.raises(LiteratureError) as info:
        call(server.replace("http://", f"http://alice:{PASSWORD}@"))
    assert PASSWORD not in str(info.value) and "alice:***@" in str(info.value)


def test_the_cli_masks_a_password_in_the_arxiv_url(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from openprogram.cli import main

    url = server.replace("http://", f"http://reader:{PASSWORD}@") + "/missing"
    monkeypatch.setenv("OPENPROGRAM_ARXIV_URL", url)
    args = ["research", "agents", "--work-dir", str(tmp_path), "--provider", "test"]
    assert main([*args, "--search-arxiv", "2"]) == 2
    err = capsys.readouterr().err
    assert "reader:***@" in err and PASSWORD not in err and err.count("\n") == 1


def test_oversized_and_slow_answers_are_refused(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(literature, "MAX_BYTES", 10_000)
    with pytest.raises(LiteratureError, match="over the 10,000 limit"):
        fetch_page(f"{server}/big.html")  # said so by Content-Length
    with pytest.raises(LiteratureError, match="more than the 10,000-byte limit"):
        fetch_page(f"{server}/big-unsized")  # counted while reading
    monkeypatch.setattr(literature, "TIMEOUT", 0.4)
    with pytest.raises(LiteratureError, match=r"too slow \(nothing for 0\.4 s\)"):
        fetch_page(f"{server}/silent")  # nothing comes: the per-read timeout
    # a server that drips its answer (the whole-answer deadline): test_literature_reach.py


def test_offline_says_which_host_cannot_be_reached(op_home: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    unreachable = pytest.raises(LiteratureError, match=r"cannot reach 127\.0\.0\.1 .*offline\?")
    with session_context(runtime=create_runtime(TestProvider())) as s, unreachable:
        search_arxiv("agents", base_url=f"http://127.0.0.1:{port}/api/query")
    (node,) = [n for n in default_db().open(s.session_id).nodes() if n.kind == "tool"]
    assert node.status == "error" and "cannot reach" in node.metadata["error"]


def test_the_survey_stage_reads_the_papers_found(server: str, op_home: Path) -> None:
    provider = TestProvider()
    with session_context(runtime=create_runtime(provider)) as s:
        papers = search_arxiv("agents", base_url=f"{server}/api/query")
        survey_topic("make agents reliable", papers)
    assert "Reliable Tool Use for Language Agents" in provider.requests[0].messages[-1]["content"]
    kinds = [n.kind for n in default_db().open(s.session_id).nodes()]
    assert kinds.count("tool") == 1 and kinds.count("llm") == 1


def test_the_cli_searches_arxiv_first_when_asked(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openprogram.cli import main
    from openprogram.programs.research import ResearchWork

    monkeypatch.setenv("OPENPROGRAM_ARXIV_URL", f"{server}/api/query")
    args = ["research", "agents", "--work-dir", str(tmp_path), "--provider", "test"]
    assert main([*args, "--search-arxiv", "2"]) == 0
    work = ResearchWork(tmp_path)
    assert [p["id"] for p in work.load("papers")["papers"]] == ["2401.00001v1", "2312.09999v2"]
    assert "Reliable Tool Use for Language Agents" in (tmp_path / "papers.md").read_text()
    assert work.done("review")
