"""Credential shapes in published text (:mod:`openprogram.context.shapes`) on large text: a
methods appendix of a session holding a long run like ``a-a-a…`` must still be written.
The named-credential pattern used to rescan such a run from each word boundary (40 KB took
minutes)."""

from __future__ import annotations

from typing import Any

import pytest

from openprogram.context import shapes
from openprogram.context.secrets import redact_key_like


@pytest.mark.timeout(60)  # the old pattern: minutes; the linear one: milliseconds
def test_a_long_hyphenated_run_is_masked_without_stalling() -> None:
    text = "a-" * 40_000 + " MY_DB_PASSWORD=hunter2hunter2 X-Api-Token: abcdefgh12345678"

    shown = redact_key_like(text)

    assert shown.startswith("a-a-a-")
    assert shown.endswith(" MY_DB_PASSWORD=*** X-Api-Token: ***")


# -- one search before the plugins: what no plugin pattern matches is not scanned 18 times ----
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwi"
    "aWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
# a match for each plugin of shapes.PLUGINS (in its order), then text that only resembles one
SHAPED = [
    "token AKCp5abcdefghijk here",
    "AKIAIOSFODNN7EXAMPLE and aws_secret_key = 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'",
    "DefaultEndpointsProtocol=https;AccountKey=" + "aB3+" * 22 + ";",
    "clone https://ada:pa55word@git.example.org/repo.git",
    "bot MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs",
    "push with ghp_" + "A1b2" * 9,
    "glpat-" + "x1Y2z3" * 4,
    f"Authorization: Bearer {JWT}",
    "0123456789abcdef0123456789abcdef-us12",
    "//registry.npmjs.org/:_authToken=npm_abcdefABCDEF0123",
    "sk-" + "a1" * 10 + "T3BlbkFJ" + "b2" * 10,
    "pypi-AgEIcHlwaS5vcmc" + "Ab1-" * 18,
    "SG." + "a" * 22 + "." + "b" * 43,
    "xoxb-123456-789012-abcdef and https://hooks.slack.com/services/T0AB/B0CD/XyZ123abc",
    "sq0csp-" + "Ab1" * 14 + "x",
    "sk_live_" + "aB3" * 8,
    "123456789:" + "AbC-_" * 7,
    "AC" + "a1" * 16,
]
ORDINARY = [
    "level_1234",
    "n_00ab12cd34",
    "Level 3 of the descent.",
    "max_tokens: 4096, temperature=0.2, see https://example.org/a:b@",
    "a-" * 500,
    "",
]


def plugin_hits(text: str) -> set[str]:
    """What every plugin of :data:`shapes.PLUGINS` finds in ``text``, each asked in turn."""
    return {
        s
        for plugin in shapes.detectors()
        for s in plugin.analyze_string(text)
        if isinstance(s, str) and len(s) >= 6
    }


def test_every_plugin_has_a_sample_and_the_samples_are_masked() -> None:
    # (a GitLab token was kept whole: its pattern captures the label ``glpat`` only)
    for spec, text in zip(shapes.PLUGINS, SHAPED, strict=True):
        plugin = shapes.detectors()[shapes.PLUGINS.index(spec)]
        assert list(plugin.analyze_string(text)), spec  # the sample is one it knows
        assert plugin_hits(text) <= shapes.found_secrets(text), spec
        assert redact_key_like(text) != text, spec


@pytest.mark.parametrize("text", SHAPED + ORDINARY)
def test_the_joined_search_finds_what_the_plugins_find(text: str) -> None:
    joined = shapes.any_plugin_match()
    assert joined is not None  # detect-secrets' patterns join: the quick path is on
    assert bool(plugin_hits(text)) <= (joined.search(text) is not None)
    assert plugin_hits(text) <= shapes.found_secrets(text)


def test_text_with_no_credential_shape_is_not_scanned_by_each_plugin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scans: list[str] = []
    for plugin in shapes.detectors():
        scan = plugin.analyze_string

        def counted(text: str, scan: Any = scan) -> Any:
            scans.append(text)
            return scan(text)

        monkeypatch.setattr(plugin, "analyze_string", counted)
    for text in ORDINARY:
        assert redact_key_like(text) == text
    assert scans == []  # one search of the joined patterns said no plugin can match
    assert redact_key_like(SHAPED[4]) == "bot ***"
    assert len(scans) == len(shapes.PLUGINS)  # a match: every plugin scans, as before
