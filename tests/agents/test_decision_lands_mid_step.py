"""A staff decision that lands while the run is busy with the call before it stands.

Step with two refunds: the first needs only the customer's Confirm, the second needs staff
(its request is recorded with the intent, the card is on the dashboard). The customer confirms
the first; while the worker is paying it (a provider round trip), staff reject the second card.
The worker then reaches the second call with the copy it read before paying the first (decision:
none). It used to pause on it again, clearing the recorded rejection and filing a fresh pending
card, which another member of staff approved: the refund staff rejected was paid. The pause now
writes only on the call as it was read (``calls.DecisionLanded``), and the decision is applied.
"""

from __future__ import annotations

import pytest

from agents import refunds as refund_module
from agents.models import ApprovalDecision, CallStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_gates import Refunds, confirm, only_the_order_threshold, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.mark.customer_confirms
def test_a_rejection_landing_while_the_call_before_it_pays_is_not_erased(sandbox, monkeypatch):  # noqa: ANN001
    first_staff = make_staff("review-rejecter", can_decide=True)
    second_staff = make_staff("review-approver", can_decide=True)
    customer = make_customer()
    only_the_order_threshold()
    small = order_for(customer, "RV-1001", 5000, sandbox)
    large = order_for(customer, "RV-1002", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund both")
    model = Refunds(("RV-1001", 2000), ("RV-1002", 30000))
    advance(ticket.pk, model=model)
    first, second = refund_calls(ticket)
    assert first.status == CallStatus.AWAITING_CONFIRMATION
    assert second.status == CallStatus.AWAITING_APPROVAL
    card = ApprovalRequest.objects.get(tool_call=second)

    provider = refund_module.provider()
    create = provider.create_refund
    rejected = []

    def create_while_staff_reject(**kwargs):  # noqa: ANN003, ANN202
        if not rejected:  # staff reject the second card while the first refund is on its way
            approval_services.approval_decide(
                approval_id=card.pk, user=first_staff, approve=False, note="No refund on RV-1002."
            )
            rejected.append(True)
        return create(**kwargs)

    monkeypatch.setattr(provider, "create_refund", create_while_staff_reject)
    assert confirm(ticket, first) == 200
    advance(ticket.pk, model=model)
    assert rejected
    assert [r["amount"] for r in paid(sandbox, small)] == [2000]

    second.refresh_from_db()
    requests = list(ApprovalRequest.objects.filter(tool_call=second).values_list("pk", "status"))
    decision = (second.status, second.approval_decision)

    # What the erased rejection allows: another member of staff approves the fresh card, and it is paid.
    fresh = ApprovalRequest.objects.filter(tool_call=second, status=ApprovalStatus.PENDING).first()
    if fresh is not None:
        approval_services.approval_decide(approval_id=fresh.pk, user=second_staff, approve=True)
        advance(ticket.pk, model=model)
        second.refresh_from_db()
        if second.status == CallStatus.AWAITING_CONFIRMATION:
            assert confirm(ticket, second) == 200
            advance(ticket.pk, model=model)
    assert paid(sandbox, large) == [], "a refund staff rejected was paid"
    assert requests == [(card.pk, ApprovalStatus.REJECTED)], requests  # the rejection stands, on the card decided
    assert decision[0] == CallStatus.REJECTED or decision[1] == ApprovalDecision.REJECTED, decision


@pytest.mark.customer_confirms
def test_an_approval_landing_while_the_call_before_it_pays_is_applied_not_asked_again(sandbox, monkeypatch):  # noqa: ANN001
    approver = make_staff("mid-step-approver", can_decide=True)
    customer = make_customer()
    only_the_order_threshold()
    small = order_for(customer, "RV-2001", 5000, sandbox)
    large = order_for(customer, "RV-2002", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund both")
    model = Refunds(("RV-2001", 2000), ("RV-2002", 30000))
    advance(ticket.pk, model=model)
    first, second = refund_calls(ticket)
    card = ApprovalRequest.objects.get(tool_call=second)

    provider = refund_module.provider()
    create = provider.create_refund

    def create_while_staff_approve(**kwargs):  # noqa: ANN003, ANN202
        if ApprovalRequest.objects.get(pk=card.pk).status == ApprovalStatus.PENDING:
            approval_services.approval_decide(approval_id=card.pk, user=approver, approve=True)
        return create(**kwargs)

    monkeypatch.setattr(provider, "create_refund", create_while_staff_approve)
    assert confirm(ticket, first) == 200
    advance(ticket.pk, model=model)

    second.refresh_from_db()
    # The approval stands on the card staff decided; the customer is asked to confirm the amount next.
    assert list(ApprovalRequest.objects.filter(tool_call=second).values_list("pk", "status")) == [
        (card.pk, ApprovalStatus.APPROVED)
    ]
    assert second.status == CallStatus.AWAITING_CONFIRMATION
    assert confirm(ticket, second) == 200
    advance(ticket.pk, model=model)
    assert [r["amount"] for r in paid(sandbox, small)] == [2000]
    assert [r["amount"] for r in paid(sandbox, large)] == [30000]
