"""Re-running an evaluation: a case's LLM calls answered from the earlier recording unless
they are stale.

:class:`ReuseProvider` wraps the provider the evaluation would use.  For each call it finds
the case it belongs to (the ``eval_case`` node up the call's chain of callers) and asks
the one stale rule (:func:`openprogram.compare.stale.stale_reasons`, what ``openprogram run
--only-stale`` asks per cell) whether that case's recording still holds for the functions
in the call's chain (their docstring and code hashes now) and this provider and model.
If it holds and a recorded call of the same function with the same own prompt (the
replay's identity: docstring, earlier steps, content, without earlier turns) is unused,
that answer is returned — no request is sent, the ``llm`` node says ``reused_from``.
Otherwise the call goes to the wrapped provider, as it would have.

It holds no credential of its own: it travels to a map's worker processes with the offline
``test``/``function`` providers, and is put back (:meth:`ReuseProvider.rewrap`) around the
provider a remote worker builds from its own environment.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any

from openprogram.compare.diffs import prompt_text
from openprogram.compare.stale import stale_reasons
from openprogram.context.secrets import redact_secrets
from openprogram.providers.base import LLMRequest, LLMResponse, Provider
from openprogram.providers.replay import own_messages
from openprogram.scale.evals.recording import (
    CASE_META,
    REUSED_META,
    CaseRecording,
    RecordedCall,
    frame_name,
)
from openprogram.store.vars import get_call_id, get_store


class ReuseProvider:
    """``inner`` with the answers of ``recordings`` (case key -> what the case recorded)."""

    def __init__(self, inner: Provider, recordings: Mapping[str, CaseRecording]) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = getattr(inner, "model", "")
        self.recordings = dict(recordings)
        self._used: set[str] = set()
        self._mu = threading.Lock()

    def rewrap(self) -> Callable[[Provider], ReuseProvider]:
        """How a map's remote worker wraps the provider it builds from its own environment
        the same way (no credential travels; the recordings do)."""
        return functools.partial(ReuseProvider, recordings=self.recordings)

    def __getattr__(self, name: str) -> Any:  # what a Runtime reads of its provider
        if name.startswith("__") or name in ("inner", "recordings", "_used", "_mu", "rewrap"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_mu")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._mu = threading.Lock()

    def complete(
        self, request: LLMRequest, on_delta: Callable[[str], None] | None = None
    ) -> LLMResponse:
        found = self._recorded(request)
        if found is None:
            return self.inner.complete(request, on_delta)
        if on_delta is not None:
            on_delta(found.reply)
        return LLMResponse(
            text=found.reply,
            model=found.model,
            finish_reason="stop",
            metadata={REUSED_META: found.node_id},
        )

    def _recorded(self, request: LLMRequest) -> RecordedCall | None:
        """The recorded answer for this call, used up; None: the call goes live."""
        writer = get_store()
        frame = get_call_id()
        if writer is None or frame is None:
            return None
        key, chain, function = None, [], None
        node_id: str | None = frame
        seen: set[str] = set()
        while node_id is not None and node_id not in seen:
            seen.add(node_id)
            try:
                node = writer.get(node_id)
            except KeyError:
                return None
            if function is None:
                function = frame_name(node)
            if isinstance(node.metadata.get(CASE_META), str):
                key = node.metadata[CASE_META]
                break
            if node.kind == "function":
                meta = node.metadata
                chain.append((node.name, meta.get("doc_hash"), meta.get("source_hash")))
            node_id = node.caller
        recording = self.recordings.get(key) if key is not None else None
        if recording is None or function is None:
            return None
        if stale_reasons(recording.cell, chain, (self.name, self.model or None)):
            return None
        own = redact_secrets(prompt_text(own_messages(request)))
        with self._mu:
            for call in recording.calls:
                if call.node_id not in self._used and call.function == function and call.own == own:
                    self._used.add(call.node_id)
                    return call
        return None
