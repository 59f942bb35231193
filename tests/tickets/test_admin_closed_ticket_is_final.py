"""A closed ticket is final in the admin too: its subject and priority are not edited.

A reply, a note, a take-over, a hand-back or an assignment on a closed ticket is refused (the
services' ``_not_closed``); the admin's ticket page still saved a new subject or priority on one,
with an "edited" event on its timeline after it was closed. Now the closed ticket's page shows them
as read-only, a page read before the ticket was closed that changes them is refused in words, and
the service refuses the edit too.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tests.tickets.test_order_page_read_before_a_status_change import _page_as_shown_at
from tickets import services
from tickets.models import Ticket, TicketEvent, TicketPriority

pytestmark = pytest.mark.django_db


def _ticket() -> Ticket:
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-9 leaks.")
    return ticket


@pytest.mark.parametrize(
    ("field", "value"),
    [("subject", "Kettle (refunded)"), ("priority", TicketPriority.HIGH)],
    ids=["subject", "priority"],
)
def test_a_page_read_before_the_ticket_was_closed_does_not_edit_it(admin_client, field, value):  # noqa: ANN001
    ticket = _ticket()
    change = reverse("admin:tickets_ticket_change", args=[ticket.pk])
    page = _page_as_shown_at(admin_client, change)
    page[field] = value
    services.ticket_close(ticket=ticket.pk, user=make_support_staff("maria"))

    answer = admin_client.post(change, page)

    ticket.refresh_from_db()
    edited = list(TicketEvent.objects.filter(ticket=ticket, kind="edited").values_list("payload", flat=True))
    assert getattr(ticket, field) != value and not edited, (
        f"the admin edited the {field} of a closed ticket (HTTP {answer.status_code}, events {edited})"
    )
    assert answer.status_code == 200
    assert "is closed; nothing more can happen on it" in answer.content.decode()


def test_the_page_of_a_closed_ticket_offers_nothing_to_edit(admin_client):  # noqa: ANN001
    ticket = _ticket()
    services.ticket_close(ticket=ticket.pk, user=make_support_staff("maria"))

    page = admin_client.get(reverse("admin:tickets_ticket_change", args=[ticket.pk]))

    offered = [name for name in ("subject", "priority", "assignee") if name in page.context["adminform"].form.fields]
    assert not offered, f"the closed ticket's page offers {offered} to edit"


def test_the_service_refuses_to_edit_a_closed_ticket():
    ticket = _ticket()
    maria = make_support_staff("maria")
    services.ticket_close(ticket=ticket.pk, user=maria)

    with pytest.raises(ValidationError) as refused:
        services.ticket_edit(ticket=ticket.pk, user=maria, changes={"subject": "Other", "priority": "high"})

    assert refused.value.code == "closed"
    ticket.refresh_from_db()
    assert (ticket.subject, ticket.priority) == ("Kettle", TicketPriority.NORMAL)
    assert not TicketEvent.objects.filter(ticket=ticket, kind="edited").exists()


def test_an_open_ticket_is_still_edited(admin_client):  # noqa: ANN001
    ticket = _ticket()
    change = reverse("admin:tickets_ticket_change", args=[ticket.pk])
    page = _page_as_shown_at(admin_client, change)
    page["priority"] = TicketPriority.HIGH

    answer = admin_client.post(change, page)

    assert answer.status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).priority == TicketPriority.HIGH
