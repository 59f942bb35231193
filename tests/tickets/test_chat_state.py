"""The chat page starts from one consistent point: the status its events show, not an older read."""

from __future__ import annotations

import pytest

from tests.conftest import make_customer
from tickets import presenters, selectors
from tickets import services as ticket_services
from tickets.models import ActorKind, Ticket, TicketStatus

pytestmark = pytest.mark.django_db


def test_a_status_change_committed_between_reading_the_ticket_and_its_events_shows_on_the_page():
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Refund", body="Please refund")
    read_first = Ticket.objects.get(pk=ticket.pk)  # the page reads the ticket first ...
    # ... the agent pauses the ticket for an approval in between (a worker, at that moment) ...
    ticket_services.ticket_transition(
        ticket=ticket.pk, to_status=TicketStatus.PENDING_APPROVAL, actor_kind=ActorKind.AGENT, actor_ref="run:1"
    )
    # ... then its events, which already hold the change: the page must not start from "open".
    items, _ = presenters.present_events(selectors.ticket_timeline(ticket=read_first, public_only=True))

    state = presenters.chat_state(ticket=read_first, items=items)

    assert read_first.status == TicketStatus.OPEN
    assert state["status"] == TicketStatus.PENDING_APPROVAL


def test_with_no_status_in_the_events_the_page_starts_from_the_tickets():
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hello", body="Hello")
    items, _ = presenters.present_events(selectors.ticket_timeline(ticket=ticket, public_only=True))
    assert presenters.chat_state(ticket=ticket, items=items)["status"] == ticket.status


def test_the_page_starts_knowing_the_latest_run_its_events_name():
    """A page opened while a person has the ticket keeps the words of those runs off it (chat.js)."""
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Runs", body="Hello")
    for kind, run in [("agent_run_started", 41), ("agent_run_completed", 41), ("agent_run_started", 42)]:
        ticket_services.event_append(
            ticket=ticket.pk, kind=kind, actor_kind=ActorKind.AGENT, payload={"run_id": run}, is_public=True
        )
    items, _ = presenters.present_events(selectors.ticket_timeline(ticket=ticket, public_only=True))
    assert presenters.chat_state(ticket=ticket, items=items)["run"] == 42


def test_with_no_run_in_the_events_the_page_knows_none():
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="No runs", body="Hello")
    items, _ = presenters.present_events(selectors.ticket_timeline(ticket=ticket, public_only=True))
    assert presenters.chat_state(ticket=ticket, items=items)["run"] == 0
