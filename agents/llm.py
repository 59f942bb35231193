"""The one interface every chat model speaks, and the factory that picks one.

Messages and tools use the OpenAI chat-completions shapes (``role``,
``content``, ``tool_calls``, ``tool_call_id``; tools as
``{"type": "function", "function": {...}}``) so that any OpenAI-compatible
endpoint, the offline deterministic model and a user's own class all fit.

``AGENT_MODEL`` selects the adapter:

- ``offline`` (default): ``agents.offline_model.OfflineDeterministicModel``;
- ``openai:<model>``: ``agents.llm_openai.OpenAIChatModel`` against
  ``OPENAI_BASE_URL`` with ``OPENAI_API_KEY``;
- ``package.module.ClassName``: a class of your own implementing ChatModel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

Message = dict[str, Any]
ToolSpec = dict[str, Any]
# Called with each piece of assistant text as it streams in.
TokenCallback = Callable[[str], None]


@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call the model asked for. ``arguments`` is the raw JSON text the model produced."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class ModelResponse:
    text: str
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str = "stop"


class ModelError(Exception):
    """The model could not answer. ``retryable`` says whether trying again later may help."""

    def __init__(self, message: str, *, retryable: bool, status_code: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code


@runtime_checkable
class ChatModel(Protocol):
    #: Recorded on every model step.
    name: str

    def complete(
        self,
        *,
        messages: list[Message],
        tools: list[ToolSpec],
        on_token: TokenCallback | None = None,
    ) -> ModelResponse:
        """Answer the conversation, streaming text through ``on_token``; raise ModelError on failure."""
        ...


def get_model(spec: str | None = None) -> ChatModel:
    """Build the adapter named by ``spec`` (default: the AGENT_MODEL setting)."""
    spec = (spec if spec is not None else settings.AGENT_MODEL).strip()
    if spec in {"", "offline"}:
        from agents.offline_model import OfflineDeterministicModel

        return OfflineDeterministicModel()
    if spec.startswith("openai:"):
        from agents.llm_openai import OpenAIChatModel

        model_name = spec.removeprefix("openai:").strip()
        if not model_name:
            raise ImproperlyConfigured("AGENT_MODEL=openai: needs a model name, e.g. AGENT_MODEL=openai:gpt-4o-mini")
        return OpenAIChatModel(
            model=model_name,
            api_key=settings.OPENAI_API_KEY or None,
            base_url=settings.OPENAI_BASE_URL or None,
        )
    try:
        cls = import_string(spec)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"AGENT_MODEL={spec!r} is not 'offline', 'openai:<model>' or an importable class path: {exc}"
        ) from None
    model = cls()
    if not isinstance(model, ChatModel):
        raise ImproperlyConfigured(f"AGENT_MODEL={spec!r} does not implement agents.llm.ChatModel")
    return model
