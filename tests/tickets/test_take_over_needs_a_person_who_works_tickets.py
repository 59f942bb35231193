"""Only someone who may work tickets (``tickets.handle_ticket``) becomes a ticket's holder: the
admin's "Take over" (page button and bulk action) refuses operations staff who may only change
tickets in the admin. Held by them, the ticket would sit "with a person" nobody can answer as in
the inbox, and the agent would stay out."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from tests.conftest import make_customer
from tickets import services
from tickets.models import Ticket, TicketStatus

pytestmark = pytest.mark.django_db


def _ops_user(name: str):  # noqa: ANN202
    """Operations staff: may view and change tickets in the admin, but is not support staff."""
    user = get_user_model().objects.create_user(username=name, password="x", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_ticket", "change_ticket"]))
    return get_user_model().objects.get(pk=user.pk)


@pytest.mark.parametrize("how", ["button", "bulk"])
def test_someone_who_cannot_work_tickets_is_not_made_the_tickets_holder_by_the_admin(how):
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Refund", body="Refund my order")
    ops = _ops_user(f"ops-{how}")
    assert not ops.has_perm("tickets.handle_ticket")
    client = Client()
    client.force_login(ops)
    assert client.get("/staff/").status_code == 403  # cannot work tickets in the inbox

    if how == "button":
        client.post(f"/admin/tickets/ticket/{ticket.pk}/take-over/")
    else:
        client.post("/admin/tickets/ticket/", {"action": "move_to_with_human", "_selected_action": [ticket.pk]})

    ticket = Ticket.objects.get(pk=ticket.pk)
    assert not (ticket.status == TicketStatus.WITH_HUMAN and ticket.assignee == ops), (
        "the ticket is now held by a user who cannot work tickets"
    )
