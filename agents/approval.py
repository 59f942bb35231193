"""Pausing a run for a staff approval, and applying the decision when it comes.

Whether a call needs an approval is decided when its intent is recorded
(``agents.policy``) and stored on the call (``approval_required``). Such a call
is created paused, in the same transaction, and ``may_execute`` is the one
door every execution passes: no approved decision on these exact arguments,
no effect, whatever path (first run, recovery, retry) gets there.

A pause is rows only: the call is ``awaiting_approval``, the run
``waiting_approval``, the ticket ``pending_approval``. No worker waits. The
decision is written on the call (``approval_decision``, with the digest of the
arguments it was made on) and rings the ticket; the next pass applies it:

- approved: the call runs under its original idempotency key; the tool checks
  its guardrails again at that moment. If the arguments no longer match the
  approved digest, the approval does not count and a new one is requested.
- rejected: the model gets "rejected by staff" with the note, to explain.
- expired: nobody decided in time; the customer is told and a person takes over.
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured

from agents import calls
from agents import services as agent_services
from agents.calls import arguments_digest
from agents.confirmation import confirmed, needs_confirmation, pause_for_confirmation
from agents.lease import Lease
from agents.models import AgentRun, ApprovalDecision, CallStatus, RunStatus, ToolCall
from agents.tools import REGISTRY, ToolContext, ToolNeedsApproval
from tickets import services as ticket_services
from tickets.models import TICKET_TRANSITIONS, ActorKind, AuthorKind, Ticket, TicketStatus

# Called inside the pausing transaction with (call=..., reason=...): the approvals
# app records its request here, so a pause and its request commit together. A pause
# with no hook to record its request fails (and rolls back) rather than wait for nobody.
PauseHook = Callable[..., None]
pause_hooks: list[PauseHook] = []


def may_execute(call: ToolCall) -> bool:
    """The one door to a call's effect: no approval needed, or approved for exactly these arguments;
    and no confirmation needed, or confirmed by the customer for exactly these arguments."""
    if not confirmed(call):
        return False
    if not call.approval_required:
        return True
    return call.approval_decision == ApprovalDecision.APPROVED and call.approval_digest == arguments_digest(
        call.arguments
    )


def pause_for_approval(*, lease: Lease, run: AgentRun, call: ToolCall, reason: str) -> None:
    """Pause the run on this call. Commits with the call's intent when called inside it.

    Works from every ticket status the agent can be in: the ticket shows
    "pending approval" where its status rules allow it; a ticket a person took
    while the step was written keeps its status, and its request is recorded
    withdrawn (the run is stopped for good: its next pass ends it).

    Behind an earlier call of the same step that waits for the customer's
    confirmation, the run and the ticket stay as that pause set them (the run
    gets to this call after the customer's answer); the request is recorded now,
    so staff can decide it meanwhile.
    """
    if not pause_hooks:
        raise ImproperlyConfigured("no approval request hook is installed (is the approvals app installed?)")
    with lease.guard():
        calls.call_pause(lease=lease, call=call, reason=reason)
        behind_the_customer = run.status == RunStatus.WAITING_CONFIRMATION
        if run.status == RunStatus.RUNNING:
            agent_services.run_transition(lease=lease, run=run, to_status=RunStatus.WAITING_APPROVAL, outcome=reason)
        ticket = Ticket.objects.select_for_update().get(pk=run.ticket_id)
        if not behind_the_customer and TicketStatus.PENDING_APPROVAL in TICKET_TRANSITIONS[ticket.status]:
            ticket_services.ticket_transition(
                ticket=ticket,
                to_status=TicketStatus.PENDING_APPROVAL,
                actor_kind=ActorKind.AGENT,
                actor_ref=f"run:{run.pk}",
                reason=reason,
            )
        for hook in pause_hooks:
            hook(call=call, reason=reason)


def _leave_pending(lease: Lease, run: AgentRun, ticket: Ticket) -> None:
    locked = Ticket.objects.select_for_update().get(pk=ticket.pk)
    if locked.status == TicketStatus.PENDING_APPROVAL:
        ticket_services.ticket_transition(
            ticket=locked, to_status=TicketStatus.OPEN, actor_kind=ActorKind.AGENT, actor_ref=f"run:{run.pk}"
        )


def apply_decision(
    *, lease: Lease, run: AgentRun, call: ToolCall, ticket: Ticket, execute: Callable[..., None]
) -> str | None:
    """Apply a recorded decision. Returns a run state to stop at, or None to carry on."""
    decision = call.approval_decision
    if decision is None:
        # The run got here running (the customer confirmed the call before this one): it pauses on this
        # one, holding no worker until its decision rings. The request was recorded with the intent.
        if run.status == RunStatus.RUNNING:
            try:
                pause_for_approval(
                    lease=lease, run=run, call=call, reason=call.approval_reason or "needs a staff approval"
                )
            except calls.DecisionLanded:
                # Staff decided while the run got here (paying the call before it): what they
                # decided is applied, never written over by a fresh request.
                call.refresh_from_db()
                return apply_decision(lease=lease, run=run, call=call, ticket=ticket, execute=execute)
        return RunStatus.WAITING_APPROVAL
    tool = REGISTRY[call.name]
    if decision == ApprovalDecision.APPROVED and not may_execute(call):
        # The decision was made on other arguments: it does not cover this call.
        pause_for_approval(lease=lease, run=run, call=call, reason="the arguments changed after the approval")
        return RunStatus.WAITING_APPROVAL
    if decision == ApprovalDecision.EXPIRED:
        with lease.guard():
            ticket_services.message_post(
                ticket=ticket.pk,
                author_kind=AuthorKind.SYSTEM,
                body=("We could not review your request in time. A member of our team will look at it and reply here."),
                client_msg_id=f"approval-expired:{call.pk}",
                actor_ref=f"run:{run.pk}",
            )
            calls.call_finish(
                lease=lease, call=call, status=CallStatus.FAILED, result=None, error="the approval request expired"
            )
        agent_services.hand_off(lease=lease, run=run, reason="an approval request expired without a decision")
        return RunStatus.HANDED_OFF
    with lease.guard():
        _leave_pending(lease, run, ticket)
        if decision == ApprovalDecision.REJECTED:
            calls.call_finish(
                lease=lease,
                call=call,
                status=CallStatus.REJECTED,
                result={"rejected": True, "status": "rejected_by_staff", "note": call.approval_note},
                error="rejected by staff",
            )
            return None
        ctx = ToolContext(ticket=ticket, call=call)
        if needs_confirmation(tool, call):
            # Approved by staff; now the customer confirms the exact amount before it is paid.
            pause_for_confirmation(lease=lease, run=run, call=call, tool=tool, ctx=ctx)
            return RunStatus.WAITING_CONFIRMATION
        call = calls.call_cleared_to_run(lease=lease, call=call)
    try:
        execute(lease, call, tool, ToolContext(ticket=ticket, call=call))
    except ToolNeedsApproval as late:
        # Checked again next to its effect, the approved call is handed back to staff, with the reason
        # (a refund: the payment provider holds money outside the ledger its card did not show).
        pause_for_approval(lease=lease, run=run, call=call, reason=late.reason)
        return RunStatus.WAITING_APPROVAL
    return None
