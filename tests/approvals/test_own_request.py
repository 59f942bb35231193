"""An approver does not decide a refund on their own ticket: the review is a second person's.

A member of the team who also shops (their user has a customer profile) and may decide approvals
asks the agent for a refund above the threshold. Their own card on the dashboard has no buttons,
a decision they post anyway is refused (403, nothing changed, nothing paid), and a colleague's
approval pays it.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from agents.models import CallStatus, ToolCall
from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.approvals.conftest import make_staff
from tests.approvals.test_approvals import provider_refunds
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_an_approver_cannot_approve_a_refund_on_their_own_ticket(sandbox):  # noqa: ANN001
    employee = make_customer("employee")  # a customer profile ...
    user = employee.user
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    user.user_permissions.add(Permission.objects.get(codename="decide_approval"))  # ... and an approver
    order = make_order(employee, total_cents=64900, number="Q-1302")
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    ticket, _ = ticket_services.ticket_open(
        customer=employee, subject="Refund", body="Please refund my order Q-1302, it stopped working"
    )
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    assert approval.status == ApprovalStatus.PENDING and approval.amount_cents == 64900

    client = Client()
    client.force_login(user)
    response = client.post(
        f"/staff/approvals/{approval.pk}/decide/",
        {"decision": "approve", "note": "", "confirm_amount": str(approval.amount_cents)},
    )
    advance(ticket.pk)

    assert provider_refunds(sandbox, order) == [], "the customer's own approval paid them $649.00"
    assert ToolCall.objects.get(ticket=ticket, name="issue_refund").status != CallStatus.SUCCEEDED
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert response.status_code == 403
    assert "This request is on your own ticket: a colleague decides it." in response.content.decode()
    page = client.get("/staff/approvals/").content.decode()
    assert f'action="/staff/approvals/{approval.pk}/decide/"' not in page

    colleague = make_staff("colleague", can_decide=True)
    other = Client()
    other.force_login(colleague)
    decided = other.post(
        f"/staff/approvals/{approval.pk}/decide/",
        {"decision": "approve", "note": "", "confirm_amount": str(approval.amount_cents)},
    )
    assert decided.status_code == 302
    advance(ticket.pk)
    assert [r["amount"] for r in provider_refunds(sandbox, order)] == [64900]
