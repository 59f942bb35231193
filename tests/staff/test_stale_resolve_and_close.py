"""Resolve and Close from a page read before a colleague took the ticket are a conflict (409): the
forms say who had the ticket (``holder``), as the reply, Assign and hand-back forms do. They used to
send only ``seen``, checked against the customer's messages alone, so a stale page ended the
colleague's live conversation (a closed ticket is final: they could not even reply any more).
From a page that names the colleague, it is done."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket, TicketStatus

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("action", "done_status"), [("resolve", TicketStatus.RESOLVED), ("close", TicketStatus.CLOSED)]
)
def test_finishing_from_a_page_read_before_a_colleague_took_the_ticket_is_a_conflict(action, done_status):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="I want a person.")
    services.ticket_hand_to_person(ticket=ticket, reason="asked for a person")  # with a person, nobody assigned
    maria, li = make_support_staff("maria"), make_support_staff("li")
    first, second = Client(), Client()
    first.force_login(maria)
    second.force_login(li)

    stale = second.get(reverse("staff:ticket", args=[ticket.pk]))  # Li's page: nobody has it
    assert stale.context["allowed"][action] and stale.context["holder"] == ""
    assert 'name="holder" value=""' in stale.content.decode().split(f"/staff/tickets/{ticket.pk}/{action}")[1][:400]

    mine = first.get(reverse("staff:ticket", args=[ticket.pk]))
    sent = first.post(
        reverse("staff:reply", args=[ticket.pk]),
        {"body": "Maria here, I'm on it.", "client_msg_id": "m1", "holder": mine.context["holder"],
         "seen": mine.context["last_seq"]},
    )  # fmt: skip
    assert sent.status_code == 302 and Ticket.objects.get(pk=ticket.pk).assignee == maria

    late = second.post(
        reverse(f"staff:{action}", args=[ticket.pk]),
        {"holder": stale.context["holder"], "seen": stale.context["last_seq"]},
    )

    ticket.refresh_from_db()
    assert (ticket.status, ticket.assignee) == (TicketStatus.WITH_HUMAN, maria), (
        f"Li's stale page did {action} on Maria's live conversation: status={ticket.status}"
    )
    assert late.status_code == 409 and "maria has taken ticket" in late.content.decode()

    fresh = second.get(reverse("staff:ticket", args=[ticket.pk]))  # names Maria: ending it is what was asked
    done = second.post(
        reverse(f"staff:{action}", args=[ticket.pk]),
        {"holder": fresh.context["holder"], "seen": fresh.context["last_seq"]},
    )
    assert done.status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).status == done_status
