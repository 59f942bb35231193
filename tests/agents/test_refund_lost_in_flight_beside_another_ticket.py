"""A refund whose worker died while the provider's answer was still on its way, and a second refund on
the same order asked in another ticket of the customer meanwhile, on real worker processes.

The first worker sent the refund (the payment sandbox holds its answer for seconds) and was killed with
SIGKILL before any answer came. While nobody knew whether it was paid, the customer asked for the same
amount again in a new ticket. Another worker took both up: the first refund is settled under its key
(paid once, its late answer included), and the second waits for staff whatever the order of the two, as
a second refund on one order, then is paid once when approved.
"""

from __future__ import annotations

import signal

import pytest

from agents.models import CallStatus, Refund, RefundStatus
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import refund_calls
from tests.agents.test_money_path import assert_money_invariants, at_rest, order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(240),
    pytest.mark.workers,
]

ASK = "Please refund $150 on order Z-3001"


def test_a_refund_lost_in_flight_with_its_worker_holds_a_second_ticket_for_staff_and_is_paid_once(sandbox, cluster):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "Z-3001", 30000, sandbox)  # $150 + $150: under the $200 threshold each
    first, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=ASK)
    sandbox.fault("latency:4000")  # the refund is stored seconds after it was asked for; no answer till then
    doomed = cluster.worker()
    wait_until(lambda: not sandbox.faults(), timeout=60, what="the refund to reach the provider", cluster=cluster)
    doomed.signal(signal.SIGKILL)
    doomed.wait_dead(timeout=30)
    (sent,) = Refund.objects.filter(ticket=first)
    assert sent.status == RefundStatus.SUBMITTED  # nobody knows yet whether it was paid

    second, _ = ticket_services.ticket_open(customer=customer, subject="Refund again", body=ASK)
    cluster.worker()
    cluster.beat()
    wait_until(
        lambda: ApprovalRequest.objects.filter(ticket=second).exists() or len(paid(sandbox, order)) > 1,
        timeout=90,
        what="the second ticket's refund to be decided",
        cluster=cluster,
    )
    wait_until(lambda: at_rest(first), timeout=90, what="the first ticket to come to rest", cluster=cluster)

    sent.refresh_from_db()
    assert sent.status == RefundStatus.SUCCEEDED, (sent.status, sent.error)
    assert [r["metadata"]["idempotency_key"] for r in paid(sandbox, order)] == [sent.idempotency_key]
    (asked,) = refund_calls(second)
    assert asked.status == CallStatus.AWAITING_APPROVAL and "second refund on order Z-3001" in asked.approval_reason

    request = ApprovalRequest.objects.get(tool_call=asked)
    approval_services.approval_decide(approval_id=request.pk, user=make_staff("decides", can_decide=True), approve=True)
    wait_until(lambda: len(paid(sandbox, order)) == 2, timeout=60, what="the approved refund", cluster=cluster)
    wait_until(lambda: at_rest(second), timeout=60, what="the second ticket to come to rest", cluster=cluster)
    assert sorted(r["amount"] for r in paid(sandbox, order)) == [15000, 15000]
    assert_money_invariants(sandbox)
