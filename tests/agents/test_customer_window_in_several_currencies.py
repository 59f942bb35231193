"""The per-customer limit is an amount of the approval policy's currency; a customer's refunds in the window
in another currency are never added to it as if they were in that one.

The window summed every refund's minor units, whatever their currency: £360.00 refunded (36000, reviewed
as a refund in pounds is) and $100.00 asked next made 46000, under a limit of $500.00 (50000), and the
$100.00 was paid unreviewed: about $557 to one customer in the window. Summed so, pounds, euros or francs
count for less than they are worth. A refund while the customer has others in another currency in the
window is reviewed. The sandbox (a separate process, over HTTP) shows what was paid.
"""

from __future__ import annotations

import pytest

from agents.models import ApprovalPolicy, CallStatus, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import paid
from tests.agents.test_policy_currency import _order
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def _ask(customer, number: str, cents: int) -> ToolCall:  # noqa: ANN001
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=f"Refund {number}")
    advance(ticket.pk, model=Refunds((number, cents)))
    return ToolCall.objects.get(ticket=ticket, name="issue_refund")


@pytest.fixture
def limit_of_500_dollars(settings):  # noqa: ANN001, ANN201
    settings.REFUND_CUSTOMER_CONFIRMATION = False
    policy = ApprovalPolicy.current()  # before the first profile version, which is made from it
    policy.customer_limit_cents = 50000
    policy.save()


@pytest.mark.usefixtures("limit_of_500_dollars")
def test_a_dollar_refund_after_a_refund_in_pounds_in_the_window_is_reviewed(sandbox):  # noqa: ANN001
    customer = make_customer()
    pounds = _order(customer, "G-1001", 36000, "gbp", sandbox)
    dollars = _order(customer, "U-1001", 10000, "usd", sandbox)
    first = _ask(customer, "G-1001", 36000)
    assert first.approval_required  # a refund in pounds is reviewed
    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(tool_call=first).pk,
        user=make_staff("window-approver", can_decide=True),
        approve=True,
    )
    advance(first.ticket_id, model=Refunds(("G-1001", 36000)))
    assert len(paid(sandbox, pounds)) == 1

    second = _ask(customer, "U-1001", 10000)

    assert paid(sandbox, dollars) == [], "£360.00 and $100.00 were summed as 46000 cents, under the $500.00 limit"
    assert second.approval_required and second.status == CallStatus.AWAITING_APPROVAL
    assert "GBP" in second.approval_reason, second.approval_reason


@pytest.mark.usefixtures("limit_of_500_dollars")
def test_a_dollar_refund_beside_one_in_euros_still_waiting_is_reviewed(sandbox):  # noqa: ANN001
    customer = make_customer()
    _order(customer, "E-1001", 40000, "eur", sandbox)
    dollars = _order(customer, "U-1002", 9000, "usd", sandbox)
    waiting = _ask(customer, "E-1001", 40000)
    assert waiting.status == CallStatus.AWAITING_APPROVAL

    second = _ask(customer, "U-1002", 9000)

    assert second.approval_required, "400.00 € waiting and $90.00 were summed as 49000 cents, under the limit"
    assert paid(sandbox, dollars) == []


@pytest.mark.usefixtures("limit_of_500_dollars")
def test_dollar_refunds_alone_are_still_counted_against_the_limit(sandbox):  # noqa: ANN001
    customer = make_customer()
    for n in range(3):
        _order(customer, f"U-20{n}", 15000, "usd", sandbox)
    assert [_ask(customer, f"U-20{n}", 15000).approval_required for n in range(3)] == [False, False, False]
    _order(customer, "U-203", 6000, "usd", sandbox)
    fourth = _ask(customer, "U-203", 6000)
    assert fourth.approval_required and "$450.00 before this $60.00" in fourth.approval_reason
