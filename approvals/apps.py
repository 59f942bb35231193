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
        from agents import calls as agent_calls
        from approvals import services
        from tickets.models import Message, Ticket
        from tickets.signals import ticket_needs_agent, ticket_staff_wrote, ticket_taken_from_agent

        services.register_kinds()
        if services.approval_request_create not in agent_approval.pause_hooks:
            agent_approval.pause_hooks.append(services.approval_request_create)
        # A run that ends with calls still waiting for staff withdraws their requests, in its transaction.
        if services.approval_requests_withdraw not in agent_calls.withdraw_hooks:
            agent_calls.withdraw_hooks.append(services.approval_requests_withdraw)
        # The customer wrote: the open dashboards read the cards of the ticket's requests again.
        ticket_needs_agent.connect(
            services.tell_dashboards_the_customer_wrote, sender=Message, dispatch_uid="approvals.customer_wrote"
        )
        # A person took a ticket from the agent: its cards are no longer offered for a decision.
        ticket_taken_from_agent.connect(
            services.tell_dashboards_a_person_took, sender=Ticket, dispatch_uid="approvals.person_took"
        )
        # A colleague wrote (a note, a reply): the cards quoting the ticket's conversation are read again.
        ticket_staff_wrote.connect(
            services.tell_dashboards_staff_wrote, sender=Message, dispatch_uid="approvals.staff_wrote"
        )
