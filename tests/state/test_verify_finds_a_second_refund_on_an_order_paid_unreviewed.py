"""``verify_state --database`` fails a database where an order was refunded twice and neither refund was
reviewed by staff. A second refund on one order always asks a staff approval (``agents.refunds``), whatever
its amount: a ledger holding two such refunds, neither approved, was paid twice for one request unreviewed.
Verify judged each refund alone, against its call's flag and its amount, and reported it OK."""

from __future__ import annotations

import pytest

from agents.models import CallStatus, Refund, ToolCall
from approvals.models import ApprovalRequest
from tests.state.conftest import export, verify
from tests.state.test_bundle import ask, customer_with_paid_order

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_verify_fails_a_database_with_a_second_refund_on_one_order_that_nobody_approved(tmp_path, sandbox):
    customer, order = customer_with_paid_order(sandbox, "V-6006", 4999)
    first = ask(customer, "Please refund $30 on order V-6006")
    assert Refund.objects.get(ticket=first).status == "succeeded"  # under the threshold: no approval needed
    path = export(tmp_path, first)
    again = ask(customer, "Please refund $19 on order V-6006")
    call = ToolCall.objects.get(ticket=again, name="issue_refund")
    assert call.status == CallStatus.AWAITING_APPROVAL and call.approval_required  # the second refund is reviewed

    # Someone with the database's password pays it anyway: its request gone, its call reading as
    # needing none, and a refund for it recorded as paid.
    ApprovalRequest.objects.filter(tool_call=call).delete()
    ToolCall.objects.filter(pk=call.pk).update(approval_required=False, status=CallStatus.SUCCEEDED)
    Refund.objects.create(
        ticket=again, order=order, tool_call=call, idempotency_key=call.idempotency_key, amount_cents=1900,
        currency=order.currency, status="succeeded", provider_refund_id="re_unreviewed",
    )  # fmt: skip

    status, report = verify(path, database=True)

    assert status == 1, report
    assert "order V-6006" in report and "second refund" in report, report
