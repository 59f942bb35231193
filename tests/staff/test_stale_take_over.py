"""Two members of staff acting on one ticket from pages opened at the same time: a take-over from
a page read before a colleague took the ticket is a conflict, not a silent re-assignment."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket, TicketStatus

pytestmark = pytest.mark.django_db


def test_a_second_take_over_from_a_stale_page_does_not_silently_take_the_ticket_from_the_first_person():
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-1 leaks.")
    maria, li = make_support_staff("maria"), make_support_staff("li")
    first, second = Client(), Client()
    first.force_login(maria)
    second.force_login(li)
    # Both opened the ticket while the agent had it: both pages offer "Take over".
    for client in (first, second):
        assert b"take-over" in client.get(reverse("staff:ticket", args=[ticket.pk])).content

    assert first.post(reverse("staff:take_over", args=[ticket.pk])).status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).assignee == maria
    late = second.post(reverse("staff:take_over", args=[ticket.pk]))

    # Maria was told "You have the ticket"; Li's click from the stale page is a conflict (409, as
    # the page itself no longer offers "Take over" for a ticket a person has), not a silent re-assignment.
    assert late.status_code == 409
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN and ticket.assignee == maria


def test_taking_a_ticket_from_a_colleague_is_only_done_when_asked_for_and_a_retake_changes_nothing():
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-2 leaks.")
    maria, li = make_support_staff("maria2"), make_support_staff("li2")
    services.ticket_take_over(ticket=ticket.pk, user=maria)
    events = Ticket.objects.get(pk=ticket.pk).last_event_seq

    services.ticket_take_over(ticket=ticket.pk, user=maria)  # a double click
    assert Ticket.objects.get(pk=ticket.pk).last_event_seq == events
    with pytest.raises(services.InvalidTransition):
        services.ticket_take_over(ticket=ticket.pk, user=li)
    services.ticket_take_over(ticket=ticket.pk, user=li, holder_seen=maria.pk)  # from a page naming her

    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN and ticket.assignee == li


def _holder_on(page) -> str:  # noqa: ANN001
    """The reply form's record of who had the ticket when the page was read."""
    return page.context["holder"]


def test_a_reply_from_a_page_read_before_a_colleague_took_the_ticket_is_a_conflict_not_a_take_over():
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-3 leaks.")
    maria, li = make_support_staff("maria3"), make_support_staff("li3")
    first, second = Client(), Client()
    first.force_login(maria)
    second.force_login(li)
    stale = second.get(reverse("staff:ticket", args=[ticket.pk]))  # Li reads it while the agent has it
    assert _holder_on(stale) == ""
    mine = first.get(reverse("staff:ticket", args=[ticket.pk]))
    sent = first.post(
        reverse("staff:reply", args=[ticket.pk]),
        {"body": "A new kettle is on its way.", "client_msg_id": "m1", "holder": _holder_on(mine)},
    )
    assert sent.status_code == 302 and Ticket.objects.get(pk=ticket.pk).assignee == maria

    late = second.post(
        reverse("staff:reply", args=[ticket.pk]),
        {"body": "Please send us a photo.", "client_msg_id": "l1", "holder": _holder_on(stale)},
    )

    assert late.status_code == 409
    assert "maria3 has taken ticket" in late.content.decode() and "Please send us a photo." in late.content.decode()
    ticket.refresh_from_db()
    assert ticket.assignee == maria
    assert not ticket.messages.filter(client_msg_id="l1").exists()
    # Sent again from the page that now names Maria: Li answers and takes the ticket, as asked.
    again = second.post(
        reverse("staff:reply", args=[ticket.pk]),
        {"body": "Please send us a photo.", "client_msg_id": "l2", "holder": _holder_on(late)},
    )
    assert again.status_code == 302
    ticket.refresh_from_db()
    assert ticket.assignee == li and ticket.messages.filter(client_msg_id="l2").exists()
