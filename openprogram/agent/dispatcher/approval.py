"""``approval_registry``: which tools need a yes before a chat turn runs them.

A host sets the rules (``approval_registry.require("delete_*")``, or a predicate of the
tool's name and arguments); when the model calls a tool a rule holds, the user is asked
through the question channel (:mod:`openprogram.agentic_programming.questions`: an
``ask_user`` node under the tool's node, answered in the cell or on the terminal).  A yes
runs the tool; ``always`` runs it and every later call of it in this process; anything
else — no, a decline, no answer in time, nobody there to ask — is :class:`ToolRefused`,
which the tool loop hands back to the model as the tool's error.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from openprogram.agentic_programming import questions
from openprogram.errors import ToolRefused, UserError

Tool = Callable[..., Any]
Predicate = Callable[[str, Mapping[str, Any]], bool]
Rule = str | Predicate

YES, NO, ALWAYS = "yes", "no", "always"
SHOWN_ARGUMENTS = 300  # characters of the arguments the question shows


class ApprovalRegistry:
    """Approval rules for tools, shared by every chat turn of the process."""

    def __init__(self) -> None:
        self._rules: list[Rule] = []
        self._allowed: set[str] = set()  # answered ``always`` (or allowed by the host)
        self._lock = threading.Lock()
        self.timeout: float | None = None  # seconds a question waits (None: as long as it takes)

    # -- the rules -----------------------------------------------------------------------------
    def require(self, *rules: Rule) -> None:
        """Ask before running a tool whose name matches one of ``rules`` (``fnmatch``
        patterns: ``"delete_*"``, ``"*"``) or for which a predicate ``(name, arguments)``
        returns True."""
        for rule in rules:
            if not (isinstance(rule, str) and rule) and not callable(rule):
                raise UserError(
                    f"an approval rule is a tool name pattern or a function, not {rule!r}"
                )
        with self._lock:
            self._rules.extend(rules)

    def allow(self, *names: str) -> None:
        """Run these tools without asking, whatever the rules say."""
        with self._lock:
            self._allowed.update(names)

    def clear(self) -> None:
        """No rules, nothing allowed: every tool runs without asking."""
        with self._lock:
            self._rules.clear()
            self._allowed.clear()

    @contextmanager
    def requiring(self, *rules: Rule) -> Iterator[ApprovalRegistry]:
        """The rules as they are plus ``rules`` for a ``with`` block (then as before)."""
        with self._lock:
            saved = (list(self._rules), set(self._allowed))
        self.require(*rules)
        try:
            yield self
        finally:
            with self._lock:
                self._rules, self._allowed = saved

    @property
    def active(self) -> bool:
        return bool(self._rules)

    def needs_approval(self, name: str, arguments: Mapping[str, Any]) -> bool:
        with self._lock:
            if name in self._allowed:
                return False
            rules = list(self._rules)
        return any(
            fnmatch.fnmatchcase(name, rule) if isinstance(rule, str) else rule(name, arguments)
            for rule in rules
        )

    # -- asking ----------------------------------------------------------------------------------
    def approve(self, name: str, arguments: Mapping[str, Any]) -> None:
        """Return when the call may run; :class:`ToolRefused` when it may not."""
        if not self.needs_approval(name, arguments):
            return
        answer = questions.ask(
            f"Run tool {name}({_shown(arguments)})?",
            choices=[YES, NO, ALWAYS],
            timeout=self.timeout,
        )
        if answer == ALWAYS:
            self.allow(name)
        elif answer != YES:
            why = "refused" if answer == NO else "no yes (declined, no answer or nobody to ask)"
            raise ToolRefused(name, why)

    def gated(self, tools: Mapping[str, Tool]) -> dict[str, Tool]:
        """``tools`` with each one asking :meth:`approve` first (the rules are read at
        call time); the same mapping's callables when no rule is set."""
        if not self.active:
            return dict(tools)
        return {name: self._gate(name, fn) for name, fn in tools.items()}

    def _gate(self, name: str, fn: Tool) -> Tool:
        @functools.wraps(fn)  # same signature and docstring: the same tool spec
        def gate(**kwargs: Any) -> Any:
            self.approve(name, kwargs)
            return fn(**kwargs)

        return gate


def _shown(arguments: Mapping[str, Any]) -> str:
    text = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in arguments.items())
    return text if len(text) <= SHOWN_ARGUMENTS else text[:SHOWN_ARGUMENTS] + "…"


approval_registry = ApprovalRegistry()
