"""A refund still waiting to be paid counts against the customer's limit, however long ago it was asked.

The per-customer limit counts the customer's refunds in the policy's rolling window, those paid and
those still to come. A refund still to come (waiting for a staff decision, for the customer's Confirm,
or behind another call) was counted only if it was asked for inside the window: one asked before the
window's start, and waiting since (a request lives for the policy's ttl, 72 hours; a window may be a
day), counted nowhere. The next request of the customer, on another order, was judged as if nothing
else were coming and paid unreviewed; and when the waiting one was paid, both were in the window, over
the limit, with nobody having looked at the second.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F

from agents.models import CallStatus, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalPolicy, ApprovalRequest
from tests.agents.test_money_gates import Refunds, refund_calls, unreviewed_total
from tests.agents.test_money_path import assert_money_invariants, order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def test_a_refund_waiting_for_staff_since_before_the_window_counts_for_the_next_request(sandbox):  # noqa: ANN001
    policy = ApprovalPolicy.current()
    policy.customer_window_days = 1  # at most $200.00 a day per customer, reviewed above it
    policy.save()
    approver = make_staff("window-approver", can_decide=True)
    customer = make_customer()
    big, small = order_for(customer, "WW-1001", 50000, sandbox), order_for(customer, "WW-2002", 30000, sandbox)
    first, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $250 on WW-1001")
    advance(first.pk, model=Refunds(("WW-1001", 25000)))
    (waiting,) = refund_calls(first)
    assert waiting.status == CallStatus.AWAITING_APPROVAL  # above the threshold: staff first
    # Asked 25 hours ago and still waiting for staff (its request lives 72 hours): every time
    # recorded then is moved back by as much.
    back = timedelta(hours=25)
    ToolCall.objects.filter(ticket=first).update(started_at=F("started_at") - back)

    second, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $150 on WW-2002")
    advance(second.pk, model=Refunds(("WW-2002", 15000)))
    (more,) = refund_calls(second)

    assert more.approval_required, f"the second refund went ahead unreviewed ({more.status})"
    assert "refunds to one customer above $200.00 in 1 days" in more.approval_reason
    assert "this customer: $250.00 before this $150.00" in more.approval_reason
    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(ticket=first).pk, user=approver, approve=True
    )
    advance(first.pk, model=Refunds(("WW-1001", 25000)))
    assert [r["amount"] for r in paid(sandbox, big)] == [25000]
    assert paid(sandbox, small) == [] and unreviewed_total(small) == 0
    assert_money_invariants(sandbox, needed_approval={"WW-1001", "WW-2002"})
