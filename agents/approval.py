"""Pausing a run for a staff approval, and applying the decision when it comes.

A pause is rows only: the call is ``awaiting_approval``, the run
``waiting_approval``, the ticket ``pending_approval``. No worker waits. The
decision is written on the call (``approval_decision``) and rings the ticket;
the next pass applies it: an approved call runs under its original
idempotency key, with the guardrails checked again by the tool itself; a
rejected call becomes a result the model explains to the customer.
"""

from __future__ import annotations

from collections.abc import Callable

from agents import services as agent_services
from agents.lease import Lease
from agents.models import AgentRun, CallStatus, RunStatus, ToolCall
from agents.tools import REGISTRY, ToolContext
from tickets import services as ticket_services
from tickets.models import ActorKind, Ticket, TicketStatus


def pause_for_approval(*, lease: Lease, run: AgentRun, call: ToolCall, reason: str) -> None:
    with lease.guard():
        ToolCall.objects.filter(pk=call.pk).update(status=CallStatus.AWAITING_APPROVAL)
        call.status = CallStatus.AWAITING_APPROVAL
        agent_services.run_transition(lease=lease, run=run, to_status=RunStatus.WAITING_APPROVAL, outcome=reason)
        ticket = Ticket.objects.select_for_update().get(pk=run.ticket_id)
        if ticket.status != TicketStatus.PENDING_APPROVAL:
            ticket_services.ticket_transition(
                ticket=ticket,
                to_status=TicketStatus.PENDING_APPROVAL,
                actor_kind=ActorKind.AGENT,
                actor_ref=f"run:{run.pk}",
                reason=reason,
            )


def apply_decision(
    *, lease: Lease, run: AgentRun, call: ToolCall, ticket: Ticket, execute: Callable[..., None]
) -> str | None:
    """Apply a recorded decision; returns WAITING_APPROVAL if there is none yet."""
    if call.approval_decision is None:
        return RunStatus.WAITING_APPROVAL
    with lease.guard():
        locked = Ticket.objects.select_for_update().get(pk=ticket.pk)
        if locked.status == TicketStatus.PENDING_APPROVAL:
            ticket_services.ticket_transition(
                ticket=locked, to_status=TicketStatus.OPEN, actor_kind=ActorKind.AGENT, actor_ref=f"run:{run.pk}"
            )
    if call.approval_decision == "rejected":
        agent_services.call_finish(
            lease=lease,
            call=call,
            status=CallStatus.REJECTED,
            result={"rejected": True, "status": "rejected_by_staff", "note": call.approval_note},
            error="rejected by staff",
        )
        return None
    with lease.guard():
        ToolCall.objects.filter(pk=call.pk, status=CallStatus.AWAITING_APPROVAL).update(status=CallStatus.STARTED)
    call.refresh_from_db()
    tool = REGISTRY[call.name]
    execute(lease, call, tool, ToolContext(ticket=ticket, call=call))
    return None
