"""Text from a session made inert where it is shown: on a terminal, and as JSON in HTML.

A session may come from anywhere (a pulled branch, an imported bundle, a model's reply),
so its commit messages, titles, sources, node names and previews are data, never
instructions to the terminal or the browser that shows them.

- :func:`terminal_text` is the one place text from a session is made printable: control
  characters (C0, DEL, C1: the start of every terminal escape, ``\\r``, the bell), bidi
  embeddings, overrides and isolates (they reorder what is shown, "Trojan Source"), line
  and paragraph separators and lone surrogates (unprintable: they would crash the print)
  are shown escaped (``\\x1b``, ``\\u202e``), ordinary unicode as it is.  A one-line field
  shows its newlines and tabs escaped too; ``keep_newlines=True`` keeps them for text
  meant to span lines.
- :func:`json_for_html` is the one place JSON goes into an HTML page: ``<``, ``>``, ``&``,
  U+2028, U+2029 and lone surrogates are written as ``\\u`` escapes, so no text in the
  data can end the ``<script>`` element it sits in (``</script>``), switch the HTML
  tokenizer into a script-comment state (``<!--``, ``<script>``) or fail to encode, and
  ``JSON.parse`` of the element's text gives back exactly the data.

Pure logic: no I/O, no imports beyond the standard library.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# what reorders shown text: ALM, LRM, RLM, the embeddings/overrides and the isolates
_BIDI: Final = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))


def _escape(code: int) -> str:
    char = chr(code)
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _table(keep: str) -> dict[int, str]:
    codes = [*range(0x20), 0x7F, *range(0x80, 0xA0), *_BIDI, 0x2028, 0x2029]
    codes += range(0xD800, 0xE000)  # lone surrogates (from JSON "\ud800" or a bad decode)
    return {code: _escape(code) for code in codes if chr(code) not in keep}


_ONE_LINE: Final = _table(keep="")
_LINES: Final = _table(keep="\n\t")


def terminal_text(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` (``str()`` of anything) safe to print: nothing in it moves the cursor,
    changes the title or colours, rings, clears, reorders or breaks the line (unless
    ``keep_newlines``: then ``\\n`` and ``\\t`` stay); every such character is shown as
    its escape, e.g. ``ESC]0;x BEL`` as ``\\x1b]0;x\\x07``."""
    value = text if isinstance(text, str) else str(text)
    if value.isprintable():  # the common case: nothing to escape (fast)
        return value
    return value.translate(_LINES if keep_newlines else _ONE_LINE)


_HTML_UNSAFE: Final = re.compile("[<>&\u2028\u2029\ud800-\udfff]")


def json_for_html(value: Any) -> str:
    """``value`` as compact JSON text to put inside an HTML element (a ``<script
    type="application/json">``): the characters HTML or JavaScript read specially are
    ``\\u`` escapes (they occur only inside JSON strings, where the escape means the same)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return _HTML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
