"""Money the payment provider holds outside the ledger holds the refund, also when every read before it failed.

A person refunded $30.00 of an $80.00 payment in the provider's dashboard; the customer asks the agent for
$30.00 (under every threshold). Just before the refund is first sent, the payment's refunds are read from
the provider (with the refund's own retries) to find money refunded there that the ledger does not count.
When none of those reads answers, the ledger decides alone; but the look-up under the refund's key, made
just before it is sent, reads the same list of the payment's refunds. The provider answering it (its
trouble over by then) showed the $30.00, and the agent passed over it and paid the $30.00 again,
unreviewed. What that read shows now decides, as the first read would have: nothing is sent, and the
refund goes to staff (or back to staff, when their card did not show that money); a refund that the
money held there leaves no room for is refused with what is left.

The provider is the payment sandbox (a separate process, over HTTP); its own records are read.
"""

from __future__ import annotations

import socket
import uuid

import pytest
from django.conf import settings

from agents import refunds as refund_module
from agents.calls import arguments_digest
from agents.models import CallStatus, Refund, RefundStatus, RunStatus, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from payments.provider import PaymentProvider
from tests.agents.conftest import retry_time_comes
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def _paid_in_the_dashboard(sandbox, provider, number: str, *, total: int, refunded: int):  # noqa: ANN001, ANN202
    customer = make_customer()
    order = make_order(customer, number=number, total_cents=total)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    provider.create_refund(  # in the provider's dashboard: nothing of it is in the ledger
        payment_reference=order.payment_reference,
        amount_cents=refunded,
        currency="usd",
        idempotency_key=f"dashboard-refund-{uuid.uuid4()}",
        metadata={},
    )
    return customer, order


def _every_read_before_the_send_fails(sandbox) -> None:  # noqa: ANN001
    """Each read of the payment's refunds the refund's transaction could use fails (all its tries); the
    provider answers the next one."""
    sandbox.fault("error_before_commit", method="GET", path="/v1/refunds", count=int(settings.REFUND_PROVIDER_ATTEMPTS))


def _the_ledgers_refunds_are_at_the_provider_approved(sandbox) -> None:  # noqa: ANN001
    """Every refund of the ledger is the provider's, for its amount, and was approved for its exact arguments
    (the provider's other refunds are the dashboard's)."""
    at_provider = {r["id"]: r for r in sandbox.refunds()}
    for refund in Refund.objects.exclude(provider_refund_id=None).select_related("tool_call"):
        assert at_provider[refund.provider_refund_id]["amount"] == refund.amount_cents
        approved = ApprovalRequest.objects.filter(tool_call=refund.tool_call, status=ApprovalStatus.APPROVED)
        assert arguments_digest(refund.tool_call.arguments) in {a.arguments_digest for a in approved}


def _paid(sandbox, order) -> list[int]:  # noqa: ANN001
    return sorted(r["amount"] for r in sandbox.refunds() if r["payment_intent"] == order.payment_reference)


def test_a_refund_the_provider_already_holds_is_held_for_staff_when_every_read_before_it_failed(sandbox, provider):  # noqa: ANN001
    customer, order = _paid_in_the_dashboard(sandbox, provider, "P-5601", total=8000, refunded=3000)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $30 of order P-5601, it arrived broken"
    )

    _every_read_before_the_send_fails(sandbox)
    state = advance(ticket.pk).state

    assert _paid(sandbox, order) == [3000], "the agent paid $30 again, unreviewed, past the reads that failed"
    assert state == RunStatus.WAITING_APPROVAL
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.AWAITING_APPROVAL
    request = ApprovalRequest.objects.get(tool_call=call, status=ApprovalStatus.PENDING)
    assert "payment provider" in request.reason and "$30.00" in request.reason, request.reason
    assert not Refund.objects.filter(tool_call=call).exists(), "nothing was sent: no refund row stays behind"

    # Staff approve it knowing: it is paid once.
    approval_services.approval_decide(
        approval_id=request.pk, user=make_staff("blind-read-approver", can_decide=True), approve=True
    )
    advance(ticket.pk)
    assert _paid(sandbox, order) == [3000, 3000]
    _the_ledgers_refunds_are_at_the_provider_approved(sandbox)


def test_a_refund_the_money_held_at_the_provider_leaves_no_room_for_is_refused_when_every_read_before_it_failed(
    sandbox, provider
):  # noqa: ANN001
    customer, order = _paid_in_the_dashboard(sandbox, provider, "P-5602", total=8000, refunded=6000)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $30 of order P-5602, it arrived broken"
    )

    _every_read_before_the_send_fails(sandbox)
    advance(ticket.pk)

    assert _paid(sandbox, order) == [6000]
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.FAILED and "$20.00 left to refund" in call.error, call.error
    assert not Refund.objects.filter(tool_call=call).exists()
    assert not ApprovalRequest.objects.filter(tool_call=call).exists()


def test_an_approved_refund_goes_back_to_staff_when_every_read_before_it_failed_and_its_card_read_nothing(
    sandbox, provider
):  # noqa: ANN001
    customer, order = _paid_in_the_dashboard(sandbox, provider, "P-5603", total=30000, refunded=3000)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $250 of order P-5603, it arrived broken"
    )
    # The card's read fails too: it says the provider could not be read.
    sandbox.fault("error_before_commit", method="GET", path="/v1/refunds", count=1)
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL  # above the $200.00 threshold
    request = ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)
    approval_services.approval_decide(
        approval_id=request.pk, user=make_staff("blind-card-approver", can_decide=True), approve=True
    )

    _every_read_before_the_send_fails(sandbox)
    state = advance(ticket.pk).state

    assert _paid(sandbox, order) == [3000], "paid on an approval whose card never showed the $30.00"
    assert state == RunStatus.WAITING_APPROVAL
    again = ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)
    assert "not sent after the approval" in again.reason and "$30.00" in again.reason, again.reason
    _the_ledgers_refunds_are_at_the_provider_approved(sandbox)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refund_due_while_the_provider_was_down_is_held_for_staff_after_a_dashboard_refund_meanwhile(
    sandbox, provider, monkeypatch
):  # noqa: ANN001
    """The provider refused connections when the refund was due: it stays submitted under its key, to be
    tried again when the provider is back. Meanwhile a person refunded the customer in the provider's
    dashboard (the customer waited on an outage). When the agent tries again, the payment's refunds read
    with the look-up under its key show that money: the refund is not sent again on its own, but put to
    staff; nothing was under its key, so it is failed unseen (asked about again while a try may land)."""
    customer = make_customer()
    order = make_order(customer, number="P-5604", total_cents=8000)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $30 of order P-5604, it arrived broken"
    )
    down = PaymentProvider(api_base=f"http://127.0.0.1:{_closed_port()}", timeout_seconds=1)
    monkeypatch.setattr(refund_module, "_provider", down)
    assert advance(ticket.pk).state == "retry"  # an outage: the run tries again after its backoff
    (refund,) = Refund.objects.filter(ticket=ticket)
    assert refund.status == RefundStatus.SUBMITTED and _paid(sandbox, order) == []

    provider.create_refund(  # a person, in the provider's dashboard, during the outage
        payment_reference=order.payment_reference,
        amount_cents=3000,
        currency="usd",
        idempotency_key=f"dashboard-refund-{uuid.uuid4()}",
        metadata={},
    )
    monkeypatch.setattr(refund_module, "_provider", None)  # the provider is back
    retry_time_comes(ticket.pk)
    state = advance(ticket.pk).state

    assert _paid(sandbox, order) == [3000], "the agent paid $30 again, unreviewed, after the outage"
    assert state == RunStatus.WAITING_APPROVAL
    request = ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)
    assert "payment provider" in request.reason and "$30.00" in request.reason, request.reason
    refund.refresh_from_db()
    assert refund.status == RefundStatus.FAILED and refund.provider_refund_id is None and refund.escalated_at is None
    assert refund_module.refund_recheck_failed(refund=refund) == RefundStatus.FAILED  # nothing landed under its key

    # Staff approve it knowing: it is paid once, under its key.
    approval_services.approval_decide(
        approval_id=request.pk, user=make_staff("outage-approver", can_decide=True), approve=True
    )
    advance(ticket.pk)
    assert _paid(sandbox, order) == [3000, 3000]
    refund.refresh_from_db()
    assert refund.status == RefundStatus.SUCCEEDED
    _the_ledgers_refunds_are_at_the_provider_approved(sandbox)
