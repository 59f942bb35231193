"""A shop whose approval policy is in yen: amounts are whole yen (Stripe's count for a zero-decimal
currency), the threshold of 20000 is ¥20,000, and it is said so to the model, the card and the customer.
A model's amount that is not a whole positive number of the currency's minor unit (a string, a float,
a negative, one past what any order holds) is refused before anything is recorded or asked of staff.
The sandbox (a separate process, over HTTP) shows what was paid.
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus, ToolCall
from agents.profiles import active_profile, policy_values
from agents.runner import advance
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import Calls, only_the_order_threshold
from tests.agents.test_money_path import paid
from tests.agents.test_policy_currency import _order
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.fixture
def yen_policy(settings):  # noqa: ANN001, ANN201
    settings.APPROVAL_POLICY_CURRENCY = "jpy"
    settings.REFUND_CUSTOMER_CONFIRMATION = False
    only_the_order_threshold()
    assert policy_values(active_profile()).currency == "jpy"


def _ask(customer, number: str, amount) -> ToolCall | None:  # noqa: ANN001
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=f"Refund {number}")
    advance(ticket.pk, model=Calls(("issue_refund", {"order_number": number, "amount_cents": amount})))
    return ToolCall.objects.filter(ticket=ticket, name="issue_refund").first()


@pytest.mark.usefixtures("yen_policy")
def test_a_yen_refund_under_the_yen_threshold_is_paid_and_one_over_it_waits(sandbox):  # noqa: ANN001
    customer = make_customer()
    small = _order(customer, "J-1001", 15000, "jpy", sandbox)
    large = _order(customer, "J-1002", 25000, "jpy", sandbox)

    under = _ask(customer, "J-1001", 15000)
    over = _ask(customer, "J-1002", 25000)

    assert not under.approval_required, under.approval_reason
    assert [r["amount"] for r in paid(sandbox, small)] == [15000]
    assert over.status == CallStatus.AWAITING_APPROVAL and paid(sandbox, large) == []
    assert over.approval_reason == "refunds above ¥20,000 need a staff approval"
    approval = ApprovalRequest.objects.get(tool_call=over)
    assert (approval.amount_cents, approval.currency, approval.amount_display) == (25000, "jpy", "¥25,000")


@pytest.mark.usefixtures("yen_policy")
def test_a_dollar_refund_in_a_yen_shop_is_reviewed(sandbox):  # noqa: ANN001
    customer = make_customer()
    order = _order(customer, "U-1001", 1000, "usd", sandbox)  # $10.00: 1000 is far under the ¥20,000 number
    call = _ask(customer, "U-1001", 1000)
    assert call.approval_required and "refunds in USD are reviewed by staff" in call.approval_reason
    assert "amounts are in JPY" in call.approval_reason
    assert paid(sandbox, order) == []


@pytest.mark.parametrize("amount", ["5000", 5000.0, 50.5, -5000, 0, True, 10**20, None, [5000], {"cents": 5000}])
def test_an_amount_that_is_no_whole_positive_number_is_refused_before_anything_is_recorded(sandbox, amount):  # noqa: ANN001
    customer = make_customer()
    order = _order(customer, "J-2001", 6000, "jpy", sandbox)
    call = _ask(customer, "J-2001", amount)
    assert call is None or call.status in {CallStatus.FAILED, CallStatus.REJECTED}, (amount, call and call.status)
    assert not ApprovalRequest.objects.exists()
    assert paid(sandbox, order) == []
