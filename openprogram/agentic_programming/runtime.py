"""The Runtime: ``runtime.exec(...)`` is one LLM call, recorded as one ``llm`` node.

The prompt is rendered from the session DAG: the current frame's docstring once, earlier
turns (as many as the context policy allows, :mod:`openprogram.context.policy`), earlier
steps of this frame, then ``content``.  The ``llm`` node records the frame's own messages
and which earlier turns it was given, not their text again.  ``choices=`` and
``response_format=`` are code gates: a reply that fails them is sent back with feedback a
bounded number of times (each attempt is its own node), then a clear error is raised.
The first request already names the allowed choices, and a reply counts only when it *is*
one (:func:`~openprogram.agentic_programming.validate.pick_choice`).  Transient provider
errors are retried ``max_retries`` times, with jittered exponential backoff and the server's
``Retry-After`` honoured (:mod:`~openprogram.agentic_programming.retrying`); the ``llm``
node lists each failed attempt (``retries``) and the wait after it (``retry_waits_s``).

``exec`` returns a :class:`~openprogram.agentic_programming.provider.Reply`: the reply text
(a ``str``) carrying the tool calls with their exact arguments, usage and finish reason.
The ``llm`` node keeps a redacted copy (:func:`~openprogram.context.nodes.sanitize`) for
people; nothing reads it back to act on it.  With ``tools=`` functions, ``exec`` runs the
tool loop (:mod:`openprogram.agentic_programming.tool_loop`): one ``llm`` node per model
call, the tools it called as ``tool`` nodes under it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from openprogram.agentic_programming import questions, tool_loop, validate
from openprogram.agentic_programming.echo import echo_for
from openprogram.agentic_programming.function import (
    get_call_id,
    get_current_runtime,
    run_in_session,
)
from openprogram.agentic_programming.prompt import Prompt, build_prompt
from openprogram.agentic_programming.provider import (
    DeltaCallback,
    LLMRequest,
    LLMResponse,
    Message,
    Provider,
    Reply,
    add_usage,
    is_context_overflow,
    overflow_room,
)
from openprogram.agentic_programming.ratelimit import checked_rate, wait_turn
from openprogram.agentic_programming.request_fields import request_settings
from openprogram.agentic_programming.retrying import pause, with_retries
from openprogram.agentic_programming.stopping import check_stop, killable
from openprogram.context.nodes import ERROR, Call, make_call, sanitize
from openprogram.context.outcome import error_text, finish
from openprogram.context.policy import ContextPolicy, estimate_tokens, history_share, shrunk
from openprogram.errors import ChoiceError, NoProviderConfigured, ResponseFormatError
from openprogram.store.vars import default_runtime, get_store
from openprogram.usage.budget import UNCAPPED_ROOM
from openprogram.usage.prices import price_call

if TYPE_CHECKING:
    from openprogram.agentic_programming.mcp.registry import McpServers
    from openprogram.usage.budget import Budget


class _Gates(NamedTuple):
    choices: list[str] | None
    response_format: Any


class _Streaming(NamedTuple):
    stream: bool
    on_delta: DeltaCallback | None


class _Loop(NamedTuple):
    tool_choice: str | None
    max_iterations: int | None
    on_event: tool_loop.EventCallback | None


_MCP_REGISTRY = "openprogram.agentic_programming.mcp.registry"


def _mcp_servers(mcp: Any) -> McpServers:
    """``mcp=``: an :class:`McpServers`, or server specs (a list) for a set of its own."""
    from openprogram.agentic_programming.mcp.registry import McpServers

    if isinstance(mcp, McpServers):
        return mcp
    if isinstance(mcp, str | bytes) or not hasattr(mcp, "__iter__"):
        mcp = [mcp]
    return McpServers(mcp)


class Runtime:
    """Binds a provider (or none) to retry and rendering settings."""

    def __init__(
        self,
        provider: Provider | None = None,
        *,
        model: str | None = None,
        max_retries: int = 3,
        backoff: float = 0.5,
        gate_attempts: int = 3,
        context: ContextPolicy | None = None,
        timeout: float | None = None,
        budget: Budget | None = None,
        requests_per_minute: float | None = None,
        sleep: Callable[[float], None] | None = None,
        mcp: Any = None,
    ) -> None:
        self.provider = provider
        self.model = model or (provider.model if provider is not None else "")
        self.max_retries = max_retries
        self.backoff = backoff
        self.gate_attempts = gate_attempts
        self.context = context  # what earlier turns every exec sees (None: the defaults)
        self.timeout = timeout
        self.budget = budget  # checked before every call (openprogram.usage.Budget)
        # requests to this provider, per minute, from this process (None: as fast as asked)
        self.requests_per_minute = checked_rate(requests_per_minute)
        # how the waits between retries are waited (tests inject one: no clock read)
        self.sleep = sleep or pause
        # MCP servers of its own (``mcp=[specs]``), else the process's (``mcp_servers``)
        self._mcp: McpServers | None = None if mcp is None else _mcp_servers(mcp)

    @property
    def mcp(self) -> McpServers:
        """This runtime's MCP servers: its own (``create_runtime(mcp=[...])``), else the
        process's (``%openprogram mcp add``).  Each starts at its first use."""
        from openprogram.agentic_programming.mcp.registry import mcp_servers

        return self._mcp if self._mcp is not None else mcp_servers

    def mcp_tools(self, *, strict: bool = True) -> dict[str, Any]:
        """The tools of :attr:`mcp`'s servers by name, for ``exec(tools=...)`` (chat turns
        and ``%openprogram call`` add them themselves).  Under a replay no server starts:
        the tools the recording called answer from it.  A server that cannot start raises
        :class:`~openprogram.errors.McpServerError` (not ``strict``: it is left out)."""
        if self._mcp is None and _MCP_REGISTRY not in sys.modules:
            return {}  # nothing imported it: the process has no servers
        from openprogram.agentic_programming.mcp.registry import tools_of

        return dict(tools_of(self, strict=strict))

    @property
    def configured(self) -> bool:
        return self.provider is not None

    def __repr__(self) -> str:
        name = self.provider.name if self.provider is not None else "none"
        return f"Runtime(provider={name!r}, model={self.model!r})"

    # -- public API ----------------------------------------------------------------------
    def exec(
        self,
        content: Any,
        *,
        choices: list[str] | None = None,
        response_format: Any = None,
        tools: Any = None,
        tool_choice: str | None = None,
        max_iterations: int | None = None,
        on_tool_event: tool_loop.EventCallback | None = None,
        stream: bool = False,
        on_delta: DeltaCallback | None = None,
        context: ContextPolicy | None = None,
        **options: Any,
    ) -> Any:
        """One LLM call in the current frame; returns a :class:`Reply` — the reply text as a
        ``str`` that also carries ``tool_calls`` (exact arguments), ``usage``,
        ``finish_reason`` and ``model`` — or the pick (``choices``), or the parsed value
        (``response_format``).  ``context`` narrows what earlier turns this call sees.

        ``tools``: functions (plain or agentic; a list, or a mapping name -> function) run
        the tool loop here: the tools the model calls run as ``tool`` nodes under its ``llm``
        node and their results go back, until it answers or ``max_iterations`` (default 8)
        model calls were made (:mod:`openprogram.agentic_programming.tool_loop`).  JSON
        spec dicts are only sent: the caller runs the calls in ``reply.tool_calls``.
        ``tool_choice``: ``auto``, ``none``, ``required`` or a tool's name (first call only).
        """
        __tracebackhide__ = True
        return run_in_session(
            self._exec,
            content,
            _Gates(choices, response_format),
            tools,
            _Streaming(stream, on_delta),
            context,
            options,
            _Loop(tool_choice, max_iterations, on_tool_event),
        )

    async def aexec(self, content: Any, **kwargs: Any) -> Any:
        """``exec`` for async code: runs on a worker thread with the current context."""
        import asyncio  # not at import: asyncio costs ~10 ms and most callers are sync

        return await asyncio.to_thread(self.exec, content, **kwargs)

    # -- questions to the user (openprogram.agentic_programming.questions) ----------------
    def ask(
        self,
        question: str,
        *,
        choices: list[str] | None = None,
        multi: bool = False,
        allow_custom: bool = False,
        timeout: float | None = None,
        default: Any = None,
    ) -> Any:
        """Ask the user (an ``ask_user`` node): the answer, else ``default`` (no answer in
        ``timeout`` s, nobody to answer), None when declined.  See :func:`questions.ask`."""
        return questions.ask(
            question,
            choices=choices,
            multi=multi,
            allow_custom=allow_custom,
            timeout=timeout,
            default=default,
        )

    def confirm(
        self, question: str, *, default: bool | None = None, timeout: float | None = None
    ) -> Any:
        """A yes/no question: True/False (declined: False), else ``default``."""
        return questions.confirm(question, default=default, timeout=timeout)

    def form(
        self, fields: list[Any], *, title: str = "", timeout: float | None = None
    ) -> dict[str, Any] | None:
        """Several fields asked in turn (one node): the answers by name; None declined."""
        return questions.form(fields, title=title, timeout=timeout)

    def render_prompt(self, content: Any, *, context: ContextPolicy | None = None) -> list[Message]:
        """The messages an ``exec(content)`` made here and now would send (no LLM call):
        the current frame's docstring once, earlier turns, earlier steps, then ``content``."""
        return run_in_session(lambda: self._render(content, context).messages)

    # -- internals -----------------------------------------------------------------------
    def _render(self, content: Any, context: ContextPolicy | None = None) -> Prompt:
        writer = get_store()
        assert writer is not None
        return build_prompt(writer.session, get_call_id(), content, context, self.context)

    def _exec(
        self,
        content: Any,
        gates: _Gates,
        tools: Any,
        streaming: _Streaming,
        context: ContextPolicy | None,
        options: dict[str, Any],
        loop: _Loop,
    ) -> Any:
        if self.provider is None:
            raise NoProviderConfigured()
        runnable = tool_loop.runnable_tools(tools)

        def ask(
            prompt: Any, specs: list[dict[str, Any]] | None, choice: str | None, iteration: int
        ) -> tuple[Reply, Any]:
            return self._ask(prompt, gates, specs, choice, iteration, streaming, context, options)

        if runnable is None:
            if tools:
                names = [str(t.get("name")) for t in tools]
                tool_loop.checked_choice(loop.tool_choice, names)
            return ask(content, tools or None, loop.tool_choice, 1)[1]
        _, value = tool_loop.run_tool_loop(
            ask,
            content,
            runnable,
            tool_choice=loop.tool_choice,
            max_iterations=loop.max_iterations,
            on_event=loop.on_event,
        )
        return value

    def _ask(
        self,
        content: Any,
        gates: _Gates,
        tools: list[dict[str, Any]] | None,
        tool_choice: str | None,
        iteration: int,
        streaming: _Streaming,
        context: ContextPolicy | None,
        options: dict[str, Any],
    ) -> tuple[Reply, Any]:
        """One model call, gated: a reply that fails ``choices``/``response_format`` is
        sent back with feedback (each attempt its own node).  A reply that calls an offered
        tool is not gated (it is not the answer yet).  Returns the reply and its value."""
        assert self.provider is not None
        choices, response_format = gates.choices, gates.response_format
        on_delta = streaming.on_delta
        writer = get_store()
        assert writer is not None
        frame_id = get_call_id()
        echo = None if choices or response_format is not None else echo_for(frame_id)
        if echo is not None and on_delta is None:
            on_delta = echo  # a plain exec in a cell's (or chat's) own frame streams there
        prompt, own, base = self._prompt(content, context, choices)
        schema = validate.schema_of(response_format) if response_format is not None else None
        extra: list[Message] = []
        answers: list[str] = []
        problems: list[str] = []
        usage = None
        attempt, overflowed = 0, False
        while attempt < self.gate_attempts:
            attempt += 1
            request = LLMRequest(
                messages=base + extra,
                model=self.model,
                tools=tools,
                response_format=schema,
                stream=streaming.stream or on_delta is not None,
                timeout=self.timeout,
                extra={"choices": choices, **options} if choices else dict(options),
                tool_choice=tool_choice if tools else None,
                iteration=iteration,
                history=(prompt.record["at"], prompt.record["at"] + len(prompt.history)),
            )
            check_stop()  # a background run asked to stop: before the next call, not during
            hold = None  # what this call holds of the budget while it is in flight
            if self.budget is not None:  # raises, with an error node, before anything is sent
                vendor = getattr(self.provider, "vendor_endpoint", True)
                room, hold = self.budget.admit(
                    writer, request, self.provider.name, frame_id, vendor_endpoint=vendor
                )
                if room is not None and (request.max_tokens or room) >= room:
                    request.max_tokens = room if room < UNCAPPED_ROOM else request.max_tokens
            try:
                node = make_call(
                    "llm",
                    self.provider.name,
                    input={"content": sanitize(content), "choices": choices, "attempt": attempt},
                    caller=frame_id,
                    messages=own + extra,  # the history is named in context, not copied
                    context={**prompt.record, "prompt_tokens": estimate_tokens(request.messages)},
                    model=self.model,
                    request=request_settings(request),  # what replay matches besides the messages
                )
                if iteration > 1:
                    node.metadata["iteration"] = iteration
                writer.append(node, turn_level=frame_id is None)
                response = self._call(node, request, on_delta)
            except Exception as exc:
                if overflowed or not _may_shrink(exc, prompt.record, extra):
                    raise
                # the prompt did not fit the model's window: once more with less history
                # and, of the re-asks, only the newest reply and what was wrong with it (this
                # node stays, an error saying so, and is no step of the frame the retry
                # sees; the retry is not a gate attempt)
                overflowed = True
                node.metadata["rejected"] = True
                writer.update(node)
                narrower = _narrower(exc, context, prompt.record, request.messages)
                if narrower is not None:
                    context = narrower
                    prompt, own, base = self._prompt(content, context, choices)
                extra, attempt = extra[-2:], attempt - 1
                continue
            finally:
                if self.budget is not None:
                    self.budget.release(hold)  # after _call recorded what it used
                if echo is not None:
                    echo.end()
            usage = add_usage(usage, response.usage)
            reply = Reply(
                response.text,
                tool_calls=response.tool_calls,
                usage=usage,
                finish_reason=response.finish_reason,
                model=response.model or self.model,
                node_id=node.id,
                iterations=iteration,
            )
            if tools and response.tool_calls:
                return reply, reply  # the model is calling a tool: not its answer yet
            text = response.text
            problem: str | None = None
            value: Any = reply
            if choices:
                pick = validate.pick_choice(text, choices)
                if pick is None:
                    problem = validate.choice_feedback(text, choices)
                value = pick
            elif schema is not None:
                try:
                    value = validate.parse_structured(text, response_format)
                except ValueError as exc:
                    problem = validate.format_feedback(str(exc), schema)
                    problems.append(str(exc))
            if problem is None:
                return reply, value
            answers.append(text)
            finish(node, ERROR, error=problem).metadata["rejected"] = True
            writer.update(node)
            extra += [{"role": "assistant", "content": text}, {"role": "user", "content": problem}]
        if choices:
            raise ChoiceError(list(choices), answers)
        raise ResponseFormatError(problems)

    def _prompt(
        self, content: Any, context: ContextPolicy | None, choices: list[str] | None
    ) -> tuple[Prompt, list[Message], list[Message]]:
        """The rendered prompt, the frame's own messages (with the allowed ``choices`` just
        before the content: the first request carries them) and the messages sent."""
        prompt = self._render(content, context)
        own = prompt.own
        if choices:  # the provider may also constrain decoding to them: openai_provider
            said = {"role": "user", "content": validate.choice_instruction(choices)}
            own = [*own[:-1], said, own[-1]]
        at = prompt.record["at"]
        return prompt, own, own[:at] + prompt.history + own[at:]

    def _call(self, node: Call, request: LLMRequest, on_delta: DeltaCallback | None) -> LLMResponse:
        """Ask the provider (retrying transient errors) and finish ``node`` either way."""
        assert self.provider is not None
        writer = get_store()
        assert writer is not None
        started = time.perf_counter()
        meta = node.metadata
        streamed: list[str] = []
        ended: list[bool] = []  # the call was given up (a killed run): late pieces are dropped
        sink = on_delta
        if on_delta is not None:

            def sink(delta: str) -> None:
                if not ended:
                    streamed.append(delta)
                    on_delta(delta)

        provider = self.provider

        def attempt() -> LLMResponse:  # every attempt, retries too, waits its turn
            waited = wait_turn(provider.name, self.requests_per_minute)
            if waited > 0:  # the DAG says why the call took longer than its reply
                meta["rate_wait_ms"] = round(meta.get("rate_wait_ms", 0.0) + waited * 1000, 1)
            return killable(lambda: provider.complete(request, sink))

        def refusals(found: list[str] | None) -> None:  # every attempt's, kept in order
            if found:
                meta["output_refused"] = [*meta.get("output_refused", ()), *found]

        def failed(exc: BaseException, wait: float) -> None:  # an attempt that is retried
            refusals(getattr(exc, "output_refused", None))
            meta.setdefault("retries", []).append(error_text(exc, 300))
            meta.setdefault("retry_waits_s", []).append(round(wait, 3))
            streamed.clear()  # a retry streams the reply again from the start

        try:
            response = with_retries(
                attempt, self.max_retries, self.backoff, on_retry=failed, sleep=self.sleep
            )
        except BaseException as exc:
            ended.append(True)
            refusals(getattr(exc, "output_refused", None))
            finish(node, exc=exc, started=started)
            if streamed:  # what the user already saw of the reply before it broke off
                node.output = "".join(streamed)
                meta["partial"] = True
            writer.update(node)
            raise
        finish(node, started=started)
        node.output = response.text
        meta.update(model=response.model or self.model, finish_reason=response.finish_reason)
        earlier = meta.pop("output_refused", None)  # (a retried attempt's)
        meta.update(response.metadata)  # the provider's: output mode, fallbacks, estimates
        found = meta.pop("output_refused", None)
        refusals(earlier)
        refusals(found)
        if response.usage is not None:
            meta["usage"] = response.usage.to_dict()
            cost = price_call(
                meta["model"],
                self.provider.name,
                response.usage.input_tokens,
                response.usage.output_tokens,
                vendor_endpoint=getattr(provider, "vendor_endpoint", True),
            )
            if cost is not None:
                meta["cost"] = cost
        if response.tool_calls:  # a redacted copy for people: the tools run from the reply
            meta["tool_calls"] = [
                sanitize({k: v for k, v in vars(t).items() if v is not None})
                for t in response.tool_calls
            ]
        writer.update(node)
        if self.budget is not None:
            self.budget.record(writer, node)
        return response


def _may_shrink(exc: Exception, record: dict[str, Any], extra: list[Message]) -> bool:
    """Whether ``exc`` is a context overflow the one retry can answer: the policy did not
    say ``overflow="raise"`` and there is history or more than one re-ask to leave out."""
    used = ContextPolicy.from_dict(record.get("policy"))
    if not is_context_overflow(exc) or (used is not None and used.overflow == "raise"):
        return False
    return bool(record.get("turns")) or len(extra) > 2


def _narrower(
    exc: Exception, call: ContextPolicy | None, record: dict[str, Any], sent: list[Message]
) -> ContextPolicy | None:
    """The policy of the one retry after ``exc``, a context overflow: half the history, or
    less when the server's figures say half is not enough (none at all when even that would
    not fit); None when no history was sent."""
    keep, figures = 0.5, overflow_room(exc)
    if figures is not None:
        history = int(record.get("tokens") or 0)
        keep = min(keep, history_share(history, estimate_tokens(sent), *figures))
    return shrunk(call, record, keep)


def llm(content: Any, *, runtime: Runtime | None = None, **kwargs: Any) -> Any:
    """A one-shot LLM call with the ambient (or given, or configured) runtime: what
    ``runtime.exec(content, **kwargs)`` returns (``tools=`` runs the tool loop there)."""
    rt = runtime or get_current_runtime()
    if rt is None:
        rt = default_runtime()  # what the environment configures
        if rt is None or not rt.configured:
            raise NoProviderConfigured()
    return rt.exec(content, **kwargs)
