"""A refund failed before the provider ever showed it may still be paid: it counts against what its
order has left, as a pending or uncertain one does, until the provider shows what became of it.

The reconciler fails a refund the provider has no record of past the bound, and asks about it again
for REFUND_RECHECK_FAILED_HOURS: a request still on its way may land, and is then recorded paid. A
second refund on the order asked for meanwhile goes to staff (``test_refund_failed_unseen``); the
rules at the payment must refuse it all the same when the two together are more than the order: a
payment that pays for several orders lets the provider take both, and the order was paid back twice.
"""

from __future__ import annotations

import pytest

from agents import refunds as refund_module
from agents.models import CallStatus, Refund, RefundStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import Refunds, only_the_order_threshold, refund_calls
from tests.agents.test_refund_failed_unseen import _first_request_stays_on_its_way, _reconciler_gives_up_on_it
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import Order

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture(autouse=True)
def _one_provider_attempt(quick_provider_retries):  # noqa: ANN001
    quick_provider_retries.REFUND_PROVIDER_ATTEMPTS = 1


def _two_orders_one_payment(customer, sandbox) -> tuple[Order, Order]:  # noqa: ANN001
    first = make_order(customer, number="U-1001", total_cents=10000)
    second = make_order(customer, number="U-1002", total_cents=10000)
    Order.objects.filter(pk=second.pk).update(payment_reference=first.payment_reference)
    sandbox.seed_payment(first.payment_reference, 20000, "usd")
    return first, Order.objects.get(pk=second.pk)


def test_an_approved_refund_is_not_paid_over_a_refund_failed_unseen_that_may_still_land(sandbox, monkeypatch):  # noqa: ANN001
    only_the_order_threshold()
    customer = make_customer()
    approver = make_staff("unseen-left-approver", can_decide=True)
    order, _ = _two_orders_one_payment(customer, sandbox)
    held = _first_request_stays_on_its_way(monkeypatch)
    first_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund U-1001")
    advance(first_ticket.pk, model=Refunds(("U-1001", 10000)))
    _reconciler_gives_up_on_it()

    # Asked again in a new ticket: refused by the rules, or reviewed (the first may still be paid) and
    # approved by staff.
    second_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Again", body="Refund U-1001")
    advance(second_ticket.pk, model=Refunds(("U-1001", 10000)))
    (again,) = refund_calls(second_ticket)
    if again.status == CallStatus.AWAITING_APPROVAL:
        approval_services.approval_decide(
            approval_id=ApprovalRequest.objects.get(tool_call=again).pk, user=approver, approve=True
        )
        advance(second_ticket.pk, model=Refunds(("U-1001", 10000)))

    held["land"]()  # the first request lands after all
    refund_module.reconcile_open_refunds()

    on_payment = sorted(r["amount"] for r in sandbox.refunds() if r["payment_intent"] == order.payment_reference)
    ledger = sum(
        Refund.objects.filter(order=order, status=RefundStatus.SUCCEEDED).values_list("amount_cents", flat=True)
    )
    again.refresh_from_db()
    assert ledger <= order.total_cents, (
        f"order U-1001 ($100.00) paid back {ledger} cents: provider holds {on_payment} on its payment; "
        f"the approved second refund ended {again.status} ({again.error})"
    )
    assert again.status == CallStatus.FAILED, (again.status, again.error)
    assert "the payment provider has not shown yet and may still pay" in again.error, again.error


def test_an_approval_given_before_the_first_refund_failed_unseen_pays_nothing_over_it(sandbox, monkeypatch):  # noqa: ANN001
    """Approved while the first refund still waited to be paid, the second is judged at the payment,
    after the first was sent, lost on its way and failed unseen: it is refused, not paid on top."""
    only_the_order_threshold()
    customer = make_customer(flagged=True)  # every refund is reviewed: the second waits for staff
    approver = make_staff("unseen-left-approver-2", can_decide=True)
    order, _ = _two_orders_one_payment(customer, sandbox)
    second_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund U-1001")
    advance(second_ticket.pk, model=Refunds(("U-1001", 10000)))
    (again,) = refund_calls(second_ticket)
    assert again.status == CallStatus.AWAITING_APPROVAL, again.approval_reason

    first_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund U-1001")
    advance(first_ticket.pk, model=Refunds(("U-1001", 10000)))
    (first,) = refund_calls(first_ticket)
    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(tool_call=first).pk, user=approver, approve=True
    )
    held = _first_request_stays_on_its_way(monkeypatch)
    advance(first_ticket.pk, model=Refunds(("U-1001", 10000)))
    _reconciler_gives_up_on_it()

    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(tool_call=again).pk, user=approver, approve=True
    )
    advance(second_ticket.pk, model=Refunds(("U-1001", 10000)))
    held["land"]()
    refund_module.reconcile_open_refunds()

    ledger = sum(
        Refund.objects.filter(order=order, status=RefundStatus.SUCCEEDED).values_list("amount_cents", flat=True)
    )
    again.refresh_from_db()
    assert ledger <= order.total_cents, f"order U-1001 ($100.00) paid back {ledger} cents ({again.status})"
    assert again.status == CallStatus.FAILED, (again.status, again.error)
    assert "the payment provider has not shown yet and may still pay" in again.error, again.error
