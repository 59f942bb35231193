"""The admin list's bulk Mark resolved and Close leave a ticket on which the customer wrote after the
list was read, and say so, as the ticket's own Resolve and Close buttons do. The bulk actions sent
no "what the list showed": a customer's "wait, it still doesn't work" that arrived while the list
was open was resolved away unread, on a ticket nobody watches. Tickets the customer has not written
on since are moved as before, and so are tickets selected beyond the page ("select all")."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.conftest import make_customer
from tickets import services
from tickets.admin import TicketAdmin
from tickets.models import AuthorKind, Ticket, TicketStatus

pytestmark = pytest.mark.django_db

HIDDEN = re.compile(r'<input type="hidden" name="((?:seen-\d+)|listed)" value="(\d+)">')


def _with_a_person(admin_user, subject: str) -> Ticket:  # noqa: ANN001
    ticket, _ = services.ticket_open(customer=make_customer(), subject=subject, body="My order is late.")
    services.ticket_take_over(ticket=ticket, user=admin_user)
    services.staff_reply(ticket=ticket, user=admin_user, body="It is on its way.", client_msg_id=f"r{ticket.pk}")
    return ticket


def _list_as_read(admin_client: Client) -> dict[str, str]:
    """What the list's form sends back besides the selection: what it showed."""
    page = admin_client.get("/admin/tickets/ticket/")
    assert page.status_code == 200
    return dict(HIDDEN.findall(page.content.decode()))


@pytest.mark.parametrize("action", ["move_to_resolved", "move_to_closed"])
@pytest.mark.parametrize("selected", ["on the page", "across pages"])
def test_a_bulk_resolve_leaves_a_ticket_the_customer_wrote_on_since_the_list_was_read(
    admin_client: Client,
    admin_user,
    monkeypatch,
    action: str,
    selected: str,  # noqa: ANN001
):
    wrote = _with_a_person(admin_user, "Kettle")
    quiet = _with_a_person(admin_user, "Toaster")
    if selected == "across pages":
        monkeypatch.setattr(TicketAdmin, "list_per_page", 1)  # one ticket on the page; "select all" takes both
    shown = _list_as_read(admin_client)
    assert (f"seen-{wrote.pk}" in shown) is (selected == "on the page")
    services.message_post(ticket=wrote, author_kind=AuthorKind.CUSTOMER, body="Wait, it still has not come.")

    picked = {"_selected_action": [wrote.pk, quiet.pk]}
    if selected == "across pages":
        picked = {"_selected_action": [quiet.pk], "select_across": "1"}
    response = admin_client.post("/admin/tickets/ticket/", {"action": action, **picked, **shown}, follow=True)

    wrote.refresh_from_db()
    quiet.refresh_from_db()
    assert wrote.status == TicketStatus.WITH_HUMAN, (
        f"{action} from the list ended a ticket whose customer wrote after the list was read: now {wrote.status}"
    )
    told = [str(message) for message in response.context["messages"]]
    assert any(f"The customer wrote on ticket #{wrote.pk} since" in message for message in told), told
    assert quiet.status in {TicketStatus.RESOLVED, TicketStatus.CLOSED}
    assert "1 ticket(s) now" in " ".join(told)


def test_a_bulk_resolve_from_a_list_read_after_the_customer_wrote_resolves_it(admin_client: Client, admin_user):  # noqa: ANN001
    ticket = _with_a_person(admin_user, "Kettle")
    services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="Thanks, it came.")
    shown = _list_as_read(admin_client)

    admin_client.post(
        "/admin/tickets/ticket/", {"action": "move_to_resolved", "_selected_action": [ticket.pk], **shown}
    )

    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.RESOLVED
