"""Exceptions, in three families (after pydantic-ai's boundaries).

* :class:`UserError` — a mistake the developer or user can fix; the message says how.
* :class:`SessionError` and subclasses — something wrong with data on disk; names the file.
* Run errors (:class:`ChoiceError`, :class:`ResponseFormatError`, provider errors in
  :mod:`openprogram.agentic_programming.provider`) — an LLM call that could not produce a
  valid answer.
"""

from __future__ import annotations


class OpenProgramError(Exception):
    """Base class of every error openprogram raises on purpose."""


class UserError(OpenProgramError):
    """A usage or configuration mistake; the message says what to do."""


class InvalidSessionId(UserError, ValueError):
    """A session id that is not a short safe name (path traversal, separators, too long...)."""


class NoProviderConfigured(UserError):
    """``runtime.exec`` was called with no LLM provider configured."""

    def __init__(self, detail: str = "") -> None:
        message = (
            "No LLM provider configured: set OPENAI_API_KEY (or OPENAI_BASE_URL for Ollama, "
            "vLLM, LM Studio) or ANTHROPIC_API_KEY, or choose one explicitly with "
            "OPENPROGRAM_PROVIDER=test|openai|anthropic (in a notebook: "
            "`%openprogram provider test`)."
        )
        super().__init__(f"{message} {detail}".strip())


class SessionError(OpenProgramError):
    """A session on disk is missing, locked or damaged."""


class SessionNotFound(SessionError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "session not found"


class CorruptedFile(SessionError):
    """A node file or ``meta.json`` that cannot be parsed; ``path`` names it."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"corrupted session file {path}: {reason}")


class ChoiceError(OpenProgramError):
    """The model never picked one of the allowed ``choices`` within the retry bound."""

    def __init__(self, choices: list[str], answers: list[str]) -> None:
        self.choices = choices
        self.answers = answers
        shown = ", ".join(repr(a[:60]) for a in answers)
        super().__init__(
            f"the model did not pick one of {choices} after {len(answers)} attempts "
            f"(answers: {shown})"
        )


class ResponseFormatError(OpenProgramError):
    """The model's reply never matched ``response_format`` within the retry bound."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            f"the model's reply did not match the response format after {len(problems)} "
            f"attempts; last problem: {problems[-1] if problems else '?'}"
        )
