"""The card's warning that pending requests add up to more than their order can still refund counts a
refund failed without the provider ever showing it (it may still be paid, and the refund's rules at the
payment count it: ``agents.selectors.failed_unseen_cents``). Without it, staff approve requests that
are then refused when paid, and read no warning before they do.
"""

from __future__ import annotations

import pytest

from agents.runner import advance
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import Refunds, only_the_order_threshold
from tests.agents.test_refund_failed_unseen import _first_request_stays_on_its_way, _reconciler_gives_up_on_it
from tests.approvals.test_dashboard_cards import ask, dashboard, part
from tests.conftest import make_customer, make_order
from tickets.models import Customer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture(autouse=True)
def _one_provider_attempt(settings):  # noqa: ANN001
    settings.REFUND_PROVIDER_ATTEMPTS = 1


def test_pending_requests_over_what_a_refund_failed_unseen_leaves_are_flagged(sandbox, client, approver, monkeypatch):  # noqa: ANN001
    only_the_order_threshold()
    customer = make_customer()
    order = make_order(customer, total_cents=64900, number="E-5109")
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    _first_request_stays_on_its_way(monkeypatch)
    first = ask(customer, "Refund $150 on E-5109")
    advance(first.pk, model=Refunds(("E-5109", 15000)))
    _reconciler_gives_up_on_it()  # $150 may still be paid: $499 left to refund
    Customer.objects.filter(pk=customer.pk).update(requires_refund_approval=True)
    one, two = ask(customer, "Please refund $300 of order E-5109"), ask(customer, "Please refund $300 of order E-5109")
    advance(one.pk)
    advance(two.pk)
    approvals = list(ApprovalRequest.objects.filter(ticket__in=[one, two]).order_by("pk"))
    assert [a.amount_cents for a in approvals] == [30000, 30000]
    client.force_login(approver)

    page = dashboard(client)

    for approval in approvals:
        warning = part(page, approval, r'<div data-live="warnings">(.*?)</div>')
        assert "2 pending requests on order E-5109 add up to $600.00" in warning, warning
        assert "more than the $499.00 it can still refund" in warning, warning
