"""An order is marked "refunded" only once the money went back in full, so a refund that was
pending and then fails at the bank leaves the rest of the order refundable.

README, "Refunds: the rules": the order must be paid, shipped or delivered, and the amount at most
what is left to refund (refunds done, pending or uncertain all count); only a refund the provider
reports succeeded is a success, and the provider's record wins. A status written from a total that
counted a pending refund as done would never be revisited when it failed: the customer's request
for the money still owed would be refused ("only paid, shipped or delivered orders are refunded").
"""

from __future__ import annotations

import pytest

from agents import refunds as refund_module
from agents.models import CallStatus, Refund, RefundStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import Refunds, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Order, OrderStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def test_a_refund_that_fails_after_the_order_was_marked_refunded_leaves_the_rest_refundable(sandbox):  # noqa: ANN001
    approver = make_staff("second-refund-approver", can_decide=True)
    customer = make_customer()
    order = order_for(customer, "RV-2402", 8000, sandbox)  # two $40 items

    # First $40: the bank takes its time (pending).
    sandbox.fault("refund_status:pending")
    first, _ = ticket_services.ticket_open(customer=customer, subject="Mug", body="Refund the $40 mug on RV-2402")
    advance(first.pk, model=Refunds(("RV-2402", 4000)))
    pending = Refund.objects.get(order=order)
    assert pending.status == RefundStatus.PENDING

    # Second $40, another item: a second refund on the order, so staff approve it; it succeeds at once.
    second, _ = ticket_services.ticket_open(customer=customer, subject="Cup", body="Refund the $40 cup on RV-2402")
    advance(second.pk, model=Refunds(("RV-2402", 4000)))
    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(ticket=second).pk, user=approver, approve=True
    )
    advance(second.pk, model=Refunds(("RV-2402", 4000)))
    assert Refund.objects.filter(order=order, status=RefundStatus.SUCCEEDED).count() == 1

    # The bank fails the first refund; the reconciler records it.
    sandbox.settle_refund(pending.provider_refund_id, "failed")
    refund_module.reconcile_open_refunds(older_than_seconds=3600)
    pending.refresh_from_db()
    assert pending.status == RefundStatus.FAILED
    refunded_at_provider = sum(r["amount"] for r in paid(sandbox, order) if r["status"] == "succeeded")
    assert refunded_at_provider == 4000  # $40 of the $80 order is still the customer's

    order.refresh_from_db()
    # The customer asks for the $40 still owed.
    third, _ = ticket_services.ticket_open(customer=customer, subject="Mug", body="My mug refund failed, refund $40")
    advance(third.pk, model=Refunds(("RV-2402", 4000)))
    (again,) = refund_calls(third)
    assert order.status != OrderStatus.REFUNDED and not (
        again.status == CallStatus.FAILED and "is refunded" in again.error
    ), (
        f"order RV-2402 is {Order.objects.get(pk=order.pk).status!r} with only ${refunded_at_provider / 100:.2f} of "
        f"$80.00 refunded at the provider; the request for the rest: {again.status} {again.error!r}"
    )
