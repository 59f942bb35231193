"""A refund a person stopped is not paid unreviewed when the customer asks again.

README, "A person's decision ends the agent's part": resolving a ticket, or taking it over, ends
the agent's run and closes what it left waiting. The same request asked again (in the reopened
ticket, or after the hand-back) is, like a refund staff rejected, sent to staff for an approval:
no money moves on a request a person stopped until a person agrees to it.
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus, Refund, RefundStatus
from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_gates import confirm, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Ticket

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


@pytest.mark.customer_confirms
@pytest.mark.parametrize("then", ["resolve", "take_over_and_hand_back"])
def test_a_refund_a_person_stopped_is_not_paid_unreviewed_when_asked_again(sandbox, person, then):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "R-1601", 5000, sandbox)
    ask = "Please refund $50.00 on order R-1601"
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=ask)
    advance(ticket.pk)  # the offline model: looks the order up, asks the customer to confirm
    (first,) = refund_calls(ticket)
    assert first.status == CallStatus.AWAITING_CONFIRMATION

    # A person stops it before the customer confirms.
    if then == "resolve":
        ticket_services.ticket_resolve(ticket=ticket, user=person)
    else:
        ticket_services.ticket_take_over(ticket=ticket, user=person)
    advance(ticket.pk)  # the doorbell of the status change: the run ends, the question is closed
    first.refresh_from_db()
    assert first.status == CallStatus.CANCELLED
    assert confirm(ticket, first) == 409
    if then != "resolve":
        ticket_services.ticket_hand_back(ticket=ticket, user=person)

    # The customer asks again, the same words (this reopens a resolved ticket).
    ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body=ask)
    assert Ticket.objects.get(pk=ticket.pk).status in {"open", "waiting_on_customer", "pending_approval"}
    advance(ticket.pk)
    again = refund_calls(ticket)[-1]
    assert again.pk != first.pk and again.approval_required, (again.status, again.approval_reason)
    assert "a person stopped a refund on order R-1601 before" in again.approval_reason
    for call in refund_calls(ticket):
        if call.status == CallStatus.AWAITING_CONFIRMATION and call.confirmation_text:
            confirm(ticket, call)
    advance(ticket.pk)

    # Money moved on the request a person stopped only if a person approved it.
    approved = set(
        ApprovalRequest.objects.filter(ticket=ticket, status=ApprovalStatus.APPROVED).values_list(
            "tool_call_id", flat=True
        )
    )
    unreviewed = [
        r.amount_cents
        for r in Refund.objects.filter(order=order, status=RefundStatus.SUCCEEDED)
        if r.tool_call_id not in approved
    ]
    assert unreviewed == [], (
        f"the refund a person stopped was paid unreviewed after the customer asked again: {unreviewed}, "
        f"provider: {[r['amount'] for r in paid(sandbox, order)]}, "
        f"calls: {[(c.status, c.approval_required, c.approval_reason) for c in refund_calls(ticket)]}"
    )
