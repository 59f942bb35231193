from __future__ import annotations

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agent runs"

    def ready(self) -> None:
        # Connects the doorbell: a customer message rings advance_ticket after commit.
        from agents import refunds, tasks  # noqa: F401  (registers issue_refund)
        from agents.timeline_kinds import register_kinds

        register_kinds()
        check_model_spec()


def check_model_spec() -> None:
    """AGENT_MODEL names a model this deployment can build: a malformed value stops the process at
    start, naming the variable, rather than failing every ticket's run later."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.utils.module_loading import import_string

    spec = (settings.AGENT_MODEL or "").strip()
    if spec in {"", "offline"}:
        return
    if spec.startswith("openai:"):
        if not spec.removeprefix("openai:").strip():
            raise ImproperlyConfigured("AGENT_MODEL=openai: needs a model name, e.g. AGENT_MODEL=openai:gpt-4o-mini")
        return
    try:
        cls = import_string(spec)
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"AGENT_MODEL={spec!r} is not 'offline', 'openai:<model>' or an importable class path: {exc}"
        ) from None
    try:
        cls()  # as agents.model_factory.get_model builds it, with no arguments
    except Exception as exc:  # noqa: BLE001 - any failure to build it is a misconfiguration, said now
        raise ImproperlyConfigured(
            f"AGENT_MODEL={spec!r} cannot be built with no arguments ({type(exc).__name__}: {exc}); "
            "for an OpenAI-compatible endpoint write AGENT_MODEL=openai:<model>"
        ) from None
