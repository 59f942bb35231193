"""A Reject sent without a reason on a request a colleague has already decided is told that the
request was decided (409, by whom), not asked for a reason it could never use."""

from __future__ import annotations

import pytest

from approvals import services
from approvals.models import ApprovalStatus
from tests.approvals.conftest import make_staff
from tests.approvals.test_dashboard import paused

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_reject_without_a_reason_on_a_request_decided_elsewhere_says_it_was_decided(sandbox, client, approver):  # noqa: ANN001
    _, approval = paused(sandbox, "Q-1001")
    colleague = make_staff("colleague", can_decide=True)
    services.approval_decide(approval_id=approval.pk, user=colleague, approve=True)
    client.force_login(approver)

    answer = client.post(f"/staff/approvals/{approval.pk}/decide/", {"decision": "reject", "note": ""})

    assert answer.status_code == 409
    page = answer.content.decode()
    assert "This request was already approved by colleague" in page
    assert "Please say why" not in page
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by_id) == (ApprovalStatus.APPROVED, colleague.pk)
