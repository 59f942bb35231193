"""A reply written on a page that showed a colleague had the ticket, sent after they handed it back to
the agent, is a conflict (409, the text kept in its box), as one sent after a colleague took the ticket
is: the page said a person had it and the agent was silent, and since then the agent may have answered
what the reply answers. Sent, it told the customer a second time and took the ticket from the agent,
neither of which the person saw. From the page that shows the hand-back, it is posted (and takes the
ticket, as a reply does)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agents.runner import advance
from tests.conftest import make_customer
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import AuthorKind, Message, Ticket, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _reply(client: Client, page, body: str, msg_id: str):  # noqa: ANN001, ANN202
    return client.post(
        reverse("staff:reply", args=[page.context["ticket"].pk]),
        {"body": body, "client_msg_id": msg_id, "holder": page.context["holder"], "seen": page.context["last_seq"]},
    )


def _answers(ticket: Ticket) -> list[tuple[str, str]]:
    return list(
        Message.objects.filter(ticket=ticket, is_public=True)
        .exclude(author_kind=AuthorKind.CUSTOMER)
        .order_by("id")
        .values_list("author_kind", "body")
    )


def test_a_reply_from_a_page_read_before_a_colleague_handed_the_ticket_back_is_refused():
    customer = make_customer()
    ticket, _ = services.ticket_open(customer=customer, subject="Parcel", body="My parcel is late.")
    maria, li = make_support_staff("maria"), make_support_staff("li")
    services.ticket_take_over(ticket=ticket.pk, user=maria)
    services.message_post(
        ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=customer.user,
        body="Where is my parcel?", client_msg_id="where",
    )  # fmt: skip
    colleague = Client()
    colleague.force_login(li)
    stale = colleague.get(reverse("staff:ticket", args=[ticket.pk]))  # Maria has it; the question shows
    assert stale.context["holder"] == maria.pk

    services.ticket_hand_back(ticket=ticket.pk, user=maria)  # Maria gives it to the agent...
    advance(ticket.pk)  # ...which answers the question
    answered = _answers(ticket)
    assert [kind for kind, _ in answered] == [AuthorKind.AGENT]
    before = Ticket.objects.get(pk=ticket.pk)
    assert before.status not in {TicketStatus.WITH_HUMAN, TicketStatus.RESOLVED, TicketStatus.CLOSED}

    late = _reply(colleague, stale, "Li here: your parcel is on its way.", "li-1")

    ticket.refresh_from_db()
    assert _answers(ticket) == answered, (
        "the customer was answered a second time from a page that showed Maria had the ticket, after she "
        f"handed it back and the agent answered: {_answers(ticket)}"
    )
    assert (ticket.status, ticket.assignee) == (before.status, before.assignee), (
        f"the stale reply took the ticket from the agent: {ticket.status}, {ticket.assignee}"
    )
    assert late.status_code == 409
    page = late.content.decode()
    assert "Li here: your parcel is on its way." in page and "back to the agent since this page was opened" in page

    again = _reply(colleague, late, "Li here: your parcel is on its way.", "li-2")  # from the page that shows it
    assert again.status_code == 302
    ticket.refresh_from_db()
    assert (ticket.status, ticket.assignee) == (TicketStatus.WITH_HUMAN, li)
    assert ticket.messages.filter(client_msg_id="li-2", author_kind=AuthorKind.STAFF).exists()


def test_a_reply_from_a_page_that_shows_the_hand_back_takes_the_ticket_from_the_agent():
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Parcel", body="My parcel is late.")
    maria, li = make_support_staff("maria"), make_support_staff("li")
    services.ticket_take_over(ticket=ticket.pk, user=maria)
    services.ticket_hand_back(ticket=ticket.pk, user=maria)
    colleague = Client()
    colleague.force_login(li)
    page = colleague.get(reverse("staff:ticket", args=[ticket.pk]))

    sent = _reply(colleague, page, "Li here.", "li-1")

    assert sent.status_code == 302
    ticket.refresh_from_db()
    assert (ticket.status, ticket.assignee) == (TicketStatus.WITH_HUMAN, li)


def test_a_reply_from_a_tab_read_before_ones_own_hand_back_is_sent():
    """One's own hand-back is known to the person who made it (as their own resolve or assignment is)."""
    ticket, _ = services.ticket_open(customer=make_customer(), subject="Parcel", body="My parcel is late.")
    maria = make_support_staff("maria")
    services.ticket_take_over(ticket=ticket.pk, user=maria)
    own = Client()
    own.force_login(maria)
    older_tab = own.get(reverse("staff:ticket", args=[ticket.pk]))
    services.ticket_hand_back(ticket=ticket.pk, user=maria)

    sent = _reply(own, older_tab, "One more thing.", "m-1")

    assert sent.status_code == 302
    ticket.refresh_from_db()
    assert (ticket.status, ticket.assignee) == (TicketStatus.WITH_HUMAN, maria)
