from __future__ import annotations

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals"

    def ready(self) -> None:
        from agents import approval as agent_approval
        from approvals import policy, services

        policy.install()
        if services.approval_request_create not in agent_approval.pause_hooks:
            agent_approval.pause_hooks.append(services.approval_request_create)
