"""The admin list's bulk Hand back, Mark resolved and Close leave a ticket a colleague has with them,
and say so, as the bulk Take over does. The list does not say who had each ticket when it was read:
a bulk hand-back from a list read before a colleague took the ticket undid their take-over (and
a bulk Close ended their conversation for good). The admin's own tickets are moved as before."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket, TicketStatus

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("action", ["move_to_open", "move_to_resolved", "move_to_closed"])
def test_a_bulk_move_leaves_a_ticket_a_colleague_has_with_them(admin_client: Client, admin_user, action: str):  # noqa: ANN001
    colleagues, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="I want a person.")
    services.ticket_hand_to_person(ticket=colleagues, reason="asked for a person")  # nobody assigned yet
    listed = admin_client.get("/admin/tickets/ticket/")  # the list, read before Maria answers
    assert colleagues.pk in {t.pk for t in listed.context["cl"].result_list}
    maria = make_support_staff("maria")
    services.staff_reply(ticket=colleagues, user=maria, body="Maria here, on it.", client_msg_id="m1")
    mine, _ = services.ticket_open(customer=make_customer(), subject="Toaster", body="My toaster.")
    services.ticket_take_over(ticket=mine, user=admin_user)

    response = admin_client.post(
        "/admin/tickets/ticket/", {"action": action, "_selected_action": [colleagues.pk, mine.pk]}, follow=True
    )

    colleagues.refresh_from_db()
    assert (colleagues.status, colleagues.assignee) == (TicketStatus.WITH_HUMAN, maria), (
        f"{action} from the list took Maria's ticket from her: now {colleagues.status}"
    )
    told = [str(message) for message in response.context["messages"]]
    assert f"maria has ticket #{colleagues.pk} already; nothing was changed." in told
    assert Ticket.objects.get(pk=mine.pk).status != TicketStatus.WITH_HUMAN
