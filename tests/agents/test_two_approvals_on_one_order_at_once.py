"""Two staff approve, at the same moment, two refunds on one order asked in two tickets of the customer,
and two real worker processes carry them out: each fits what the order has left, both together do not.

Each approval is for its own call's exact arguments; neither makes room for the other. The order's row
serialises the two payments across the processes: one is paid, the other is refused with what is left
before anything is sent (the second card said the first was pending), and the provider's refunds are
the ledger's.
"""

from __future__ import annotations

import pytest

from agents.models import FINAL_CALL_STATUSES, CallStatus, RunStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import refund_calls
from tests.agents.test_money_path import assert_money_invariants, at_rest, order_for, paid
from tests.agents.test_money_races_and_edges import at_once
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(240),
    pytest.mark.workers,
]

ASK = "Please refund $250 on order Y-4001"


def test_two_refunds_approved_at_once_on_one_order_are_not_both_paid_beyond_it(sandbox, cluster):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "Y-4001", 30000, sandbox)
    tickets = [ticket_services.ticket_open(customer=customer, subject="Refund", body=ASK)[0] for _ in range(2)]
    for ticket in tickets:
        assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    requests = [ApprovalRequest.objects.get(ticket=ticket) for ticket in tickets]
    assert "already has $250.00 refunded or pending" in requests[1].reason, requests[1].reason
    workers = [cluster.worker(), cluster.worker()]
    for worker in workers:
        wait_until(lambda w=worker: " ready." in w.log(), timeout=60, what="a worker to start", cluster=cluster)

    staff = [make_staff(f"decides-{n}", can_decide=True) for n in range(2)]
    at_once(
        *(
            lambda request=request, user=user: approval_services.approval_decide(
                approval_id=request.pk, user=user, approve=True
            )
            for request, user in zip(requests, staff, strict=True)
        )
    )
    wait_until(
        lambda: all(call.status in FINAL_CALL_STATUSES for ticket in tickets for call in refund_calls(ticket)),
        timeout=90,
        what="both approved refunds to be carried out or refused",
        cluster=cluster,
    )
    for ticket in tickets:
        wait_until(lambda t=ticket: at_rest(t), timeout=90, what="each ticket to come to rest", cluster=cluster)

    assert [r["amount"] for r in paid(sandbox, order)] == [25000]
    calls = [call for ticket in tickets for call in refund_calls(ticket)]
    assert sorted(call.status for call in calls) == [CallStatus.FAILED, CallStatus.SUCCEEDED]
    (refused,) = [call for call in calls if call.status == CallStatus.FAILED]
    assert "$50.00 left to refund" in refused.error, refused.error
    assert_money_invariants(sandbox, needed_approval={"Y-4001"})
