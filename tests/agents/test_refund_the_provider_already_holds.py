"""A refund the payment provider already holds on the order, which the ledger does not, is not paid again
unreviewed.

Whether a refund needs a staff approval was decided from the ledger alone. A refund made outside the
agent (a person in the provider's dashboard, after the note "check it with the payment provider before
refunding again"; the deployment a ticket was moved from, after the export) is in no row here: the
customer who then asked the agent for the same $30 was judged a first refund under every threshold and
paid a second time, unreviewed. The provider's record wins: before an unreviewed refund is sent, the
payment's refunds at the provider are read (the look-up under the call's key reads them anyway), and
money refunded there that the ledger does not count holds the refund for staff.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import ApprovalDecision, CallStatus, Refund, RunStatus, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services
from tickets.models import Order

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _paid_at_the_provider(sandbox, payment_reference: str) -> list[int]:  # noqa: ANN001
    return sorted(r["amount"] for r in sandbox.refunds() if r["payment_intent"] == payment_reference)


def _refunded_in_the_dashboard(provider, payment_reference: str, cents: int) -> None:  # noqa: ANN001
    """A person refunds ``cents`` of the payment in the provider's dashboard: nothing of it is in the ledger."""
    provider.create_refund(
        payment_reference=payment_reference,
        amount_cents=cents,
        currency="usd",
        idempotency_key=f"dashboard-refund-{uuid.uuid4()}",
        metadata={},
    )


def _customer_asks(sandbox, number: str, *, total_cents: int = 8000, dollars: int = 30, refunded_outside=None):  # noqa: ANN001, ANN202
    """A customer with a paid order ``number`` asks for ``dollars`` of it back; ``refunded_outside``:
    (provider, cents) a person refunded in the provider's dashboard first. Returns (order, ticket)."""
    customer = make_customer()
    order = make_order(customer, number=number, total_cents=total_cents)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    if refunded_outside is not None:
        provider, cents = refunded_outside
        _refunded_in_the_dashboard(provider, order.payment_reference, cents)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body=f"Please refund ${dollars} of order {number}, it arrived broken"
    )
    return order, ticket


def test_a_refund_made_in_the_providers_dashboard_holds_the_same_request_for_staff(sandbox, provider):  # noqa: ANN001
    order, ticket = _customer_asks(sandbox, "P-4401", refunded_outside=(provider, 3000))
    state = advance(ticket.pk).state

    assert _paid_at_the_provider(sandbox, order.payment_reference) == [3000], (
        "the agent paid $30 again, unreviewed, on an order the provider had already refunded $30 of"
    )
    assert state == RunStatus.WAITING_APPROVAL
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.AWAITING_APPROVAL
    request = ApprovalRequest.objects.get(tool_call=call, status="pending")
    assert "payment provider" in request.reason and "$30.00" in request.reason, request.reason
    assert not Refund.objects.exists()

    # Staff, who see why, may still approve it: it is paid once, under its key.
    approval_services.approval_decide(
        approval_id=request.pk, user=make_staff("approves", can_decide=True), approve=True
    )
    advance(ticket.pk)
    call.refresh_from_db()
    assert call.approval_decision == ApprovalDecision.APPROVED and call.status == CallStatus.SUCCEEDED
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [3000, 3000]


def test_refunds_the_ledger_knows_hold_nothing_back(sandbox):  # noqa: ANN001
    """With nothing at the provider but what the ledger has, a first refund under every threshold is paid at
    once, as before (the payment's refunds read first serve as the look-up under its key)."""
    order, ticket = _customer_asks(sandbox, "P-4402")
    assert advance(ticket.pk).state == RunStatus.COMPLETED
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [3000]
    assert Refund.objects.get(ticket=ticket).status == "succeeded"


@pytest.mark.customer_confirms
def test_a_refund_the_customer_confirmed_is_held_too_and_not_asked_again_after_the_approval(sandbox, provider):  # noqa: ANN001
    order, ticket = _customer_asks(sandbox, "P-4403", refunded_outside=(provider, 3000))
    assert advance(ticket.pk).state == RunStatus.WAITING_CONFIRMATION
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    client = Client()
    client.force_login(ticket.customer.user)
    response = client.post(
        f"/tickets/{ticket.pk}/confirmations/{call.pk}",
        {"answer": "confirm", "digest": call.confirmation_digest},
        content_type="application/json",
    )
    assert response.status_code == 200, response.json()

    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [3000]
    request = ApprovalRequest.objects.get(tool_call=call, status="pending")
    approval_services.approval_decide(
        approval_id=request.pk, user=make_staff("approves", can_decide=True), approve=True
    )
    advance(ticket.pk)
    call.refresh_from_db()
    assert call.status == CallStatus.SUCCEEDED, (call.status, call.error)
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [3000, 3000]


def test_a_refund_the_ledger_holds_as_failed_long_ago_that_the_provider_paid_holds_the_next_one(sandbox):  # noqa: ANN001
    """One of ours counts once the provider shows it: a refund failed before the provider showed it (its
    request still on its way), no longer asked about past REFUND_RECHECK_FAILED_HOURS, that landed after
    all, is money the ledger does not count. The same request asked again is held for staff."""
    customer = make_customer()
    order = make_order(customer, number="P-4404", total_cents=8000)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    first, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $30 of order P-4404, it arrived broken"
    )
    assert advance(first.pk).state == RunStatus.COMPLETED
    # As the ledger holds a refund the reconciler failed (no record at the provider yet) two days ago,
    # which the provider then paid: failed, no provider id, no longer asked about.
    Refund.objects.filter(ticket=first).update(
        status="failed", provider_refund_id=None, updated_at=timezone.now() - timedelta(days=2)
    )

    again, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $30 of order P-4404, it arrived broken"
    )
    assert advance(again.pk).state == RunStatus.WAITING_APPROVAL
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [3000]
    call = ToolCall.objects.get(ticket=again, name="issue_refund")
    assert "payment provider holds $30.00" in ApprovalRequest.objects.get(tool_call=call).reason


def test_money_refunded_in_the_providers_dashboard_counts_against_what_is_left_before_staff_are_asked(
    sandbox, provider
):  # noqa: ANN001
    """What is left to refund counts the provider's record: $30 of an $80 order refunded in the dashboard
    leaves $50. A request for the whole $80 is refused with what is left, as one beyond the ledger's
    remainder is, never put to staff for a refund the provider must decline."""
    order, ticket = _customer_asks(sandbox, "P-4405", dollars=80, refunded_outside=(provider, 3000))
    advance(ticket.pk)

    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.arguments["amount_cents"] == 8000
    assert not ApprovalRequest.objects.exists(), ApprovalRequest.objects.values_list("reason", flat=True)
    assert call.status == CallStatus.FAILED and "$50.00 left to refund" in call.error, (call.status, call.error)
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [3000]
    assert not Refund.objects.exists()


def test_an_approved_refund_beyond_what_the_provider_leaves_is_refused_with_what_is_left_not_sent(sandbox, provider):  # noqa: ANN001
    """Reviewed for its amount, the card showing the $300 refunded in the dashboard: approved, the $300 is
    checked again against what is left ($200) and refused with it before it is sent, as after any approval,
    rather than declined by the provider and handed to a person as a refund that could not be completed."""
    order, ticket = _customer_asks(
        sandbox, "P-4406", total_cents=50000, dollars=300, refunded_outside=(provider, 30000)
    )
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    request = ApprovalRequest.objects.get(status="pending")
    approval_services.approval_decide(
        approval_id=request.pk, user=make_staff("approves", can_decide=True), approve=True
    )
    advance(ticket.pk)

    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.FAILED and "$200.00 left to refund" in call.error, (call.status, call.error)
    assert _paid_at_the_provider(sandbox, order.payment_reference) == [30000]
    assert not Refund.objects.exists()


def test_money_refunded_outside_on_a_payment_for_two_orders_counts_against_the_payment_not_each_order(
    sandbox, provider
):  # noqa: ANN001
    """One $100 payment for two $50 orders, $50 of it refunded in the dashboard: the payment still has
    $50, so $50 asked on the other order is not refused as beyond what is left (it is held for staff,
    who see the dashboard's refund)."""
    customer = make_customer()
    first = make_order(customer, number="P-4407", total_cents=5000)
    second = make_order(customer, number="P-4408", total_cents=5000)
    Order.objects.filter(pk=second.pk).update(payment_reference=first.payment_reference)
    sandbox.seed_payment(first.payment_reference, 10000, first.currency)
    _refunded_in_the_dashboard(provider, first.payment_reference, 5000)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $50 of order P-4407, it arrived broken"
    )

    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    request = ApprovalRequest.objects.get(status="pending")
    assert "payment provider holds $50.00" in request.reason, request.reason
    assert _paid_at_the_provider(sandbox, first.payment_reference) == [5000]
