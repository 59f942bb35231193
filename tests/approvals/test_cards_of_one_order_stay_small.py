"""Many requests waiting on one order (a customer asking again and again in new tickets): each card
named every other one, twice (the "Not the only request" warning and the order's refund table), so
the dashboard grew with the square of their number (52 on one order: 857 KB and 1.5 s a read, read
again by every open dashboard at each decision). A card names the first ten of each, paid and tried
refunds before those only asked for, and counts the rest."""

from __future__ import annotations

import re

import pytest

from agents.models import Refund, RefundStatus
from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import order_for
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

ASKED = 14


def test_a_card_names_at_most_ten_other_requests_and_refunds_and_counts_the_rest(sandbox, client, approver):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "M-1001", 500000, sandbox)
    # One refund paid on the order first: it is named first, however many were asked for since.
    first, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $12.34 of M-1001")
    advance(first.pk, model=Refunds(("M-1001", 1234)))
    assert Refund.objects.get(order=order).status == RefundStatus.SUCCEEDED
    for n in range(ASKED):
        ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=f"Refund M-1001 ({n})")
        advance(ticket.pk, model=Refunds(("M-1001", 30000 + n)))  # above the threshold: it waits for staff
    assert ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING).count() == ASKED
    client.force_login(approver)

    page = client.get("/staff/approvals/").content.decode()

    cards = page.split('<li class="card approval"')[1:]
    assert len(cards) == ASKED
    for card in cards:
        warning = re.search(r'<p class="warning others-asked">(.*?)</p>', card, re.S)[1]
        assert warning.count("in ticket <a") == 10, warning
        assert f"and {ASKED - 1 - 10} more" in warning
        table = card[card.index("<tbody>") : card.index("</tbody>")]
        rows = table.count("<tr>")
        assert rows == 10, rows
        assert "$12.34" in table.split("</tr>")[0]  # the paid refund first
        assert f"and {ASKED - 1 + 1 - 10} more on this order" in card
