"""An Assign sent from a page read before a colleague assigned the ticket is refused (409), not a
silent re-assignment, while the agent still answers it too.

README ("Using it", staff): an Assign from a page read before a colleague took the ticket is
refused; the admin's ticket page refuses an assignee changed since it was read. The inbox's form
said only who *had* the ticket (nobody, while the agent answers), so two people who picked "Assign
to: Me" on pages read at the same time both read "Assigned to you"; the first one's ticket left
their "Mine" view, and nobody told them. The form now says whom the page showed assigned; from the
page that shows the colleague, the assignment is what was asked, and it is done.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket

pytestmark = pytest.mark.django_db


def _form(page, assignee: str) -> dict:  # noqa: ANN001
    content = page.content.decode()
    shown = content.split('name="assigned" value="', 1)[1].split('"', 1)[0] if 'name="assigned"' in content else None
    form = {"assignee": assignee, "holder": page.context["holder"]}
    return form if shown is None else {**form, "assigned": shown}


def test_assign_to_me_from_a_page_read_before_a_colleague_assigned_it_to_themselves_is_a_conflict():
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-9 leaks.")
    maria, li = make_support_staff("maria"), make_support_staff("li")
    first, second = Client(), Client()
    first.force_login(maria)
    second.force_login(li)
    marias_page = first.get(reverse("staff:ticket", args=[ticket.pk]))
    lis_page = second.get(reverse("staff:ticket", args=[ticket.pk]))  # both read: the agent has it, nobody assigned

    assert first.post(reverse("staff:assign", args=[ticket.pk]), _form(marias_page, "me")).status_code == 302
    again = first.post(reverse("staff:assign", args=[ticket.pk]), _form(marias_page, "me"))  # her double click
    late = second.post(reverse("staff:assign", args=[ticket.pk]), _form(lis_page, "me"))

    assert again.status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).assignee == maria, (
        "Li's page, read before Maria assigned the ticket to herself, silently re-assigned it to Li "
        f"(HTTP {late.status_code}): it left Maria's view and nobody told her"
    )
    assert late.status_code == 409 and "maria" in late.content.decode()

    fresh = second.get(reverse("staff:ticket", args=[ticket.pk]))  # now shows Maria
    assert second.post(reverse("staff:assign", args=[ticket.pk]), _form(fresh, "me")).status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).assignee == li
