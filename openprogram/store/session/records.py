"""The one point where a node becomes what is persisted and shown.

Every node write of the store (the live row, the node file at commit, the live event a
notebook view draws) takes its bytes from :func:`node_record`.  The fast path is one
``to_dict`` + ``orjson.dumps`` + a few ``bytes in bytes`` tests for the known secret values.
When the node holds something JSON cannot (a lone surrogate, a 5,000-digit int, an object)
or a secret (an API key passed as an argument, echoed in a reply, quoted in a prompt or a
traceback), the node itself is rewritten to the escaped, redacted form — so the in-memory
node every view, prompt and saved widget state reads from is what the disk has.
"""

from __future__ import annotations

from openprogram.context.nodes import Call
from openprogram.context.secrets import holds_secret, redact_shown
from openprogram.store.session.files import jsonable, strict_dumps


def node_record(call: Call) -> bytes:
    """The JSON bytes of ``call`` as persisted (rewriting ``call`` when it had to change)."""
    data = call.to_dict()
    try:
        raw = strict_dumps(data)
        changed = False
    except (TypeError, ValueError):
        data = jsonable(data)
        raw = strict_dumps(data)
        changed = True
    if holds_secret(raw):  # a known secret, a URL's password: the one masking
        data = redact_shown(data)
        raw = strict_dumps(data)
        changed = True
    if changed:
        call.name = data["name"]
        call.input = data["input"]
        call.output = data["output"]
        call.metadata = data["metadata"]
    return raw
