"""Celery tasks of the agent: interfaces only. Ids in, state re-read from Postgres."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.dispatch import receiver
from django.utils import timezone

from agents.models import AgentRun, CallStatus, RunStatus, TicketLease, ToolCall
from tickets.models import AuthorKind, Message, Ticket, TicketStatus
from tickets.signals import ticket_needs_agent

logger = logging.getLogger(__name__)


@shared_task(name="agents.advance_ticket")
def advance_ticket(ticket_id: int) -> str:
    """The one agent task. Idempotent: duplicates and concurrent deliveries are harmless."""
    from agents.runner import advance

    outcome = advance(int(ticket_id))
    if outcome.retry_in is not None:
        advance_ticket.apply_async(args=[ticket_id], countdown=outcome.retry_in)
    return outcome.state


def ring(ticket_id: int) -> None:
    """Ring the ticket's doorbell after the current transaction commits. Carries no state."""
    transaction.on_commit(lambda: advance_ticket.delay(ticket_id))


@receiver(ticket_needs_agent)
def _on_ticket_needs_agent(sender: object, ticket_id: int, **kwargs: object) -> None:
    ring(ticket_id)


def tickets_needing_a_ring(*, limit: int = 500) -> list[int]:
    """Tickets with work for the agent whose lease is free or expired."""
    now = timezone.now()
    unhandled = Message.objects.filter(
        ticket=OuterRef("pk"), author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True
    )
    running = AgentRun.objects.filter(ticket=OuterRef("pk"), status=RunStatus.RUNNING)
    decided = ToolCall.objects.filter(
        ticket=OuterRef("pk"), status=CallStatus.AWAITING_APPROVAL, approval_decision__isnull=False
    )
    paused = AgentRun.objects.filter(ticket=OuterRef("pk"), status=RunStatus.WAITING_APPROVAL)
    held = TicketLease.objects.filter(ticket=OuterRef("pk"), expires_at__gt=now).exclude(owner="")
    candidates = (
        Ticket.objects.annotate(
            unhandled=Exists(unhandled),
            running=Exists(running),
            paused=Exists(paused),
            decided=Exists(decided),
            held=Exists(held),
        )
        .filter(held=False)
        .filter(
            Q(running=True)
            | (
                # A paused run waits for its decision; messages sent meanwhile wait with it.
                (Q(decided=True) | Q(unhandled=True, paused=False))
                & ~Q(status__in=[TicketStatus.WITH_HUMAN, TicketStatus.CLOSED])
            )
        )
        .order_by("updated_at")
        .values_list("pk", flat=True)[:limit]
    )
    return list(candidates)


@shared_task(name="agents.sweep")
def sweep() -> int:
    """Re-ring every ticket with pending work or an expired lease. Lost doorbells only delay work."""
    ticket_ids = tickets_needing_a_ring()
    for ticket_id in ticket_ids:
        advance_ticket.delay(ticket_id)
    if ticket_ids:
        logger.info("sweeper rang %d tickets", len(ticket_ids))
    return len(ticket_ids)


@shared_task(name="agents.reconcile_refunds")
def reconcile_refunds() -> dict[str, int]:
    """Settle refunds left submitted or uncertain from the provider's records."""
    from agents.refunds import reconcile_open_refunds

    return reconcile_open_refunds()
