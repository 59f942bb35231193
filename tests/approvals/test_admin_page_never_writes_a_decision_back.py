"""An approval request's page in the admin is read, never saved: a Save pressed there wrote the whole
row back as it was read, so a staff decision made in the moment between (a "no" on the dashboard) was
put back to "pending". A second member of staff then saw the card waiting again and approved it, and
the refund staff had rejected was paid. Decisions are made on the dashboard only (the first one
stands); the admin shows the request.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_save_on_the_requests_admin_page_does_not_undo_a_rejection_made_meanwhile(sandbox, admin_client):  # noqa: ANN001
    first, second = make_staff("rejects-it", can_decide=True), make_staff("approves-later", can_decide=True)
    customer = make_customer()
    order = order_for(customer, "AP-9101", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $300 on AP-9101")
    model = Refunds(("AP-9101", 30000))
    advance(ticket.pk, model=model)
    card = ApprovalRequest.objects.get(ticket=ticket)
    assert card.status == ApprovalStatus.PENDING

    def rejected_on_the_dashboard() -> None:
        try:
            approval_services.approval_decide(approval_id=card.pk, user=first, approve=False, note="Not this one.")
        finally:
            connection.close()

    decided = threading.Event()

    def decision_lands_as_the_page_is_read(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        result = execute(sql, params, many, context)
        if not decided.is_set() and sql.lstrip().upper().startswith("SELECT") and '"approvals_approvalrequest"' in sql:
            decided.set()
            other = threading.Thread(target=rejected_on_the_dashboard)
            other.start()
            other.join(20)
        return result

    with connection.execute_wrapper(decision_lands_as_the_page_is_read):
        admin_client.post(f"/admin/approvals/approvalrequest/{card.pk}/change/", {"_save": "Save"})
    assert decided.is_set()

    card.refresh_from_db()
    assert card.status == ApprovalStatus.REJECTED and card.decided_by_id == first.pk, (card.status, card.decided_by)
    # The card is not offered again: a colleague's Approve is refused and nothing is paid.
    with pytest.raises(approval_services.ApprovalClosed):
        approval_services.approval_decide(approval_id=card.pk, user=second, approve=True)
    advance(ticket.pk, model=model)
    assert paid(sandbox, order) == []


def test_the_requests_admin_page_shows_the_request_without_a_save_button(sandbox, admin_client):  # noqa: ANN001
    customer = make_customer()
    order_for(customer, "AP-9201", 50000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $300 on AP-9201")
    advance(ticket.pk, model=Refunds(("AP-9201", 30000)))
    card = ApprovalRequest.objects.get(ticket=ticket)

    page = admin_client.get(f"/admin/approvals/approvalrequest/{card.pk}/change/")

    assert page.status_code == 200 and "AP-9201" in page.content.decode()
    assert 'name="_save"' not in page.content.decode()
    assert (
        admin_client.post(f"/admin/approvals/approvalrequest/{card.pk}/change/", {"_save": "Save"}).status_code == 403
    )
