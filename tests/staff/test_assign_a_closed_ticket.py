"""A closed ticket is final: nothing more can happen on it, an assignment neither.

README ("Using it", staff): each action (Assign among them) goes through the ticket's status rules.
A reply, a note, a take-over or a hand-back on a closed ticket is refused; an Assign was not: from a
page read before a colleague closed the ticket, "Assign to: li" answered "Assigned to li." and wrote
an "assigned" event on the closed ticket, and li never saw it ("Mine" leaves closed tickets out):
the person believed the work was handed on, and nobody had it. The closed ticket's page offered the
Assign form all the same. In the admin, the ticket's page saved a new assignee on a closed ticket too.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket, TicketEvent, TicketStatus

pytestmark = pytest.mark.django_db


def _closed_ticket_and_a_page_read_before():  # noqa: ANN202
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-9 leaks.")
    maria, li = make_support_staff("maria"), make_support_staff("li")
    page_of_li, page_of_maria = Client(), Client()
    page_of_li.force_login(li)
    page_of_maria.force_login(maria)
    read = page_of_li.get(reverse("staff:ticket", args=[ticket.pk]))
    assert read.status_code == 200
    # Maria closes the ticket from her own, up-to-date page.
    seen = str(Ticket.objects.get(pk=ticket.pk).last_event_seq)
    closed = page_of_maria.post(reverse("staff:close", args=[ticket.pk]), {"holder": "", "seen": seen})
    assert closed.status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.CLOSED
    return ticket, li, page_of_li, read


def test_an_assign_sent_from_a_page_read_before_the_ticket_was_closed_is_refused_and_changes_nothing():
    ticket, li, page_of_li, read = _closed_ticket_and_a_page_read_before()
    events_before = TicketEvent.objects.filter(ticket=ticket).count()

    response = page_of_li.post(
        reverse("staff:assign", args=[ticket.pk]),
        {"assignee": "li", "holder": str(read.context["holder"]), "assigned": ""},
    )

    ticket.refresh_from_db()
    assigned = list(TicketEvent.objects.filter(ticket=ticket, kind="assigned").values_list("payload", flat=True))
    assert response.status_code == 409 and ticket.assignee is None and not assigned, (
        f"an Assign on a closed ticket answered HTTP {response.status_code} and left it assigned to "
        f"{ticket.assignee} with the events {assigned}: a closed ticket is final, and li's 'Mine' never lists it"
    )
    assert TicketEvent.objects.filter(ticket=ticket).count() == events_before
    assert "closed" in response.content.decode()


def test_the_page_of_a_closed_ticket_offers_no_assign(customer):  # noqa: ANN001
    ticket, li, page_of_li, _ = _closed_ticket_and_a_page_read_before()

    page = page_of_li.get(reverse("staff:ticket", args=[ticket.pk]))

    assert page.context["allowed"]["assign"] is False
    html = page.content.decode()
    form_start = html.index(f'action="{reverse("staff:assign", args=[ticket.pk])}"')
    form_tag = html[html.rindex("<form", 0, form_start) : html.index(">", form_start)]
    assert "hidden" in form_tag, f"the closed ticket's page offers Assign: {form_tag}"
    # The live update says so too (the page hides the form when the ticket is closed while open).
    live = page_of_li.get(reverse("staff:timeline", args=[ticket.pk]), {"after": "0"}).json()
    assert live["allowed"]["assign"] is False


def test_the_service_refuses_to_assign_a_closed_ticket():
    ticket, li, _, _ = _closed_ticket_and_a_page_read_before()

    with pytest.raises(ValidationError) as refused:
        services.ticket_assign_to(ticket=ticket.pk, assignee=li, user=li)
    assert refused.value.code == "closed"
    with pytest.raises(ValidationError) as edited:
        services.ticket_edit(ticket=ticket.pk, user=li, changes={"assignee": li})
    assert edited.value.code == "closed"
    assert Ticket.objects.get(pk=ticket.pk).assignee is None
    assert not TicketEvent.objects.filter(ticket=ticket, kind="assigned").exists()


def test_the_admin_does_not_assign_a_ticket_closed_after_its_page_was_read(admin_client):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-9 leaks.")
    maria, li = make_support_staff("maria"), make_support_staff("li")
    page = admin_client.get(reverse("admin:tickets_ticket_change", args=[ticket.pk]))
    form = page.context["adminform"].form
    data = {name: form[name].value() or "" for name in form.fields}
    for inline in page.context["inline_admin_formsets"]:
        management = inline.formset.management_form
        for name in management.fields:
            data[f"{inline.formset.prefix}-{name}"] = management[name].value()
    data["assignee"] = li.pk
    # Maria closes the ticket in the inbox while the admin's page is open.
    services.ticket_close(ticket=ticket.pk, user=maria)

    response = admin_client.post(reverse("admin:tickets_ticket_change", args=[ticket.pk]), data)

    ticket.refresh_from_db()
    assert response.status_code == 200 and ticket.assignee is None, (
        f"the admin's ticket page assigned a closed ticket (HTTP {response.status_code}, assignee {ticket.assignee})"
    )
    assert "is closed; nothing more can happen on it" in response.content.decode()
    assert not TicketEvent.objects.filter(ticket=ticket, kind="assigned").exists()
    # Read again, the page offers no assignee to choose.
    again = admin_client.get(reverse("admin:tickets_ticket_change", args=[ticket.pk]))
    assert "assignee" not in again.context["adminform"].form.fields
