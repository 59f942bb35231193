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
