"""Tools for literature work: search arXiv, fetch a web page as text, read a PDF.

Every network access is explicit — these functions are the only ones here that open a
URL, and only the URL they are given (arXiv's base URL: ``base_url=``, else
``$OPENPROGRAM_ARXIV_URL``, else arXiv's public Atom API), over http(s); a redirect is
followed only to the same scheme, host and port, at most 5 times (:mod:`.http_get`).  Each
read has a timeout per socket operation, one deadline bounds the whole answer, and a size
limit; a local PDF must be a regular file (no device, pipe, folder or ``/proc`` file).  What
breaks any of these, or does not parse, raises :class:`LiteratureError` with one line saying why
(offline: which host could not be reached).  Inside a session each call is recorded as a
``tool`` node; all three are ``@tool``-marked, so a chat turn can use them too.
"""

from __future__ import annotations

import io
import os
import re
import stat
import urllib.parse
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, TypeVar

from openprogram.agent.chat import tool
from openprogram.agentic_programming.function import get_call_id, using_call_id
from openprogram.context.nodes import make_call
from openprogram.context.outcome import finish
from openprogram.context.secrets import redact_secrets
from openprogram.errors import LiteratureError
from openprogram.programs.research import http_get
from openprogram.settings import current as current_settings
from openprogram.store.vars import get_store

ARXIV_URL = "https://export.arxiv.org/api/query"
TIMEOUT = 15.0  # seconds per socket operation
DEADLINE = 30.0  # seconds for the whole answer (connect, headers, body, redirects)
MAX_BYTES = 5_000_000  # pages and feeds
MAX_PDF_BYTES = 20_000_000
MAX_TEXT = 200_000  # characters of text handed back
USER_AGENT = "openprogram-literature/0.1 (+https://pypi.org/project/openprogram)"
ATOM = "{http://www.w3.org/2005/Atom}"
T = TypeVar("T")


# -- recording ---------------------------------------------------------------------------------
def _as_tool_node(name: str, inputs: dict[str, Any], work: Callable[[], T]) -> T:
    """Run ``work`` as a ``tool`` node of the current frame (no session: just run it; a chat
    turn that already opened this tool's node: run inside it)."""
    writer = get_store()
    frame = get_call_id()
    if writer is None or (frame is not None and _is_tool_node(writer, frame, name)):
        return work()
    node = writer.append(make_call("tool", name, input=inputs, caller=frame))
    try:
        with using_call_id(node.id):
            result = work()
    except BaseException as exc:
        writer.update(finish(node, exc=exc))
        raise
    writer.update(finish(node, output=result))
    return result


def _is_tool_node(writer: Any, node_id: str, name: str) -> bool:
    try:
        node = writer.get(node_id)
    except Exception:
        return False
    return bool(node.kind == "tool" and node.name == name)


# -- fetching ----------------------------------------------------------------------------------
def fetch_bytes(
    url: str,
    *,
    max_bytes: int | None = None,
    timeout: float | None = None,
    deadline: float | None = None,
) -> tuple[bytes, str]:
    """GET ``url`` (http/https only): the body and its content type, or LiteratureError.
    Redirects are followed only to the same scheme, host and port, at most 5 times.  Limits
    default to the module's ``MAX_BYTES``, ``TIMEOUT`` (per socket operation) and
    ``DEADLINE`` (the whole answer)."""
    return http_get.get(
        url,
        max_bytes=MAX_BYTES if max_bytes is None else max_bytes,
        timeout=TIMEOUT if timeout is None else timeout,
        deadline=DEADLINE if deadline is None else deadline,
        user_agent=USER_AGENT,
    )


# -- arXiv -------------------------------------------------------------------------------------
@tool
def search_arxiv(query: str, max_results: int = 10, base_url: str = "") -> list[dict[str, Any]]:
    """Search arXiv for papers matching a query; returns id, title, authors, year, summary
    and pdf link of each."""
    max_results = max(1, min(int(max_results), 50))
    base = base_url or current_settings().arxiv_url or ARXIV_URL
    params = urllib.parse.urlencode(
        {"search_query": f"all:{query}", "start": 0, "max_results": max_results}
    )
    url = f"{base}?{params}"
    return _as_tool_node(
        "search_arxiv",
        {"query": query, "max_results": max_results, "url": url},
        lambda: parse_arxiv_feed(fetch_bytes(url)[0])[:max_results],
    )


def parse_arxiv_feed(data: bytes) -> list[dict[str, Any]]:
    """The entries of an arXiv Atom feed (pure; LiteratureError if it is not one)."""
    import xml.etree.ElementTree as ET

    if b"<!ENTITY" in data[:4096]:  # no DTD tricks from a feed
        raise LiteratureError("the arXiv answer declares XML entities; refused")
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise LiteratureError(f"the arXiv answer is not XML ({exc})") from None
    if root.tag != f"{ATOM}feed":
        raise LiteratureError(f"the arXiv answer is not an Atom feed (root {root.tag!r})")
    papers = []
    for entry in root.findall(f"{ATOM}entry"):

        def text(tag: str, node: Any = entry) -> str:
            found = node.find(f"{ATOM}{tag}")
            return " ".join((found.text or "").split()) if found is not None else ""

        pdf = next(
            (
                link.get("href", "")
                for link in entry.findall(f"{ATOM}link")
                if link.get("title") == "pdf"
            ),
            "",
        )
        if pdf.startswith("http://arxiv.org/"):  # arXiv redirects these to https, and a
            pdf = "https://" + pdf[len("http://") :]  # scheme change is never followed
        papers.append(
            {
                "id": text("id").rsplit("/abs/", 1)[-1],
                "title": text("title"),
                "authors": [text("name", a) for a in entry.findall(f"{ATOM}author")],
                "year": text("published")[:4],
                "summary": text("summary")[:2000],
                "pdf": pdf,
            }
        )
    return papers


# -- web pages ---------------------------------------------------------------------------------
class _Text(HTMLParser):
    SKIP = frozenset({"script", "style", "noscript", "template", "svg"})
    BLOCK = frozenset(
        {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "section", "article"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in self.SKIP:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self._skip:
            self._skip -= 1
        elif tag == "title":
            self._in_title = False
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.parts.append(data)


def html_to_text(html: str) -> tuple[str, str]:
    """(title, readable text) of an HTML document (pure)."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return " ".join(parser.title.split()), "\n".join(line for line in lines if line)


@tool
def fetch_page(url: str) -> dict[str, Any]:
    """Fetch a web page and return its title and readable text."""

    def work() -> dict[str, Any]:
        data, kind = fetch_bytes(url)
        if kind not in ("text/html", "text/plain", "application/xhtml+xml"):
            shown = redact_secrets(url)
            raise LiteratureError(f"{shown}: {kind or 'unknown content'} is not a web page")
        body = data.decode("utf-8", errors="replace")
        title, text = html_to_text(body) if kind != "text/plain" else ("", body)
        return {
            "url": url,
            "title": title,
            "text": text[:MAX_TEXT],
            "truncated": len(text) > MAX_TEXT,
        }

    return _as_tool_node("fetch_page", {"url": url}, work)


# -- PDFs --------------------------------------------------------------------------------------
@tool
def read_pdf(source: str, max_pages: int = 50) -> dict[str, Any]:
    """Read a PDF (a URL or a local path) and return its text, page by page."""

    def work() -> dict[str, Any]:
        if _URL_SCHEME.match(source):  # http(s), or refused as not http(s) in one line
            data, _kind = fetch_bytes(source, max_bytes=MAX_PDF_BYTES)
        else:
            data = read_local_file(source, max_bytes=MAX_PDF_BYTES)
        return pdf_text(data, max_pages=max_pages, name=source)

    return _as_tool_node("read_pdf", {"source": source, "max_pages": max_pages}, work)


_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_SYSTEM_ROOTS = ("/proc", "/sys")  # files the kernel makes up: no documents, reads may fail
_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a named pipe",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def read_local_file(source: str, *, max_bytes: int) -> bytes:
    """The bytes of the regular file ``source`` (``~`` expanded), at most ``max_bytes`` of
    them; LiteratureError for a missing file, a folder, a device, a pipe, a socket, a file
    under ``/proc`` or ``/sys``, one too big, or one that cannot be read.  Nothing but a
    regular file is ever opened (and what was opened is checked again)."""
    name = http_get.shown(source)
    path = Path(source).expanduser()
    try:
        real = os.path.realpath(path)
        info = os.stat(real)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        if isinstance(exc, FileNotFoundError):
            raise LiteratureError(f"no such file: {name}") from None
        raise LiteratureError(f"cannot read {name} ({_why(exc)})") from None
    root = next((r for r in _SYSTEM_ROOTS if real == r or real.startswith(r + "/")), None)
    if root is not None:
        raise LiteratureError(f"{name} is a system file under {root}, not a document; refused")
    _check_regular(name, info.st_mode, info.st_size, max_bytes)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        with os.fdopen(fd, "rb") as handle:
            opened = os.fstat(handle.fileno())  # the file may have been swapped since
            _check_regular(name, opened.st_mode, opened.st_size, max_bytes)
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise LiteratureError(f"cannot read {name} ({_why(exc)})") from None
    if len(data) > max_bytes:
        raise LiteratureError(f"{name}: over the {max_bytes:,}-byte limit")
    return data


def _check_regular(name: str, mode: int, size: int, max_bytes: int) -> None:
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "a special file")
        raise LiteratureError(f"{name} is {kind}, not a file to read; refused")
    if size > max_bytes:
        raise LiteratureError(f"{name}: over the {max_bytes:,}-byte limit")


def _why(exc: BaseException) -> str:
    return " ".join(str(getattr(exc, "strerror", None) or exc).split())[:200]


def pdf_text(data: bytes, *, max_pages: int = 50, name: str = "the PDF") -> dict[str, Any]:
    """The text of a PDF's first ``max_pages`` pages (LiteratureError if unreadable)."""
    if not data.startswith(b"%PDF-"):
        raise LiteratureError(f"{name} is not a PDF (no %PDF- header)")
    try:
        from pypdf import PdfReader
    except ImportError:
        raise LiteratureError("reading PDFs needs pypdf: pip install 'openprogram[pdf]'") from None
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages[: max(1, max_pages)]]
        total = len(reader.pages)
    except Exception as exc:  # pypdf raises many kinds on a damaged file
        raise LiteratureError(
            f"{name} is not a readable PDF ({type(exc).__name__}: {exc})"
        ) from None
    text = "\n\n".join(pages)
    return {
        "pages": total,
        "read": len(pages),
        "text": text[:MAX_TEXT],
        "truncated": len(text) > MAX_TEXT,
    }
