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
