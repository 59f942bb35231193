"""A "Hand back to the agent" on a ticket someone else handed back meanwhile changes nothing, and says
so: it said "Handed back: the agent answers what comes next." (the inbox), "... is now open" (the
admin's page) or "1 ticket(s) now open" (the admin's list), as if this person had just done it. Now
it says the ticket was already handed back, by whom, and that nothing was changed; in the inbox, the
admin's button and its bulk action alike.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket, TicketEvent, TicketStatus

pytestmark = pytest.mark.django_db


def _ticket_maria_has():  # noqa: ANN202
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-1 leaks.")
    maria, li = make_support_staff("maria"), make_support_staff("li")
    services.ticket_take_over(ticket=ticket, user=maria)
    return ticket, maria, li


def _said(response) -> list[str]:  # noqa: ANN001
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_the_inbox_says_a_ticket_was_already_handed_back_by_a_colleague():
    ticket, maria, li = _ticket_maria_has()
    client = Client()
    client.force_login(maria)
    page = client.get(reverse("staff:ticket", args=[ticket.pk]))  # Maria's tab: she has it
    services.ticket_hand_back(ticket=ticket, user=li)  # Li hands it back meanwhile
    events = TicketEvent.objects.filter(ticket=ticket).count()

    response = client.post(
        reverse("staff:hand_back", args=[ticket.pk]),
        {"holder": page.context["holder"], "seen": page.context["ticket"].last_event_seq},
    )

    said = _said(response)
    assert "Handed back: the agent answers what comes next." not in said
    assert f"Ticket #{ticket.pk} was already handed back to the agent by li; nothing was changed." in said
    assert TicketEvent.objects.filter(ticket=ticket).count() == events
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.OPEN


def test_the_admin_page_and_list_say_a_ticket_was_already_handed_back():
    ticket, maria, li = _ticket_maria_has()
    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("ops", "ops@example.test", "pw-admin-123"))
    seen = Ticket.objects.get(pk=ticket.pk).last_event_seq
    services.ticket_hand_back(ticket=ticket, user=li)

    button = admin.post(
        reverse("admin:tickets_ticket_hand_back", args=[ticket.pk]), {"holder": maria.pk, "seen": seen}, follow=True
    ).content.decode()
    bulk = admin.post(
        "/admin/tickets/ticket/",
        {"action": "move_to_open", "_selected_action": [ticket.pk], f"seen-{ticket.pk}": seen},
        follow=True,
    ).content.decode()

    already = f"Ticket #{ticket.pk} was already handed back to the agent by li; nothing was changed."
    assert already in button and "is now open" not in button
    assert already in bulk and "now open" not in bulk


def test_a_hand_back_that_hands_back_says_so():
    ticket, maria, _ = _ticket_maria_has()
    client = Client()
    client.force_login(maria)
    page = client.get(reverse("staff:ticket", args=[ticket.pk]))

    response = client.post(
        reverse("staff:hand_back", args=[ticket.pk]),
        {"holder": page.context["holder"], "seen": page.context["ticket"].last_event_seq},
    )

    assert _said(response) == ["Handed back: the agent answers what comes next."]
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.OPEN
