"""The customer confirms before money moves.

A tool may declare a question the customer answers with a button before the call runs
(``Tool.confirm_question``: a refund asks "Refund $49.99 to the card used for order A-1002?").
It is asked after the guardrails and after any staff approval, as the last gate, and it is a
pause like an approval: rows only, no worker waits.

- The question is bound to the call's exact arguments (their digest) and expires
  (``ApprovalPolicy.confirmation_minutes``). The policy can turn it off for refunds
  (``customer_confirms_refunds``), and so can the deployment (``REFUND_CUSTOMER_CONFIRMATION``).
- The customer's answer is recorded once (``confirmation_decide``): a double click or a second
  tab answering the same changes nothing; a different answer after the first is refused.
  Only the button counts: a typed "yes" is a message like any other, acknowledged and answered
  after the decision.
- The lease holder applies it (``apply_confirmation``): confirmed, the call runs under its
  original idempotency key; cancelled, the model is told and answers; expired, the customer is
  told that nothing was paid and the turn ends.
- ``may_execute`` (agents.approval) refuses any call that needs a confirmation it does not have.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction

from agents import calls
from agents import services as agent_services
from agents.calls import arguments_digest
from agents.lease import Lease
from agents.models import (
    ACTIVE_RUN_STATUSES,
    NOT_RUN,
    PAUSED_CALL_STATUSES,
    AgentRun,
    CallStatus,
    ConfirmationDecision,
    RunStatus,
    ToolCall,
)
from agents.profiles import policy_values, profile_of
from agents.selectors import person_took_the_ticket_since
from agents.tools import REGISTRY, Tool, ToolContext
from support import rounds
from support.clock import database_now
from tickets import services as ticket_services
from tickets.models import AGENT_STAYS_OUT, TICKET_TRANSITIONS, ActorKind, AuthorKind, Ticket, TicketStatus
from tickets.signals import ticket_needs_agent

WAITING_NOTE = (
    "Thanks, we got your message. Please answer the question above with Confirm or Cancel first; "
    "we will answer everything here right after."
)


class ConfirmationClosed(ValidationError):
    """The question was answered already, expired, or changed: nothing was recorded."""


def needs_confirmation(tool: Tool, call: ToolCall) -> bool:
    """Does this call wait for the customer before it runs? Asked when its intent is recorded and
    again after a staff approval (the policy may have changed in between: the later answer counts)."""
    if tool.confirm_question is None:
        return False
    if call.confirmation_decision == ConfirmationDecision.CONFIRMED and confirmed(call):
        return False
    return settings.REFUND_CUSTOMER_CONFIRMATION and policy_values(profile_of(call.run)).customer_confirms_refunds


def confirmed(call: ToolCall) -> bool:
    """No confirmation asked of the customer, or confirmed for exactly these arguments."""
    if not call.confirmation_required:
        return True
    return call.confirmation_decision == ConfirmationDecision.CONFIRMED and (
        call.confirmation_digest == arguments_digest(call.arguments)
    )


def pause_for_confirmation(*, lease: Lease, run: AgentRun, call: ToolCall, tool: Tool, ctx: ToolContext) -> None:
    """Ask the customer. Commits with the call's intent (or with the applied approval) when called
    inside that transaction."""
    assert tool.confirm_question is not None
    question = tool.confirm_question(ctx, call.arguments)
    expires_at = database_now() + timedelta(minutes=policy_values(profile_of(run)).confirmation_minutes)
    digest = arguments_digest(call.arguments)
    with lease.guard():
        calls.call_await_confirmation(lease=lease, call=call, question=question, expires_at=expires_at, digest=digest)
        if run.status != RunStatus.WAITING_CONFIRMATION:
            agent_services.run_transition(
                lease=lease, run=run, to_status=RunStatus.WAITING_CONFIRMATION, outcome="asked the customer to confirm"
            )
        ticket = Ticket.objects.select_for_update().get(pk=run.ticket_id)
        if TicketStatus.WAITING_ON_CUSTOMER in TICKET_TRANSITIONS[ticket.status]:
            ticket_services.ticket_transition_locked(
                ticket=ticket, to_status=TicketStatus.WAITING_ON_CUSTOMER, actor_kind=ActorKind.AGENT,
                actor_ref=f"run:{run.pk}", reason="waiting for the customer to confirm",
            )  # fmt: skip
        # A person took the ticket while the step was written: the run is stopped for good (its next
        # pass ends it), so the customer is not shown a question nobody will act on.
        shown = ticket.status not in AGENT_STAYS_OUT
        ticket_services.event_append(
            ticket=run.ticket_id,
            kind="confirmation_requested",
            actor_kind=ActorKind.AGENT,
            actor_ref=f"run:{run.pk}",
            payload={
                "call_id": call.pk,
                "question": question,
                "digest": digest,
                "expires_at": expires_at.isoformat(),
            },
            is_public=shown,
        )


def mark_for_confirmation(*, lease: Lease, call: ToolCall) -> None:
    """The call will wait for the customer, who is asked when the run reaches it (an earlier call of
    the same step waits for staff first): no question, no expiry yet. It cannot run before that."""
    calls.call_await_confirmation(
        lease=lease, call=call, question="", expires_at=None, digest=arguments_digest(call.arguments)
    )


def _back_to_open(lease: Lease, run: AgentRun) -> None:
    ticket = Ticket.objects.select_for_update().get(pk=run.ticket_id)
    if ticket.status == TicketStatus.WAITING_ON_CUSTOMER:
        ticket_services.ticket_transition_locked(
            ticket=ticket, to_status=TicketStatus.OPEN, actor_kind=ActorKind.AGENT, actor_ref=f"run:{run.pk}"
        )


def apply_confirmation(*, lease: Lease, run: AgentRun, call: ToolCall, ticket: Ticket) -> str | None:
    """Apply the customer's answer. Returns a run state to stop at, or None to go on (the call is
    then ``started``, to run, or final, for the model to read)."""
    decision = call.confirmation_decision
    if call.confirmation_expires_at is None:
        # Marked behind an earlier call of its step, not asked yet (any answer is not to this question).
        decision = None
    if decision is None:
        if call.confirmation_expires_at is None:  # marked behind an approval, not asked yet
            tool = REGISTRY[call.name]
            pause_for_confirmation(
                lease=lease, run=run, call=call, tool=tool, ctx=ToolContext(ticket=ticket, call=call)
            )
        elif run.status != RunStatus.WAITING_CONFIRMATION:
            agent_services.run_transition(
                lease=lease, run=run, to_status=RunStatus.WAITING_CONFIRMATION, outcome="waiting for the customer"
            )
        return RunStatus.WAITING_CONFIRMATION
    if decision == ConfirmationDecision.CONFIRMED and confirmed(call):
        with lease.guard():
            _back_to_open(lease, run)
            calls.call_cleared_to_run(lease=lease, call=call)
        return None
    if decision == ConfirmationDecision.CONFIRMED:
        # Confirmed on other arguments: it does not cover this call; the customer is asked again.
        tool = REGISTRY[call.name]
        pause_for_confirmation(lease=lease, run=run, call=call, tool=tool, ctx=ToolContext(ticket=ticket, call=call))
        return RunStatus.WAITING_CONFIRMATION
    if decision == ConfirmationDecision.CANCELLED:
        with lease.guard():
            _back_to_open(lease, run)
            calls.call_finish(
                lease=lease, call=call, status=CallStatus.CANCELLED,
                result={"cancelled": True, "status": "cancelled_by_customer"}, error="the customer cancelled",
            )  # fmt: skip
        return None
    # Expired: nothing was paid; the customer is told, and the turn ends there, unless other calls of
    # it still wait to run or to be decided (one staff approved behind it): the run goes on to them, as
    # after a Cancel, so none is dropped unseen.
    with lease.guard():
        calls.call_finish(
            lease=lease, call=call, status=CallStatus.CANCELLED,
            result={"cancelled": True, "status": "confirmation_expired"}, error="the customer did not confirm in time",
        )  # fmt: skip
        ticket_services.message_post(
            ticket=run.ticket_id,
            author_kind=AuthorKind.SYSTEM,
            body=(
                f"You did not confirm in time, so nothing was done: {call.confirmation_text} "
                "If you still want it, just ask again here."
            ),
            client_msg_id=f"confirmation-expired:{call.pk}",
            actor_ref=f"run:{run.pk}",
        )
        others = ToolCall.objects.filter(run_id=run.pk, status__in=[CallStatus.STARTED, *PAUSED_CALL_STATUSES])
        if others.exclude(pk=call.pk).exists():
            _back_to_open(lease, run)
            return None
        agent_services.run_transition(
            lease=lease, run=run, to_status=RunStatus.COMPLETED, outcome="the customer did not confirm in time"
        )
    return RunStatus.COMPLETED


def _ring_after_commit(ticket_id: int) -> None:
    transaction.on_commit(lambda: ticket_needs_agent.send(sender=ToolCall, ticket_id=ticket_id))


_WORDS = {ConfirmationDecision.CONFIRMED: "confirmed", ConfirmationDecision.CANCELLED: "cancelled"}


def confirmation_decide(
    *, ticket_id: int, call_id: int, user: AbstractBaseUser | None, confirm: bool, digest: str
) -> str:
    """The customer's button: record their answer once and ring the agent. Returns the answer that
    stands. The caller has checked that ``user`` is the ticket's customer.

    Answering again the same way changes nothing (a double click, a second tab); answering
    otherwise, too late, or on a question that changed is refused with ConfirmationClosed."""
    wanted = ConfirmationDecision.CONFIRMED if confirm else ConfirmationDecision.CANCELLED
    with transaction.atomic():
        call = (
            ToolCall.objects.select_for_update()
            .filter(pk=call_id, ticket_id=ticket_id, confirmation_required=True)
            .first()
        )
        if call is None:
            raise ConfirmationClosed("There is no such question on this ticket.", code="not_found")
        # The same answer again is the first one's result, while it stands: not once the call was
        # closed unrun (a person took the ticket, the run ended), which is said as for a first answer.
        closed_unrun = wanted == ConfirmationDecision.CONFIRMED and call.error.startswith(NOT_RUN)
        if call.confirmation_decision is not None and not (call.confirmation_decision == wanted and closed_unrun):
            if call.confirmation_decision == wanted:
                return wanted
            if call.confirmation_decision == ConfirmationDecision.EXPIRED:
                raise ConfirmationClosed(_expired_words(), code="expired")
            raise ConfirmationClosed(
                f"You already {_WORDS[call.confirmation_decision]} this; it cannot be changed now.",
                code="already_decided",
            )
        ticket_services.ticket_hold(ticket_id)  # a take-over in flight lands first, or after this answer
        if person_took_the_ticket_since(AgentRun(pk=call.run_id, ticket_id=ticket_id)):
            # Said first: a question a person's take-over withdrew (its run ended) says why.
            raise ConfirmationClosed(
                "A member of our team has taken this conversation over, so nothing was done here; "
                "they will reply in this chat.",
                code="person_has_ticket",
            )
        if call.status != CallStatus.AWAITING_CONFIRMATION:
            raise ConfirmationClosed(
                "This question was withdrawn: the agent stopped waiting for it, so nothing was done.", code="closed"
            )
        if call.confirmation_expires_at is None or not call.confirmation_text:
            # Marked to be asked (behind a call of its step that waits), not asked yet: only the
            # question the customer was shown can be answered.
            raise ConfirmationClosed("This question has not been asked yet.", code="not_asked")
        if _expired(call, database_now()):
            raise ConfirmationClosed(_expired_words(), code="expired")
        if digest != call.confirmation_digest or digest != arguments_digest(call.arguments):
            raise ConfirmationClosed(
                "This request changed since you were asked; please answer the new question.", code="changed"
            )
        calls.call_record_confirmation(call_id=call.pk, decision=wanted)
        ticket_services.event_append(
            ticket=ticket_id,
            kind="confirmation_decided",
            actor_kind=ActorKind.CUSTOMER,
            actor_user=user,
            payload={"call_id": call.pk, "decision": wanted, "question": call.confirmation_text},
            is_public=True,
        )
        _ring_after_commit(ticket_id)
    return wanted


def _expired(call: ToolCall, now: datetime) -> bool:
    return call.confirmation_expires_at is not None and call.confirmation_expires_at <= now


def _expired_words() -> str:
    return "This question has expired, so nothing was done. If you still want it, ask again in the chat."


def confirmations_expire_due(*, now: datetime | None = None) -> int:
    """Record "expired" on every question past its time and ring those tickets (beat, every
    ``AGENT_CONFIRMATION_EXPIRY_SECONDS``). The lease holder then tells the customer."""
    now = now or database_now()
    # Through the active runs (a paused call's run is one): no index of calls holds their status.
    due = ToolCall.objects.filter(
        run__status__in=ACTIVE_RUN_STATUSES, status=CallStatus.AWAITING_CONFIRMATION,
        confirmation_decision__isnull=True, confirmation_expires_at__lte=now,
    ).values_list("pk", "ticket_id", "run_id")  # fmt: skip
    expired = 0
    isolated = rounds.Round("question expiry")
    for call_id, ticket_id, run_id in due.order_by("pk"):
        with isolated.row(f"the question of call {call_id}"), transaction.atomic():
            # The call, then the ticket: the order the customer's answer (``confirmation_decide``) and the
            # agent take them in. Holding the ticket first, a Confirm pressed in that moment held the call
            # and waited for the ticket while this waited for the call: a deadlock, which PostgreSQL broke
            # by failing the customer's request (or this row).
            waiting = ToolCall.objects.select_for_update().filter(
                pk=call_id, status=CallStatus.AWAITING_CONFIRMATION, confirmation_decision__isnull=True
            )
            if not list(waiting.values_list("pk", flat=True)):
                continue  # answered meanwhile
            # As a customer's answer: after a person took the ticket, the question is theirs to close
            # (the run's end withdraws it): an expiry written over a take-over would hide that a person
            # stopped the refund (agents.refunds._stopped_before).
            ticket_services.ticket_hold(ticket_id)
            if person_took_the_ticket_since(AgentRun(pk=run_id, ticket_id=ticket_id)):
                _ring_after_commit(ticket_id)
                continue
            if not calls.call_record_confirmation(call_id=call_id, decision=ConfirmationDecision.EXPIRED):
                continue  # answered meanwhile
            ticket_services.event_append(
                ticket=ticket_id, kind="confirmation_expired", actor_kind=ActorKind.SYSTEM,
                payload={"call_id": call_id}, is_public=True,
            )  # fmt: skip
            _ring_after_commit(ticket_id)
            expired += 1
    return expired


def acknowledge_while_confirming(*, lease: Lease, run: AgentRun) -> int:
    return agent_services.acknowledge_while_paused(lease=lease, run=run, note=WAITING_NOTE)
