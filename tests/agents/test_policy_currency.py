"""The approval policy's amounts are in one currency (APPROVAL_POLICY_CURRENCY, default usd).

A threshold of 20000 is $200.00. On an order in yen, 20000 is ¥20,000 (about $130), and on an order
in euros 150.00 €: comparing those numbers with the threshold paid refunds in other currencies
unreviewed by amounts the policy never set. A refund on an order in another currency now waits for
staff, whatever its amount; the sandbox (a separate process, over HTTP) shows nothing was paid.
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus, ToolCall
from agents.runner import advance
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import paid
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def _order(customer, number: str, cents: int, currency: str, sandbox):  # noqa: ANN001, ANN202
    order = make_order(customer, number=number, total_cents=cents)
    order.currency = currency
    order.save(update_fields=["currency"])
    sandbox.seed_payment(order.payment_reference, order.total_cents, currency)
    return order


def _ask(customer, number: str, cents: int) -> ToolCall:  # noqa: ANN001
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=f"Refund {number}")
    advance(ticket.pk, model=Refunds((number, cents)))
    return ToolCall.objects.get(ticket=ticket, name="issue_refund")


@pytest.mark.parametrize(("currency", "cents"), [("jpy", 5000), ("eur", 1500)])
def test_a_refund_in_another_currency_than_the_policys_waits_for_staff(sandbox, currency, cents):  # noqa: ANN001
    customer = make_customer()
    order = _order(customer, "C-1001", cents, currency, sandbox)

    call = _ask(customer, "C-1001", cents)

    assert call.approval_required, f"a {currency.upper()} refund below the USD threshold's number went unreviewed"
    assert call.status == CallStatus.AWAITING_APPROVAL
    assert f"refunds in {currency.upper()} are reviewed by staff" in call.approval_reason
    assert paid(sandbox, order) == []


def test_a_deployment_whose_policy_is_in_euros_compares_euro_refunds_and_reviews_dollar_ones(sandbox, settings):  # noqa: ANN001
    settings.APPROVAL_POLICY_CURRENCY = "eur"
    customer = make_customer()
    _order(customer, "E-2001", 1500, "eur", sandbox)
    _order(customer, "E-2002", 1500, "usd", sandbox)

    euros = _ask(customer, "E-2001", 1500)
    dollars = _ask(customer, "E-2002", 1500)

    assert not euros.approval_required, euros.approval_reason
    assert dollars.approval_required and "refunds in USD are reviewed by staff" in dollars.approval_reason


@pytest.mark.parametrize("currency", ["gbp", "eur", "chf"])
def test_the_customers_limit_does_not_count_pence_as_cents(sandbox, currency):  # noqa: ANN001
    """£150.00 refunded (reviewed, as every refund in another currency is) is more than $150.00: read as
    15000 cents beside the customer's dollar refunds, a $50.00 refund after it brought them to "exactly
    $200.00", the limit, and was paid unreviewed while they had had about $240.00 back. Refunds in
    another currency in the window cannot be counted in the policy's: the next one is reviewed."""
    from approvals import services as approval_services
    from approvals.models import ApprovalRequest
    from tests.approvals.conftest import make_staff

    approver = make_staff(f"limit-approver-{currency}", can_decide=True)
    customer = make_customer()
    abroad = _order(customer, "P-1001", 20000, currency, sandbox)
    home = _order(customer, "P-1002", 20000, "usd", sandbox)
    first = _ask(customer, "P-1001", 15000)
    assert first.status == CallStatus.AWAITING_APPROVAL, first.approval_reason
    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(tool_call=first).pk, user=approver, approve=True
    )
    advance(first.ticket_id, model=Refunds(("P-1001", 15000)))
    assert [r["amount"] for r in paid(sandbox, abroad)] == [15000]

    second = _ask(customer, "P-1002", 5000)

    assert second.approval_required and second.status == CallStatus.AWAITING_APPROVAL, (
        f"$50.00 paid unreviewed after 150.00 {currency.upper()} ({second.status}: {second.approval_reason!r})"
    )
    assert currency.upper() in second.approval_reason, second.approval_reason
    assert paid(sandbox, home) == []
