"""An Assign sent from a page read before a colleague took the ticket is refused, not a silent
re-assignment.

README ("Using it", staff): a reply or a take-over from a page read before a colleague took the
ticket is refused (409, the page now names them). The Assign form carries who had the ticket by the
page too (``holder``): from a page read while the agent had it, "Assign to: Me" would otherwise take
the ticket from the colleague answering it, and their next reply would be refused. From the page
that names them, the assignment is what was asked, and it is done.
"""

from __future__ import annotations

import uuid

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Message, Ticket, TicketStatus

pytestmark = pytest.mark.django_db


def test_assigning_from_a_stale_page_does_not_silently_take_the_ticket_from_the_colleague_who_has_it():
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-9 leaks.")
    maria, li = make_support_staff("maria"), make_support_staff("li")
    first, second = Client(), Client()
    first.force_login(maria)
    second.force_login(li)
    # Both open the ticket while the agent has it (nobody assigned).
    for client in (first, second):
        assert client.get(reverse("staff:ticket", args=[ticket.pk])).status_code == 200

    # Maria takes it over and starts answering the customer.
    assert first.post(reverse("staff:take_over", args=[ticket.pk])).status_code == 302
    page = first.get(reverse("staff:ticket", args=[ticket.pk]))
    maria_holder = page.context["holder"]
    assert maria_holder == maria.pk

    # Li, on the page read before, picks "Assign to: Me".
    late = second.post(reverse("staff:assign", args=[ticket.pk]), {"assignee": "me", "holder": ""})

    ticket.refresh_from_db()
    # Maria sends her answer from her (up to date) page.
    reply = first.post(
        reverse("staff:reply", args=[ticket.pk]),
        {"body": "Sorry about the kettle, a replacement is on its way.", "client_msg_id": uuid.uuid4().hex,
         "holder": str(maria_holder)},
    )  # fmt: skip
    sent = Message.objects.filter(ticket=ticket, author_user=maria, is_public=True).exists()

    assert late.status_code == 409 and ticket.status == TicketStatus.WITH_HUMAN and ticket.assignee == maria, (
        f"an Assign from a page read before maria took the ticket was accepted (HTTP {late.status_code}) and "
        f"silently gave li the ticket maria was answering (assignee now {ticket.assignee}); maria's reply "
        f"then got HTTP {reply.status_code} and was {'sent' if sent else 'not sent'}: a stale page must be a "
        "conflict, not a silent re-assignment"
    )

    assert sent and reply.status_code == 302
    assert "maria has taken ticket" in late.content.decode()

    # Li, now on the page that names maria, assigns it to herself: that is what she asks for.
    page = second.get(reverse("staff:ticket", args=[ticket.pk]))
    assert page.context["holder"] == maria.pk
    again = second.post(reverse("staff:assign", args=[ticket.pk]), {"assignee": "me", "holder": str(maria.pk)})
    assert again.status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).assignee == li
