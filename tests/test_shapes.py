"""Credential shapes in published text (:mod:`openprogram.context.shapes`) on large text: a
methods appendix of a session holding a long run like ``a-a-a…`` must still be written.
The named-credential pattern used to rescan such a run from each word boundary (40 KB took
minutes)."""

from __future__ import annotations

import pytest

from openprogram.context.secrets import redact_key_like


@pytest.mark.timeout(60)  # the old pattern: minutes; the linear one: milliseconds
def test_a_long_hyphenated_run_is_masked_without_stalling() -> None:
    text = "a-" * 40_000 + " MY_DB_PASSWORD=hunter2hunter2 X-Api-Token: abcdefgh12345678"

    shown = redact_key_like(text)

    assert shown.startswith("a-a-a-")
    assert shown.endswith(" MY_DB_PASSWORD=*** X-Api-Token: ***")
