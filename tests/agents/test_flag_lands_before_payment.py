"""Staff flag a customer "every refund reviewed" while one of their refunds waits to be paid unreviewed
(behind a call of its step that waits for staff, for hours; or for the customer's Confirm): the
refund is not paid; it waits for a staff approval like one asked for after the flag. The rule is
asked again next to the payment, before the first try (agents.refunds._review_asked_since).
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import Refunds, confirm, only_the_order_threshold, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Customer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def _flag(customer: Customer) -> None:
    """Staff tick "requires refund approval" on the customer in the admin (list_editable: a plain save)."""
    Customer.objects.filter(pk=customer.pk).update(requires_refund_approval=True)


def test_a_refund_waiting_behind_a_card_is_not_paid_unreviewed_after_staff_flag_the_customer(sandbox):  # noqa: ANN001
    approver = make_staff("flag-approver", can_decide=True)
    customer = make_customer()
    only_the_order_threshold()
    large = order_for(customer, "FL-1001", 50000, sandbox)
    small = order_for(customer, "FL-1002", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund both")
    model = Refunds(("FL-1001", 30000), ("FL-1002", 5000))
    advance(ticket.pk, model=model)
    first, second = refund_calls(ticket)
    assert first.status == CallStatus.AWAITING_APPROVAL
    assert second.status == CallStatus.STARTED and not second.approval_required  # recorded to run, unreviewed

    # While the card waits, staff flag the customer: every refund for them is to be reviewed from now on.
    _flag(customer)
    # Staff approve the card they see (the large refund); nobody reviewed the small one.
    card = ApprovalRequest.objects.get(tool_call=first)
    approval_services.approval_decide(approval_id=card.pk, user=approver, approve=True)
    advance(ticket.pk, model=model)

    assert [r["amount"] for r in paid(sandbox, large)] == [30000]
    second.refresh_from_db()
    assert paid(sandbox, small) == [], (
        "a refund of a customer flagged 'every refund reviewed by staff' was paid without a staff approval "
        f"(call {second.status}, approval_required={second.approval_required})"
    )
    assert second.status == CallStatus.AWAITING_APPROVAL
    assert "flagged while this refund waited" in second.approval_reason

    # Staff review it: approved, it is paid, once.
    card = ApprovalRequest.objects.get(tool_call=second)
    approval_services.approval_decide(approval_id=card.pk, user=approver, approve=True)
    advance(ticket.pk, model=model)
    assert [r["amount"] for r in paid(sandbox, small)] == [5000]


@pytest.mark.customer_confirms
def test_a_refund_waiting_for_the_customers_confirm_is_not_paid_unreviewed_after_staff_flag_the_customer(sandbox):  # noqa: ANN001
    customer = make_customer()
    only_the_order_threshold()
    order = order_for(customer, "FL-2001", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund FL-2001")
    model = Refunds(("FL-2001", 3000))
    advance(ticket.pk, model=model)
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.AWAITING_CONFIRMATION and not call.approval_required

    _flag(customer)  # staff flag the customer while the question is on screen
    assert confirm(ticket, call) == 200
    advance(ticket.pk, model=model)

    call.refresh_from_db()
    assert paid(sandbox, order) == [], (
        "a refund of a customer flagged 'every refund reviewed by staff' was paid without a staff approval "
        f"(call {call.status}, approval_required={call.approval_required})"
    )
