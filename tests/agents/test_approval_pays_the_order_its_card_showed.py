"""An approval pays the order its card showed, never another the same words name later.

The agent asks for a $300.00 refund on "k-100" (the model's case); the customer's only order of
that number is "K-100", so the card shows K-100 and staff approve a refund on it. Before the run
pays, the shop records another order of the customer numbered "k-100", exactly as the model wrote
it, which the number now names. Nobody approved a refund on that order: nothing is paid on it, and
the model is told the number now names another order (it asks the customer which).

Each test reads the payment sandbox's own records (a separate process, over HTTP).
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus, ToolCall
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import Refunds, only_the_order_threshold
from tests.agents.test_money_path import order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def refund_on_k100_waiting(sandbox):  # noqa: ANN001, ANN201
    """The model asks $300.00 on "k-100"; the customer's only order of that number is K-100, which the
    card shows. Returns (customer, K-100, ticket, the model, the approval request)."""
    only_the_order_threshold()
    customer = make_customer()
    shown = order_for(customer, "K-100", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund k-100")
    model = Refunds(("k-100", 30000))
    advance(ticket.pk, model=model)
    return customer, shown, ticket, model, ApprovalRequest.objects.get(ticket=ticket)


def approve(approval: ApprovalRequest) -> None:
    approval_services.approval_decide(
        approval_id=approval.pk, user=make_staff("k-approver", can_decide=True), approve=True
    )


def test_an_approved_refund_is_not_paid_on_an_order_the_card_did_not_show(sandbox):  # noqa: ANN001
    customer, shown, ticket, model, approval = refund_on_k100_waiting(sandbox)
    assert approval.evidence["order_number"] == "K-100"

    other = order_for(customer, "k-100", 64900, sandbox)  # recorded by the shop while the card waited
    approve(approval)
    advance(ticket.pk, model=model)

    assert paid(sandbox, other) == [], "a refund nobody approved was paid on k-100"
    assert paid(sandbox, shown) == []  # the model is told, and asks the customer which order
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.FAILED
    assert "now names order k-100, not order K-100 on which staff approved this refund" in call.error
