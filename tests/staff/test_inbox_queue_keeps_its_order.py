""" "Needs a person" and "Waiting for approval" list the tickets oldest first, by how long they have
waited in that state. The order (and "Waiting since") followed the ticket's last change of any kind:
a colleague's internal note, a reminder, or the waiting customer writing "hello? anyone?" sent the
ticket that had waited longest to the bottom, shown as waiting for a minute."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import ActorKind, AuthorKind, Ticket, TicketEvent, TicketStatus

pytestmark = pytest.mark.django_db


def listed(person: Client, view: str) -> list[int]:
    page = person.get(reverse("staff:inbox"), {"view": view}).content.decode()
    return [int(n) for n in re.findall(r'data-ticket-id="(\d+)"', page)]


def handed_to_a_person(customer, subject: str, hours_ago: int) -> Ticket:  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=customer, subject=subject, body="I want to talk to a person")
    services.ticket_hand_to_person(ticket=ticket, reason="asked for a person")
    then = timezone.now() - timedelta(hours=hours_ago)
    TicketEvent.objects.filter(ticket=ticket).update(created_at=then)
    Ticket.objects.filter(pk=ticket.pk).update(created_at=then, updated_at=then)
    return ticket


def test_a_note_or_the_customer_writing_again_keeps_the_longest_waiting_ticket_on_top(customer):  # noqa: ANN001
    maria = make_support_staff("maria", first_name="Maria")
    li = make_support_staff("li", first_name="Li")
    person = Client()
    person.force_login(maria)
    longest = handed_to_a_person(customer, "Broken kettle", hours_ago=3)
    later = handed_to_a_person(customer, "Late mug", hours_ago=1)
    assert listed(person, "needs_person") == [longest.pk, later.pk]

    services.staff_note(ticket=longest, user=li, body="Li: asked the warehouse, no answer yet", client_msg_id="n1")
    services.message_post(ticket=longest.pk, author_kind=AuthorKind.CUSTOMER, body="Hello? Anyone there?")

    assert listed(person, "needs_person") == [longest.pk, later.pk]
    page = person.get(reverse("staff:inbox"), {"view": "needs_person"}).content.decode()
    row = page[page.index(f'data-ticket-id="{longest.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "3\xa0hours ago" in row, row


def test_a_reminder_keeps_the_longest_waiting_approval_on_top(customer):  # noqa: ANN001
    person = Client()
    person.force_login(make_support_staff("maria"))
    first, second = [services.ticket_open(customer=customer, subject=s, body="Refund please")[0] for s in "AB"]
    for n, ticket in enumerate((first, second)):
        services.ticket_transition(ticket=ticket, to_status=TicketStatus.PENDING_APPROVAL, actor_kind=ActorKind.AGENT)
        then = timezone.now() - timedelta(hours=5 - n)
        TicketEvent.objects.filter(ticket=ticket).update(created_at=then)
        Ticket.objects.filter(pk=ticket.pk).update(created_at=then, updated_at=then)

    services.event_append(ticket=first, kind="approval_reminder", actor_kind=ActorKind.SYSTEM, payload={})

    assert listed(person, "approval") == [first.pk, second.pk]
