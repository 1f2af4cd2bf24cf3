"""The provider interface — defined with the Runtime in
:mod:`openprogram.agentic_programming.provider`, re-exported here (the seed's import path)."""

from openprogram.agentic_programming.provider import (
    DeltaCallback,
    LLMRequest,
    LLMResponse,
    Message,
    Provider,
    Reply,
    ToolCall,
    ToolRun,
    Usage,
)
from openprogram.errors import MissingCredentials, ProviderError, TransientProviderError

__all__ = [
    "DeltaCallback",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "MissingCredentials",
    "Provider",
    "ProviderError",
    "Reply",
    "ToolCall",
    "ToolRun",
    "TransientProviderError",
    "Usage",
]
