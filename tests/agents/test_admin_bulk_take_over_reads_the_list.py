"""The admin list's bulk "Take over" leaves a ticket someone else resolved or assigned after the list
was read, and says so, as the ticket page's button and the inbox do.

The bulk take-over sent nothing of what the list showed: a ticket a colleague resolved a moment
after the list was read was reopened "with a person", and one a colleague assigned (to themselves,
while the agent still answers it) was taken from them. Tickets as the list showed them are taken.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket, TicketStatus

pytestmark = pytest.mark.django_db

HIDDEN = re.compile(r'<input type="hidden" name="((?:seen-\d+)|listed)" value="(\d+)">')


def test_a_bulk_take_over_leaves_tickets_resolved_or_assigned_after_the_list_was_read(admin_client: Client):
    def opened(words: str) -> Ticket:
        return services.ticket_open(customer=make_customer(), subject="Kettle", body=words)[0]

    resolved, assigned, plain = opened("Kettle K-1 leaks."), opened("Kettle K-2 leaks."), opened("Kettle K-3 leaks.")
    page = admin_client.get("/admin/tickets/ticket/")
    shown = dict(HIDDEN.findall(page.content.decode()))
    assert {f"seen-{t.pk}" for t in (resolved, assigned, plain)} <= set(shown)

    li = make_support_staff("li")
    services.ticket_resolve(ticket=resolved.pk, user=li)
    services.ticket_assign_to(ticket=assigned.pk, assignee=li, user=li)

    response = admin_client.post(
        "/admin/tickets/ticket/",
        {"action": "move_to_with_human", "_selected_action": [resolved.pk, assigned.pk, plain.pk], **shown},
        follow=True,
    )

    admin = get_user_model().objects.get(username="admin")
    assert Ticket.objects.get(pk=resolved.pk).status == TicketStatus.RESOLVED, "a stale list reopened it"
    assert Ticket.objects.get(pk=assigned.pk).assignee == li, "a stale list took it from li"
    assert (Ticket.objects.get(pk=plain.pk).status, Ticket.objects.get(pk=plain.pk).assignee) == (
        TicketStatus.WITH_HUMAN,
        admin,
    )
    told = " ".join(str(message) for message in response.context["messages"])
    assert f"#{resolved.pk} was resolved since" in told and f"#{assigned.pk} was assigned to li since" in told, told
