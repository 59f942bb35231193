"""The staff ticket page, and its live update, show the ticket and its timeline as they were at one
moment.

The page read the ticket's row (its status, who holds it), then its events, in statements of their
own: a colleague's take-over committed between the two showed a page whose events told of the
take-over while its status, holder and buttons were the agent's. Its forms then sent what they had
"seen" (every event up to the take-over) with the holder from before it, and a Resolve or Hand back
from it was judged as made by someone who saw the colleague take the ticket: it ended their
conversation. Read in one snapshot, the page is the moment before the change, and its next update
brings the change whole.
"""

from __future__ import annotations

import re
import threading

import pytest
from django.db import connection
from django.db.models import Max
from django.test import Client
from django.urls import reverse

from staff import views
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket, TicketEvent, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


def last_seq(ticket: Ticket) -> int:
    return TicketEvent.objects.filter(ticket=ticket).aggregate(last=Max("seq"))["last"]


def a_colleague_takes_it_over_right_after_the_ticket_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Li takes the ticket over, committed from another connection, just after the page read its row."""
    li = make_support_staff("li")
    read = views._ticket_or_404

    def then_li_takes_it(ticket_id: int) -> Ticket:
        found = read(ticket_id)

        taken: list[Ticket] = []

        def take() -> None:
            try:
                taken.append(services.ticket_take_over(ticket=ticket_id, user=li))
            finally:
                connection.close()

        colleague = threading.Thread(target=take)
        colleague.start()
        colleague.join(30)
        assert taken and taken[0].status == TicketStatus.WITH_HUMAN, "Li's take-over did not commit"
        monkeypatch.setattr(views, "_ticket_or_404", read)  # once
        return found

    monkeypatch.setattr(views, "_ticket_or_404", then_li_takes_it)


@pytest.fixture
def maria() -> Client:
    client = Client()
    client.force_login(make_support_staff("maria"))
    return client


@pytest.fixture
def ticket() -> Ticket:
    return services.ticket_open(customer=make_customer(), subject="Kettle", body="My kettle K-1 leaks.")[0]


def test_the_ticket_page_shows_its_status_and_holder_with_the_events_of_the_same_moment(maria, ticket, monkeypatch):  # noqa: ANN001
    before = last_seq(ticket)
    a_colleague_takes_it_over_right_after_the_ticket_is_read(monkeypatch)

    page = maria.get(reverse("staff:ticket", args=[ticket.pk])).content.decode()

    after = last_seq(ticket)
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN and after > before
    shown_status = re.search(r'data-status="([^"]+)"', page).group(1)
    shown_seq = int(re.search(r'data-after="(\d+)"', page).group(1))
    assert (shown_status, shown_seq) in {(TicketStatus.WITH_HUMAN.value, after), (ticket.status, before)}, (
        f"the page shows the ticket {shown_status!r} with its events up to {shown_seq} "
        f"(before the take-over: {before}, after it: {after})"
    )


def test_the_live_update_shows_the_status_and_holder_with_the_events_of_the_same_moment(maria, ticket, monkeypatch):  # noqa: ANN001
    before = last_seq(ticket)
    a_colleague_takes_it_over_right_after_the_ticket_is_read(monkeypatch)

    data = maria.get(reverse("staff:timeline", args=[ticket.pk]) + f"?after={before}").json()

    after = last_seq(ticket)
    shown = (data["status"], data["holder"], data["last_seq"])
    li = Ticket.objects.get(pk=ticket.pk).assignee_id
    assert shown in {(TicketStatus.WITH_HUMAN.value, li, after), (ticket.status, "", before)}, (
        f"the update shows the ticket {shown[0]!r} held by {shown[1]!r} with its events up to {shown[2]} "
        f"(before the take-over: {before}, after it: {after})"
    )
