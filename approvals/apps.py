from __future__ import annotations

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        # The pause records its request through this hook, inside the pausing transaction
        # (approvals depends on agents, never the reverse). Which calls need an approval
        # is declared with each tool (agents.tools, agents.refunds), not patched in here.
        from agents import approval as agent_approval
        from approvals import services

        services.register_kinds()
        if services.approval_request_create not in agent_approval.pause_hooks:
            agent_approval.pause_hooks.append(services.approval_request_create)
