"""Who may decide a refund, asked at the moment of the decision, through the dashboard's own form.

- A member of staff who shops under a second login (a customer profile with their own email
  address) is the customer of that ticket: their approval is refused as on their own login's ticket,
  and a colleague's pays it.

Each test reads the payment sandbox's own records (a separate process, over HTTP).
"""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import CallStatus, ToolCall
from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.approvals.conftest import make_staff
from tests.approvals.test_approvals import provider_refunds
from tests.conftest import make_customer, make_order
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def approve_from_the_dashboard(client: Client, approval: ApprovalRequest):  # noqa: ANN201
    return client.post(
        f"/staff/approvals/{approval.pk}/decide/",
        {"decision": "approve", "note": "", "confirm_amount": str(approval.amount_cents)},
    )


def test_an_approver_cannot_approve_a_refund_they_asked_for_under_their_customer_login(sandbox):  # noqa: ANN001
    staff = make_staff("dana", can_decide=True)
    staff.email = "Dana.Reyes@example.test"
    staff.save(update_fields=["email"])
    shopper = make_customer("dana-shops")  # the same person's customer login, under her own address
    shopper.email = "dana.reyes@example.test"
    shopper.save(update_fields=["email"])
    order = make_order(shopper, total_cents=64900, number="Q-2301")
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    ticket, _ = ticket_services.ticket_open(
        customer=shopper, subject="Refund", body="Please refund my order Q-2301, it stopped working"
    )
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    assert approval.status == ApprovalStatus.PENDING and approval.amount_cents == 64900

    client = Client()
    client.force_login(staff)
    page = client.get("/staff/approvals/").content.decode()
    response = approve_from_the_dashboard(client, approval)
    advance(ticket.pk)

    assert provider_refunds(sandbox, order) == [], "she approved her own $649.00 refund"
    assert ToolCall.objects.get(ticket=ticket, name="issue_refund").status != CallStatus.SUCCEEDED
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert response.status_code == 403
    assert "This request is on your own ticket: a colleague decides it." in response.content.decode()
    assert f'action="/staff/approvals/{approval.pk}/decide/"' not in page

    colleague = Client()
    colleague.force_login(make_staff("colleague", can_decide=True))
    assert approve_from_the_dashboard(colleague, approval).status_code == 302
    advance(ticket.pk)
    assert [r["amount"] for r in provider_refunds(sandbox, order)] == [64900]
