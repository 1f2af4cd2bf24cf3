"""The kernel's masking packer (:mod:`openprogram_magics.outputs`) on a large output that
holds a URL: masking it must not stall the kernel's messages.  The URL-password pattern
used to rescan a long run like ``a.b.c.d…`` from each of its word boundaries (quadratic:
an 800 KB output took about ten minutes, every message it was in)."""

from __future__ import annotations

import json

import pytest
from jupyter_client.session import Session

from openprogram_magics.outputs import masking_packer


@pytest.mark.timeout(60)  # the old pattern: ~10 minutes; the linear one: well under a second
def test_a_large_output_holding_a_url_is_packed_and_its_password_masked() -> None:
    session = Session()
    pack = masking_packer(session.pack)
    text = "a." * 400_000 + " fetched from https://ada:hunter2hunter2@db.example/x"
    content = {"name": "stdout", "text": text}

    packed = json.loads(pack(content))

    assert packed["text"].startswith("a.a.a.")
    assert packed["text"].endswith("https://ada:***@db.example/x")
