"""Which chat model the agent talks to: ``get_model`` builds the adapter that ``AGENT_MODEL`` names.

- ``offline`` (default): ``agents.offline_model.OfflineDeterministicModel``;
- ``openai:<model>``: ``agents.llm_openai.OpenAIChatModel`` against
  ``OPENAI_BASE_URL`` with ``OPENAI_API_KEY``;
- ``package.module.ClassName``: a class of your own implementing ``agents.llm.ChatModel``.

Apart from ``agents.llm`` (the interface every adapter speaks), so that the adapters
import the interface and nothing imports back.
"""

from __future__ import annotations

import inspect
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from agents.llm import ChatModel


def get_model(spec: str | None = None, parameters: dict[str, Any] | None = None) -> ChatModel:
    """Build the adapter named by ``spec`` (default: the AGENT_MODEL setting). ``parameters``: the
    model parameters a profile version holds, sent with each request to an OpenAI-compatible endpoint,
    and given to a class of your own as ``parameters=`` (the offline model, deterministic, has none)."""
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
            parameters=parameters,
        )
    try:
        cls = import_string(spec)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"AGENT_MODEL={spec!r} is not 'offline', 'openai:<model>' or an importable class path: {exc}"
        ) from None
    model = _built(cls, spec, parameters)
    if not isinstance(model, ChatModel):
        raise ImproperlyConfigured(f"AGENT_MODEL={spec!r} does not implement agents.llm.ChatModel")
    return model


def _built(cls: type, spec: str, parameters: dict[str, Any] | None) -> Any:
    """An instance of a class of your own: with the version's parameters as ``parameters=`` when it has
    some (a class built with none is built as before, with no arguments). A class that does not take
    them is a misconfiguration said here, not a version whose parameters are silently dropped."""
    if not parameters:
        return cls()
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        try:
            signature.bind(parameters=parameters)
        except TypeError:
            raise ImproperlyConfigured(
                f"{spec!r} takes no model parameters: give its __init__ a keyword argument 'parameters' "
                f"(the profile version's {', '.join(sorted(parameters))}), or leave the model parameters empty"
            ) from None
    return cls(parameters=parameters)
