"""The admin ticket page's buttons act on what the page showed, as the inbox's do: Take over from
a page read before a colleague took the ticket does not take it from them, and Resolve from a
page read before the customer wrote again is refused. From a page that shows it, both are done."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import AuthorKind, Ticket, TicketStatus

pytestmark = pytest.mark.django_db


def _open() -> Ticket:
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle leaks.")
    return ticket


def test_admin_take_over_from_a_page_read_before_a_colleague_took_the_ticket_does_not_steal_it(admin_client):
    ticket = _open()
    page = admin_client.get(f"/admin/tickets/ticket/{ticket.pk}/change/").content.decode()
    assert f"/admin/tickets/ticket/{ticket.pk}/take-over/" in page  # page shows: agent has it, nobody assigned

    maria = make_support_staff("maria")
    inbox = Client()
    inbox.force_login(maria)
    assert inbox.post(reverse("staff:take_over", args=[ticket.pk])).status_code == 302
    assert Ticket.objects.get(pk=ticket.pk).assignee == maria

    # The admin presses "Take over" on the page that still says nobody has the ticket.
    admin_client.post(f"/admin/tickets/ticket/{ticket.pk}/take-over/", {"holder": ""})

    ticket.refresh_from_db()
    assert ticket.assignee == maria, f"a stale admin page took the ticket from maria: now {ticket.assignee}"

    # From the page that names her, taking it from her is what was asked.
    page = admin_client.get(f"/admin/tickets/ticket/{ticket.pk}/change/").content.decode()
    assert f'name="holder" value="{maria.pk}"' in page
    admin_client.post(f"/admin/tickets/ticket/{ticket.pk}/take-over/", {"holder": str(maria.pk)})
    ticket.refresh_from_db()
    assert ticket.assignee is not None and ticket.assignee.get_username() == "admin"


def test_admin_resolve_from_a_page_that_did_not_show_the_customers_latest_message_is_refused(admin_client):
    ticket = _open()
    page = admin_client.get(f"/admin/tickets/ticket/{ticket.pk}/change/").content.decode()
    assert f"/admin/tickets/ticket/{ticket.pk}/resolve/" in page
    seen = Ticket.objects.get(pk=ticket.pk).last_event_seq
    assert f'name="seen" value="{seen}"' in page

    # The customer writes again after the page was read.
    services.message_post(
        ticket=ticket.pk,
        author_kind=AuthorKind.CUSTOMER,
        body="Still leaking, please help!",
        author_user=ticket.customer.user,
        client_msg_id="late-1",
    )

    admin_client.post(f"/admin/tickets/ticket/{ticket.pk}/resolve/", {"seen": str(seen)})

    ticket.refresh_from_db()
    assert ticket.status != TicketStatus.RESOLVED, (
        "a stale admin page resolved a ticket with an unseen customer message"
    )

    current = Ticket.objects.get(pk=ticket.pk).last_event_seq  # a page read now shows the message
    admin_client.post(f"/admin/tickets/ticket/{ticket.pk}/resolve/", {"seen": str(current)})
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.RESOLVED


@pytest.mark.parametrize("slug", ["resolve", "close"])
def test_admin_resolve_or_close_from_a_page_read_before_a_colleague_took_the_ticket_is_refused(admin_client, slug):  # noqa: ANN001
    """The admin's Resolve and Close sent only ``seen``: a page read before a colleague took the ticket
    ended their live conversation. They send ``holder`` too, and are refused when it is no longer true."""
    ticket = _open()
    page = admin_client.get(f"/admin/tickets/ticket/{ticket.pk}/change/").content.decode()
    assert f"/admin/tickets/ticket/{ticket.pk}/{slug}/" in page
    seen = Ticket.objects.get(pk=ticket.pk).last_event_seq

    maria = make_support_staff("maria")
    inbox = Client()
    inbox.force_login(maria)
    assert inbox.post(reverse("staff:take_over", args=[ticket.pk])).status_code == 302

    admin_client.post(f"/admin/tickets/ticket/{ticket.pk}/{slug}/", {"holder": "", "seen": str(seen)})

    ticket.refresh_from_db()
    assert (ticket.status, ticket.assignee) == (TicketStatus.WITH_HUMAN, maria), (
        f"a stale admin page's {slug} ended maria's conversation: now {ticket.status}"
    )

    page = admin_client.get(f"/admin/tickets/ticket/{ticket.pk}/change/").content.decode()
    assert f'name="holder" value="{maria.pk}"' in page
    current = Ticket.objects.get(pk=ticket.pk).last_event_seq
    admin_client.post(f"/admin/tickets/ticket/{ticket.pk}/{slug}/", {"holder": str(maria.pk), "seen": str(current)})
    ticket.refresh_from_db()
    assert ticket.status == (TicketStatus.RESOLVED if slug == "resolve" else TicketStatus.CLOSED)
