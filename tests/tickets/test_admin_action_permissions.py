"""The ticket list's bulk actions (hand back, take over, resolve, close, ring the agent) need the
permission to change tickets, as the ticket page's buttons do: staff who may only view tickets
cannot move them.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from tests.conftest import make_customer
from tickets import services
from tickets.models import Ticket, TicketStatus

pytestmark = pytest.mark.django_db


def test_a_view_only_staff_member_cannot_hand_a_colleagues_ticket_back_to_the_agent(admin_user):
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Refund", body="Refund my order")
    services.ticket_take_over(ticket=ticket, user=admin_user)  # a person has the ticket
    viewer = get_user_model().objects.create_user(username="viewer", password="x", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_ticket"))
    client = Client()
    client.force_login(viewer)

    # The ticket page's button is refused to them (has_change_permission) ...
    assert client.post(f"/admin/tickets/ticket/{ticket.pk}/hand-back/").status_code == 403
    # ... and so must be the same move as a bulk action.
    client.post("/admin/tickets/ticket/", {"action": "move_to_open", "_selected_action": [ticket.pk]})

    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
