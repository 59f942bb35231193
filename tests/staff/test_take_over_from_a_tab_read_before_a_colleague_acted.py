"""Take over from a tab read before a colleague acted on the ticket is refused (409), not an undoing
of what they did.

The Take over form sends what its page showed (``holder``, ``seen``), as the other forms do. It
sent nothing, so from a tab read while the agent answered the ticket it reopened a ticket a
colleague had resolved meanwhile (the customer's case they had closed came back "with a person"),
and it took a ticket a colleague had assigned meanwhile (to themselves or to someone else) from
its assignee. From the page that shows what they did, it is done: that is then what was asked.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket, TicketStatus

pytestmark = pytest.mark.django_db


def _as_shown(page) -> dict:  # noqa: ANN001
    """What the page's Take over form posts (its hidden fields, as rendered)."""
    action = reverse("staff:take_over", args=[page.context["ticket"].pk])
    form = page.content.decode().split(f'action="{action}"')[1].split("</form>")[0]
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form))
    fields.pop("csrfmiddlewaretoken", None)
    return fields


def _two_people(ticket: Ticket) -> tuple[Client, Client, object, object]:
    maria, li = make_support_staff("maria"), make_support_staff("li")
    first, second = Client(), Client()
    first.force_login(maria)
    second.force_login(li)
    return first, second, maria, li


def test_take_over_from_a_tab_read_before_a_colleague_resolved_the_ticket_does_not_reopen_it():
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-1 leaks.")
    first, second, maria, li = _two_people(ticket)
    stale = first.get(reverse("staff:ticket", args=[ticket.pk]))  # Maria's tab: the agent answers it
    assert stale.context["allowed"]["take_over"]

    page = second.get(reverse("staff:ticket", args=[ticket.pk]))
    done = second.post(
        reverse("staff:resolve", args=[ticket.pk]), {"holder": page.context["holder"], "seen": page.context["last_seq"]}
    )
    assert done.status_code == 302 and Ticket.objects.get(pk=ticket.pk).status == TicketStatus.RESOLVED

    late = first.post(reverse("staff:take_over", args=[ticket.pk]), _as_shown(stale))

    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.RESOLVED, "a tab read before Li resolved the ticket reopened it"
    assert late.status_code == 409 and "resolved" in late.content.decode()
    # From the page that shows it resolved, taking it over (reopening it) is what was asked.
    fresh = first.get(reverse("staff:ticket", args=[ticket.pk]))
    assert first.post(reverse("staff:take_over", args=[ticket.pk]), _as_shown(fresh)).status_code == 302
    ticket.refresh_from_db()
    assert (ticket.status, ticket.assignee) == (TicketStatus.WITH_HUMAN, maria)


@pytest.mark.parametrize("to", ["li", "sam"])
def test_take_over_from_a_tab_read_before_a_colleague_assigned_the_ticket_does_not_replace_the_assignee(to):  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-2 leaks.")
    first, second, maria, li = _two_people(ticket)
    sam = make_support_staff("sam")
    stale = first.get(reverse("staff:ticket", args=[ticket.pk]))  # nobody assigned, the agent answers

    page = second.get(reverse("staff:ticket", args=[ticket.pk]))
    assigned = second.post(
        reverse("staff:assign", args=[ticket.pk]),
        {"assignee": "me" if to == "li" else "sam", "holder": page.context["holder"], "assigned": ""},
    )
    assert assigned.status_code == 302
    chosen = li if to == "li" else sam
    assert Ticket.objects.get(pk=ticket.pk).assignee == chosen

    late = first.post(reverse("staff:take_over", args=[ticket.pk]), _as_shown(stale))

    ticket.refresh_from_db()
    assert ticket.assignee == chosen, f"a tab read before the ticket was assigned to {to} gave it to maria"
    assert ticket.status == TicketStatus.OPEN
    assert late.status_code == 409 and f"assigned to {to}" in late.content.decode()
    fresh = first.get(reverse("staff:ticket", args=[ticket.pk]))
    assert first.post(reverse("staff:take_over", args=[ticket.pk]), _as_shown(fresh)).status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).assignee == maria


def test_the_admins_take_over_from_a_page_read_before_a_colleague_resolved_the_ticket_does_not_reopen_it(
    admin_client,  # noqa: ANN001
):
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-3 leaks.")
    page = admin_client.get(f"/admin/tickets/ticket/{ticket.pk}/change/").content.decode()
    form = page.split(f'action="/admin/tickets/ticket/{ticket.pk}/take-over/"')[1].split("</form>")[0]
    shown = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form))
    shown.pop("csrfmiddlewaretoken", None)
    services.ticket_resolve(ticket=ticket.pk, user=make_support_staff("li"))

    admin_client.post(f"/admin/tickets/ticket/{ticket.pk}/take-over/", shown)

    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.RESOLVED, "a stale admin page reopened it"
