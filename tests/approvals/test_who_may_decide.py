"""Who may decide a refund, asked at the moment of the decision, through the dashboard's own form.

- A member of staff who shops under a second login (a customer profile with their own email
  address) is the customer of that ticket: their approval is refused as on their own login's ticket,
  and a colleague's pays it.
- An approver whose authority went between reading the dashboard and pressing Approve (the
  permission taken away, their group's permission taken away, the account deactivated) decides
  nothing: the form they still hold is refused, and nothing is paid.

Each test reads the payment sandbox's own records (a separate process, over HTTP).
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client

from agents.models import CallStatus, ToolCall
from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.approvals.conftest import make_staff
from tests.approvals.test_approvals import provider_refunds, refund_ticket
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


def _take_the_permission(user) -> None:  # noqa: ANN001
    user.user_permissions.remove(Permission.objects.get(codename="decide_approval"))


def _take_the_groups_permission(user) -> None:  # noqa: ANN001
    Group.objects.get(name="approvers").permissions.clear()


def _deactivate(user) -> None:  # noqa: ANN001
    get_user_model().objects.filter(pk=user.pk).update(is_active=False)


@pytest.mark.parametrize("taken", [_take_the_permission, _take_the_groups_permission, _deactivate])
def test_an_approver_whose_authority_went_after_the_page_was_read_pays_nothing(sandbox, taken):  # noqa: ANN001
    ticket, order = refund_ticket(sandbox, number="Q-2401")
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approver = make_staff("leaving", can_decide=taken is not _take_the_groups_permission)
    if taken is _take_the_groups_permission:
        group = Group.objects.create(name="approvers")
        group.permissions.add(Permission.objects.get(codename="decide_approval"))
        approver.groups.add(group)

    client = Client()
    client.force_login(approver)
    assert f'action="/staff/approvals/{approval.pk}/decide/"' in client.get("/staff/approvals/").content.decode()
    taken(approver)
    response = approve_from_the_dashboard(client, approval)
    advance(ticket.pk)

    assert provider_refunds(sandbox, order) == []
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING and approval.decided_by is None
    # Refused, or (deactivated) signed out and led to sign in again: never the dashboard's "Approved".
    assert response.status_code in {302, 403} and response.get("Location", "") != "/staff/approvals/"
