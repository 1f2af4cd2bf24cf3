"""Credentials recognised by their shape, for text published from a session (a methods
appendix) where the key may be one this machine never knew.

The vendor formats come from a maintained detector, ``detect-secrets``' plugins (AWS
access key ids, URL passwords, JWTs, Slack tokens and webhooks, GitHub, GitLab, OpenAI,
Stripe, PyPI, npm, SendGrid, Discord, Telegram, Twilio, Mailchimp, Square, Artifactory,
Azure storage keys): a match is masked wherever it appears, with the rest of the token it
begins (``detect-secrets``' JWT pattern stops before the signature).  Its keyword and
entropy plugins want quoted values in source code, so what prose carries is matched here:
``X-Api-Token: …``-like names with a value, an AWS secret after its name, a 32-digit hex
token, a private key block.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from typing import Any, Final

REDACTED = "***"

#: ``detect-secrets`` plugins (module.Class) whose patterns fit free text
PLUGINS: Final = (
    "artifactory.ArtifactoryDetector",
    "aws.AWSKeyDetector",
    "azure_storage_key.AzureStorageKeyDetector",
    "basic_auth.BasicAuthDetector",
    "discord.DiscordBotTokenDetector",
    "github_token.GitHubTokenDetector",
    "gitlab_token.GitLabTokenDetector",
    "jwt.JwtTokenDetector",
    "mailchimp.MailchimpDetector",
    "npm.NpmDetector",
    "openai.OpenAIDetector",
    "pypi_token.PypiTokenDetector",
    "sendgrid.SendGridDetector",
    "slack.SlackDetector",
    "square_oauth.SquareOAuthDetector",
    "stripe.StripeDetector",
    "telegram_token.TelegramBotTokenDetector",
    "twilio.TwilioKeyDetector",
)
_TOKEN_TAIL = "[A-Za-z0-9_+/=-]*"  # what may follow a match inside the same token

# a credential-like name with its value (group 1): ``X-Api-Token: v``, ``password=v`` (the
# name's start is not matched: a ``\b[\w-]*`` before the keyword rescanned long runs like
# ``a-a-a…`` from each word boundary, minutes for 40 KB)
NAMED: Final = re.compile(
    r"(?i)(?:token|secret|passw(?:or)?d|api[-_]?key|access[-_]?key|private[-_]?key)"
    r"[\"']?\s*[:=]\s*[\"']?([^\s\"',;<>]{8,})"
)
AWS_SECRET: Final = re.compile(
    r"(?i)aws[\w-]{0,20}?(?:secret|key)[\w-]{0,20}[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
)
HEX32: Final = re.compile(r"(?<![0-9A-Za-z])[0-9A-Fa-f]{32}(?![0-9A-Za-z])")
PRIVATE_KEY: Final = re.compile(
    r"-----BEGIN[A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z ]*PRIVATE KEY-----|\Z)"
)


@cache
def detectors() -> tuple[Any, ...]:
    """An instance of each of :data:`PLUGINS` (imported on first use)."""
    found = []
    for spec in PLUGINS:
        module, name = spec.rsplit(".", 1)
        found.append(getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)())
    return tuple(found)


_SCOPED_FLAGS: Final = ((re.I, "i"), (re.M, "m"), (re.S, "s"), (re.X, "x"), (re.A, "a"))
_SCOPABLE: Final = re.I | re.M | re.S | re.X | re.A
_BACK_REFERENCE: Final = re.compile(r"\\[1-9]|\(\?P=")


@cache
def any_plugin_match() -> re.Pattern[str] | None:
    """One pattern that finds something wherever a plugin's patterns do (their alternation,
    each with its own flags): text it finds nothing in needs no plugin, one regex search
    instead of a scan per plugin.  ``None`` when the patterns cannot be joined as they are
    (a flag with no scoped form, a back-reference, a plugin that scans otherwise): then
    every plugin scans."""
    joined = []
    scans_patterns = _scans_its_patterns()
    for plugin in detectors():
        if type(plugin).analyze_string not in scans_patterns:
            return None
        for pattern in plugin.denylist:
            flags = pattern.flags & ~re.UNICODE
            text = pattern.pattern
            if flags & ~_SCOPABLE or not isinstance(text, str) or _BACK_REFERENCE.search(text):
                return None
            letters = "".join(c for flag, c in _SCOPED_FLAGS if flags & flag)
            joined.append(f"(?{letters}:{text})" if letters else f"(?:{text})")
    try:
        return re.compile("|".join(joined))
    except re.error:  # a group name used twice, a global flag inside a pattern
        return None


def _scans_its_patterns() -> frozenset[Any]:
    """The ``analyze_string`` methods that yield only matches of the plugin's ``denylist``
    (the regex detectors' own, and the JWT one that filters those)."""
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.jwt import JwtTokenDetector

    return frozenset({RegexBasedDetector.analyze_string, JwtTokenDetector.analyze_string})


def _looks_secret(value: str) -> bool:
    """A named value is masked when it mixes letters and digits, or is long: ``password:
    hunter2x`` and ``X-Api-Token: abcdefghijklmnop`` are, ``max_tokens: 4096`` is not."""
    letters = any(c.isalpha() for c in value)
    return (letters and any(c.isdigit() for c in value)) or (letters and len(value) >= 16)


def found_secrets(text: str) -> set[str]:
    """The credential-shaped strings in ``text``."""
    found: set[str] = set()
    quick = any_plugin_match()
    if quick is None or quick.search(text) is not None:
        for plugin in detectors():
            for secret in plugin.analyze_string(text):
                if not isinstance(secret, str):
                    continue
                if len(secret) >= 6:
                    found.add(secret)
                else:  # a label its pattern captures (GitLab's ``glpat``): the whole match
                    found |= _whole_matches(plugin, text, secret)
    found |= {m.group(1) for m in NAMED.finditer(text) if _looks_secret(m.group(1))}
    found |= {m.group(1) for m in AWS_SECRET.finditer(text)}
    found |= {m.group(0) for m in HEX32.finditer(text)}
    return found


def _whole_matches(plugin: Any, text: str, label: str) -> set[str]:
    return {
        m.group(0)
        for pattern in plugin.denylist
        for m in pattern.finditer(text)
        if label in m.group(0) and len(m.group(0)) >= 6
    }


def redact_shapes(text: str) -> str:
    """``text`` with every credential-shaped string (and the rest of its token) masked."""
    text = PRIVATE_KEY.sub(REDACTED, text)
    found = found_secrets(text)
    if not found:
        return text
    alternatives = "|".join(re.escape(s) for s in sorted(found, key=len, reverse=True))
    return re.sub(f"(?:{alternatives}){_TOKEN_TAIL}", REDACTED, text)
