""" "Hand back to the agent" from a page read before a colleague took the ticket is a conflict (409):
the form says who had the ticket (``holder``), as the reply and Assign forms do, so a colleague's
take-over and reply are not undone by a stale page. From a page that names them it is done."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket, TicketStatus

pytestmark = pytest.mark.django_db


def test_a_hand_back_from_a_page_read_before_a_colleague_took_the_ticket_is_a_conflict():
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="I want a person.")
    services.ticket_hand_to_person(ticket=ticket, reason="asked for a person")  # with a person, nobody assigned
    maria, li = make_support_staff("maria"), make_support_staff("li")
    first, second = Client(), Client()
    first.force_login(maria)
    second.force_login(li)

    stale = second.get(reverse("staff:ticket", args=[ticket.pk]))  # Li's page: nobody has it, "Hand back" offered
    assert stale.context["allowed"]["hand_back"] and stale.context["holder"] == ""

    mine = first.get(reverse("staff:ticket", args=[ticket.pk]))
    sent = first.post(
        reverse("staff:reply", args=[ticket.pk]),
        {"body": "Maria here, I'm on it.", "client_msg_id": "hb1", "holder": mine.context["holder"]},
    )
    assert sent.status_code == 302 and Ticket.objects.get(pk=ticket.pk).assignee == maria

    late = second.post(reverse("staff:hand_back", args=[ticket.pk]), {"holder": stale.context["holder"]})

    ticket.refresh_from_db()
    assert (ticket.status, ticket.assignee) == (TicketStatus.WITH_HUMAN, maria), (
        f"Li's stale page handed Maria's ticket to the agent: status={ticket.status} assignee={ticket.assignee}"
    )
    assert late.status_code == 409

    fresh = second.get(reverse("staff:ticket", args=[ticket.pk]))
    done = second.post(reverse("staff:hand_back", args=[ticket.pk]), {"holder": fresh.context["holder"]})
    assert done.status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.OPEN
