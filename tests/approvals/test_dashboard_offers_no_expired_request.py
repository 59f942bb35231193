"""A request past its expiry is not offered for a decision, even before the sweeper marks it expired
(beat runs it every APPROVAL_EXPIRY_SECONDS: a minute by default)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from support.clock import database_now
from tests.approvals.test_approvals import refund_ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_the_dashboard_offers_no_decision_on_a_request_past_its_expiry(sandbox, client, approver):
    ticket, _ = refund_ticket(sandbox, number="X-1001")
    advance(ticket.pk)
    expired = ApprovalRequest.objects.get(ticket=ticket, status=ApprovalStatus.PENDING)
    ApprovalRequest.objects.filter(pk=expired.pk).update(expires_at=database_now() - timedelta(seconds=5))
    live_ticket, _ = refund_ticket(sandbox, number="X-1002")
    advance(live_ticket.pk)
    live = ApprovalRequest.objects.get(ticket=live_ticket, status=ApprovalStatus.PENDING)
    client.force_login(approver)

    for path in ("/staff/approvals/", "/staff/approvals/pending/"):
        page = client.get(path).content.decode()
        assert f'id="approval-{live.pk}"' in page
        assert f'id="approval-{expired.pk}"' not in page, path  # no Approve or Reject on it
        assert f"/staff/approvals/{expired.pk}/decide/" not in page

    # Pressed from a page shown before it expired: refused with the reason, nothing changed.
    response = client.post(f"/staff/approvals/{expired.pk}/decide/", {"decision": "reject", "note": "Not eligible"})
    assert response.status_code == 409
    assert "expired" in response.content.decode()
    expired.refresh_from_db()
    assert expired.status == ApprovalStatus.PENDING and expired.decided_by is None
