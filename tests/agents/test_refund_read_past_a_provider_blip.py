"""Money the payment provider holds outside the ledger holds the refund for staff, also past one failed read.

A person refunded $30.00 of an $80.00 payment in the provider's dashboard; the customer asks the agent for
$30.00 (under every threshold). Just before the refund is first sent, the payment's refunds are read from
the provider, to find money refunded there that the ledger does not count: that refund needs a staff
approval. One read failing (a 500 from the provider, the next request answered) must not let the refund
through unreviewed: the provider answers the look-up under the key a moment later, from the same list.

The provider is the payment sandbox (a separate process, over HTTP); its own records are read.
"""

from __future__ import annotations

import uuid

import pytest

from agents.models import CallStatus, RunStatus, ToolCall
from agents.runner import advance
from approvals.models import ApprovalRequest
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def test_a_refund_the_provider_already_holds_is_held_for_staff_after_one_failed_read(sandbox, provider):  # noqa: ANN001
    customer = make_customer()
    order = make_order(customer, number="P-5501", total_cents=8000)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    provider.create_refund(  # in the provider's dashboard: nothing of it is in the ledger
        payment_reference=order.payment_reference,
        amount_cents=3000,
        currency="usd",
        idempotency_key=f"dashboard-refund-{uuid.uuid4()}",
        metadata={},
    )
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $30 of order P-5501, it arrived broken"
    )

    sandbox.fault("error_before_commit", method="GET", path="/v1/refunds", count=1)  # one read fails
    state = advance(ticket.pk).state

    paid = sorted(r["amount"] for r in sandbox.refunds() if r["payment_intent"] == order.payment_reference)
    assert paid == [3000], "the agent paid $30 again, unreviewed, past one failed read of the provider"
    assert state == RunStatus.WAITING_APPROVAL
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.AWAITING_APPROVAL
    request = ApprovalRequest.objects.get(tool_call=call, status="pending")
    assert "payment provider" in request.reason and "$30.00" in request.reason, request.reason
