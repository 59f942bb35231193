"""A reply from a tab read before a colleague resolved or assigned the ticket is refused (409, the
text kept in its box), as a take-over from it is: sent, it reopened the ticket the colleague had
just resolved, or took the ticket they had just been assigned. Sent again from the page that shows
what they did, it is posted (and reopens or takes the ticket, as asked)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket, TicketStatus

pytestmark = pytest.mark.django_db


def _reply(client: Client, page, body: str, msg_id: str):  # noqa: ANN001, ANN202
    return client.post(
        reverse("staff:reply", args=[page.context["ticket"].pk]),
        {"body": body, "client_msg_id": msg_id, "holder": page.context["holder"], "seen": page.context["last_seq"]},
    )


@pytest.mark.parametrize("colleague", ["resolved", "assigned"])
def test_a_reply_from_a_tab_read_before_a_colleague_resolved_or_assigned_the_ticket_is_refused(colleague):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-1 leaks.")
    maria, li = make_support_staff("maria"), make_support_staff("li")
    first = Client()
    first.force_login(maria)
    stale = first.get(reverse("staff:ticket", args=[ticket.pk]))  # the agent answers it, nobody assigned
    if colleague == "resolved":
        services.ticket_resolve(ticket=ticket.pk, user=li)
    else:
        services.ticket_assign_to(ticket=ticket.pk, assignee=li, user=li)
    before = Ticket.objects.get(pk=ticket.pk)

    late = _reply(first, stale, "Let me look into it.", "m1")

    ticket.refresh_from_db()
    assert (ticket.status, ticket.assignee) == (before.status, before.assignee), (
        f"a reply from a tab read before li {colleague} the ticket undid it: {ticket.status}, {ticket.assignee}"
    )
    assert late.status_code == 409 and "Let me look into it." in late.content.decode()
    assert not ticket.messages.filter(client_msg_id="m1").exists()

    again = _reply(first, late, "Let me look into it.", "m2")  # from the page that shows it: as asked
    assert again.status_code == 302
    ticket.refresh_from_db()
    assert (ticket.status, ticket.assignee) == (TicketStatus.WITH_HUMAN, maria)
    assert ticket.messages.filter(client_msg_id="m2").exists()
