"""Questions to the user: ``ask`` (choices, several, an own answer, a timeout, a default),
``confirm`` and ``form`` — and ``ask_user``, the plain one, which is ``ask`` too.

One mechanism: every question is an ``ask_user`` node (``awaiting`` while it waits, then
``answered`` or ``unanswered``) answered by the handler ``ask_user`` has always used (the
context's, else the process default, else the terminal; in a notebook cell the frontend's
input box).  A handler is ``(prompt, choices) -> str | None``; None means nobody can
answer, and the question ends at once.  Typing :data:`DECLINE` declines explicitly.

How a question ended is the node's ``outcome``:

* ``answered`` — the answer is the node's output (``answered``);
* ``declined`` — the user said no answer (``unanswered``; ``ask`` returns None,
  ``confirm`` False, ``form`` None);
* ``timeout`` — nobody answered within ``timeout`` s (``unanswered``; the default is
  returned, and the abandoned prompt's late answer is dropped);
* ``no_one`` — nobody can answer here (headless, no terminal): at once, the default;
* ``invalid`` — three answers that do not fit (not a choice, not a number...): the default.

A form is one node; its fields are asked one after the other through the same handler.
"""

from __future__ import annotations

import contextvars
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from openprogram.agentic_programming.function import run_in_session
from openprogram.context.nodes import ANSWERED, AWAITING, UNANSWERED, Call, make_call
from openprogram.context.outcome import finish
from openprogram.errors import UserError
from openprogram.store.vars import AskHandler, current, get_call_id, get_store

DECLINE = "/decline"
ATTEMPTS = 3  # answers that do not fit before the question gives up (the default)

OUTCOME_ANSWERED = "answered"
OUTCOME_DECLINED = "declined"
OUTCOME_TIMEOUT = "timeout"
OUTCOME_NO_ONE = "no_one"
OUTCOME_INVALID = "invalid"

YES = ("yes", "y", "true", "1", "ok")
NO = ("no", "n", "false", "0")
FIELD_TYPES: dict[str, Callable[[str], Any]] = {"str": str, "int": int, "float": float}

Parse = Callable[[str], tuple[bool, Any]]  # the typed answer -> (fits, value)


class _Unanswered:
    """How an exchange ended without an answer (an outcome name)."""

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome


@dataclass
class _Asking:
    """One exchange with the handler: the prompt, how to read the answer, the default."""

    prompt: str
    choices: list[str] | None
    parse: Parse
    default: Any = None
    retry_hint: str = ""


@dataclass
class FormField:
    """One field of a :func:`form`: asked as ``prompt`` (default: the name)."""

    name: str
    prompt: str = ""
    choices: list[str] | None = None
    default: Any = None
    type: str = "str"  # str | int | float | bool

    def record(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"name": self.name}
        shown.update({k: v for k, v in vars(self).items() if k != "name" and v not in (None, "")})
        if shown.get("type") == "str":
            del shown["type"]
        return shown


@dataclass
class _Deadline:
    at: float | None = None

    def remaining(self) -> float | None:
        return None if self.at is None else max(0.0, self.at - time.monotonic())


# -- the handler (who answers: the context's, the process default, the terminal) ----------
_default_handler: AskHandler | None = None


def terminal_handler(question: str, choices: list[str] | None) -> str | None:
    """Ask on the terminal when there is one; None when stdin is not interactive."""
    if not (sys.stdin and sys.stdin.isatty()):
        return None
    hint = f" [{'/'.join(choices)}]" if choices else ""
    try:
        return input(f"{question}{hint} ")
    except EOFError:
        return None


def set_default_ask_user_handler(handler: AskHandler | None) -> None:
    global _default_handler
    _default_handler = handler


def current_ask_user_handler() -> AskHandler:
    """The handler a question asked here and now would go to (context, default, terminal)."""
    return current().ask or _default_handler or terminal_handler


current_handler = current_ask_user_handler


def _call(handler: AskHandler, asking: _Asking, deadline: _Deadline) -> str | _Unanswered | None:
    """The handler's answer; with a deadline it runs on a helper thread (in a copy of this
    context) and a late answer is dropped."""
    remaining = deadline.remaining()
    if remaining is None:
        return handler(asking.prompt, asking.choices)
    box: list[tuple[bool, Any]] = []
    done = threading.Event()

    def run() -> None:
        try:
            box.append((True, handler(asking.prompt, asking.choices)))
        except BaseException as exc:
            box.append((False, exc))
        finally:
            done.set()

    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(run,), name="openprogram-question")
    thread.daemon = True
    thread.start()
    if not done.wait(remaining):
        return _Unanswered(OUTCOME_TIMEOUT)
    ok, value = box[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _exchange(handler: AskHandler, asking: _Asking, deadline: _Deadline) -> tuple[str, Any]:
    """Ask until an answer fits (at most :data:`ATTEMPTS` times): ``(outcome, value)``."""
    prompt = asking.prompt
    for _attempt in range(ATTEMPTS):
        got = _call(handler, _Asking(prompt, asking.choices, asking.parse), deadline)
        if isinstance(got, _Unanswered):
            return got.outcome, asking.default
        if got is None:
            return OUTCOME_NO_ONE, asking.default
        text = str(got).strip()
        if text.lower() == DECLINE:
            return OUTCOME_DECLINED, None
        if not text and asking.default is not None:
            return OUTCOME_ANSWERED, asking.default
        fits, value = asking.parse(text)
        if fits:
            return OUTCOME_ANSWERED, value
        prompt = f"{asking.prompt} — {asking.retry_hint or 'that does not fit'}; again:"
    return OUTCOME_INVALID, asking.default


# -- one recorded question -----------------------------------------------------------------------
def _recorded(name: str, shown: dict[str, Any], body: Callable[[Call], tuple[str, Any]]) -> Any:
    """An ``ask_user`` node around ``body`` (which returns ``(outcome, value)``)."""
    writer = get_store()
    assert writer is not None
    node = make_call("ask_user", name, input=shown, caller=get_call_id(), status=AWAITING)
    writer.append(node)  # never turn-level: a question does not move HEAD
    try:
        outcome, value = body(node)
    except BaseException as exc:
        writer.update(finish(node, exc=exc))
        raise
    status = ANSWERED if outcome == OUTCOME_ANSWERED else UNANSWERED
    finish(node, status, output=value)
    node.metadata["outcome"] = outcome
    writer.update(node)
    return value


def _shown(question: str, choices: list[str] | None, **extra: Any) -> dict[str, Any]:
    """The node's input: the question and choices, and what else was not left at default."""
    shown: dict[str, Any] = {"question": question, "choices": choices}
    shown.update({k: v for k, v in extra.items() if v not in (None, False)})
    return shown


def _hinted(question: str, *parts: str) -> str:
    said = [p for p in parts if p]
    return f"{question} ({'; '.join(said)})" if said else question


def _decline_hint() -> str:
    return f"{DECLINE} declines"


def _default_hint(default: Any) -> str:
    return "" if default is None else f"Enter: {_as_answer(default)}"


def _as_answer(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


# -- reading answers -----------------------------------------------------------------------------
def _pick(text: str, choices: Sequence[str]) -> str | None:
    """The choice ``text`` names: itself (any case) or its number (1-based)."""
    lowered = {c.lower(): c for c in choices}
    if text.lower() in lowered:
        return lowered[text.lower()]
    if text.isdigit() and 1 <= int(text) <= len(choices):
        return choices[int(text) - 1]
    return None


def _choice_parser(choices: list[str] | None, multi: bool, allow_custom: bool) -> Parse:
    def parse(text: str) -> tuple[bool, Any]:
        if not choices:
            return True, [p.strip() for p in text.split(",") if p.strip()] if multi else text
        parts = [p.strip() for p in text.split(",") if p.strip()] if multi else [text]
        picked = [_pick(p, choices) or (p if allow_custom else None) for p in parts]
        if not parts or any(p is None for p in picked):
            return False, None
        return True, picked if multi else picked[0]

    return parse


def _yes_no(text: str) -> tuple[bool, Any]:
    word = text.lower()
    if word in YES:
        return True, True
    if word in NO:
        return True, False
    return False, None


def _typed(kind: str, choices: list[str] | None) -> Parse:
    if kind == "bool":
        return _yes_no
    if choices:
        return _choice_parser(choices, False, False)
    convert = FIELD_TYPES[kind]

    def parse(text: str) -> tuple[bool, Any]:
        try:
            return True, convert(text)
        except ValueError:
            return False, None

    return parse


def _checked_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
        raise UserError(f"timeout= is a number of seconds >= 0, got {timeout!r}")
    return float(timeout)


def _checked_choices(choices: Sequence[str] | None) -> list[str] | None:
    if choices is None:
        return None
    if isinstance(choices, str) or not all(isinstance(c, str) for c in choices):
        raise UserError(f"choices= is a list of strings, got {choices!r}")
    return list(choices) or None


def _deadline(timeout: float | None) -> _Deadline:
    seconds = _checked_timeout(timeout)
    return _Deadline(None if seconds is None else time.monotonic() + seconds)


# -- the questions -------------------------------------------------------------------------------
def ask(
    question: str,
    *,
    choices: Sequence[str] | None = None,
    multi: bool = False,
    allow_custom: bool = False,
    timeout: float | None = None,
    default: Any = None,
) -> Any:
    """Ask ``question``; the answer (a list with ``multi``), else ``default`` (no answer in
    ``timeout`` s, nobody to answer, answers that never fit), or None when declined.

    ``choices``: the answer must be one of them (or its number) unless ``allow_custom``;
    ``multi``: several, comma-separated."""
    picks = _checked_choices(choices)
    hints = (
        "several: comma-separated" if multi else "",
        "or your own" if allow_custom and picks else "",
        _default_hint(default),
        _decline_hint(),
    )
    asking = _Asking(
        _hinted(question, *hints),
        picks,
        _choice_parser(picks, multi, allow_custom),
        default,
        f"answer with one of {', '.join(picks)}" if picks else "",
    )
    shown = _shown(
        question, picks, multi=multi, allow_custom=allow_custom, timeout=timeout, default=default
    )
    return _asked("ask", shown, asking, _deadline(timeout))


def ask_plain(question: str, choices: list[str] | None) -> str | None:
    """``ask_user``: the question as it is, any answer taken as it is (no hints, no
    retries), None when nobody answers or the user declines."""
    asking = _Asking(question, choices, lambda text: (True, text))
    value: str | None = _asked("ask_user", _shown(question, choices), asking, _Deadline())
    return value


def _asked(name: str, shown: dict[str, Any], asking: _Asking, deadline: _Deadline) -> Any:
    return run_in_session(
        _recorded, name, shown, lambda _node: _exchange(current_handler(), asking, deadline)
    )


def confirm(question: str, *, default: bool | None = None, timeout: float | None = None) -> Any:
    """A yes/no question: True or False (declined: False), else ``default`` (no answer in
    ``timeout`` s, nobody to answer)."""
    deadline = _deadline(timeout)
    asking = _Asking(
        _hinted(question, _default_hint(default), _decline_hint()),
        ["yes", "no"],
        _yes_no,
        default,
        "answer yes or no",
    )
    shown = _shown(question, ["yes", "no"], timeout=timeout, default=default)

    def body(_node: Call) -> tuple[str, Any]:
        outcome, value = _exchange(current_handler(), asking, deadline)
        return outcome, False if outcome == OUTCOME_DECLINED else value

    return run_in_session(_recorded, "confirm", shown, body)


def form_fields(fields: Sequence[str | Mapping[str, Any] | FormField]) -> list[FormField]:
    """``fields`` as :class:`FormField` (a name, a mapping of its fields, or one)."""
    if isinstance(fields, str | bytes | Mapping) or not fields:
        raise UserError("form() takes a list of fields: names or {'name': ..., ...} mappings")
    out: list[FormField] = []
    for item in fields:
        if isinstance(item, FormField):
            spec = item
        elif isinstance(item, str):
            spec = FormField(item)
        elif isinstance(item, Mapping):
            unknown = sorted(set(item) - set(FormField.__dataclass_fields__))
            if unknown or not isinstance(item.get("name"), str):
                raise UserError(
                    f"a form field is {{'name': str, 'prompt', 'choices', 'default', "
                    f"'type'}}, got {dict(item)!r}"
                )
            spec = FormField(**dict(item))
        else:
            raise UserError(f"a form field is a name or a mapping, got {item!r}")
        if spec.type not in (*FIELD_TYPES, "bool"):
            raise UserError(f"field {spec.name!r}: type is one of str, int, float, bool")
        spec.choices = _checked_choices(spec.choices)
        out.append(spec)
    names = [f.name for f in out]
    if len(set(names)) != len(names):
        raise UserError(f"two form fields have the same name: {names}")
    return out


def form(
    fields: Sequence[str | Mapping[str, Any] | FormField],
    *,
    title: str = "",
    timeout: float | None = None,
) -> dict[str, Any] | None:
    """Ask each field in turn; the answers by name.  Declined (any field): None.  No
    answer in ``timeout`` s (for the whole form) or nobody to answer: the defaults for
    the fields not answered, or None when one of those has no default."""
    specs = form_fields(fields)
    deadline = _deadline(timeout)
    shown: dict[str, Any] = {"question": title or "form", "fields": [f.record() for f in specs]}
    if timeout is not None:
        shown["timeout"] = timeout

    def body(node: Call) -> tuple[str, Any]:
        handler = current_handler()
        answers: dict[str, Any] = {}
        for spec in specs:
            label = spec.prompt or spec.name
            asking = _Asking(
                _hinted(f"{title} — {label}" if title else label, _default_hint(spec.default)),
                spec.choices,
                _typed(spec.type, spec.choices),
                spec.default,
                f"a {spec.type}" if not spec.choices else f"one of {', '.join(spec.choices)}",
            )
            outcome, value = _exchange(handler, asking, deadline)
            if outcome == OUTCOME_DECLINED:
                return outcome, None
            if outcome != OUTCOME_ANSWERED:
                node.metadata["answered"] = sorted(answers)
                rest = [f for f in specs if f.name not in answers]
                if any(f.default is None for f in rest):
                    return outcome, None
                return outcome, {**answers, **{f.name: f.default for f in rest}}
            answers[spec.name] = value
        return OUTCOME_ANSWERED, answers

    result: dict[str, Any] | None = run_in_session(_recorded, "form", shown, body)
    return result
