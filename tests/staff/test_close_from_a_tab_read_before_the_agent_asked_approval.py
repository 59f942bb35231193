"""Close from a tab read before the agent asked staff to approve a refund is refused (409): the
customer was just told their refund is under review, and a closed ticket is final (they cannot
even write on it), so the request would end unreviewed and unanswered. From the page that shows
the request, closing it is what was asked."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.conftest import make_customer, make_order
from tests.staff.conftest import make_support_staff
from tickets import services
from tickets.models import Ticket, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


def _close(client: Client, page):  # noqa: ANN001, ANN202
    return client.post(
        reverse("staff:close", args=[page.context["ticket"].pk]),
        {"holder": page.context["holder"], "seen": page.context["last_seq"]},
    )


def test_close_from_a_tab_read_before_the_agent_asked_for_an_approval_is_refused():
    bob = make_customer("bob")
    make_order(bob, number="B-6001", total_cents=50000)
    ticket, _ = services.ticket_open(customer=bob, subject="Refund", body="Please refund $300 on order B-6001")
    maria = Client()
    maria.force_login(make_support_staff("maria"))
    stale = maria.get(reverse("staff:ticket", args=[ticket.pk]))  # read before the agent answered
    assert stale.context["allowed"]["close"]

    advance(ticket.pk)
    advance(ticket.pk)
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.PENDING_APPROVAL
    assert ApprovalRequest.objects.get(ticket=ticket).status == ApprovalStatus.PENDING

    late = _close(maria, stale)

    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.PENDING_APPROVAL, (
        "a tab read before the agent asked for an approval closed the ticket under the customer's refund request"
    )
    assert late.status_code == 409 and "approv" in late.content.decode()
    assert _close(maria, late).status_code == 302  # from the page that shows the request
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.CLOSED
