"""A decision's note (the customer is told it; it goes into the agent's conversation as the call's
result) is limited to what the card allows, 500 characters, by the server too: a longer one sent
without the browser's limit is a clear 400 and changes nothing."""

from __future__ import annotations

import pytest

from agents.models import ToolCall
from approvals.models import ApprovalStatus
from tests.approvals.test_decision_input import waiting_for_a_decision

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_rejection_reason_far_over_the_cards_limit_is_a_400_and_changes_nothing(monkeypatch):
    approval, client = waiting_for_a_decision(monkeypatch)
    page = client.get("/staff/approvals/").content.decode()
    assert 'name="note" required maxlength="500"' in page  # what the card itself allows

    response = client.post(f"/staff/approvals/{approval.pk}/decide/", {"decision": "reject", "note": "x" * 200_000})

    approval.refresh_from_db()
    stored = len(ToolCall.objects.get(pk=approval.tool_call_id).approval_note)
    assert (response.status_code, approval.status, stored) == (400, ApprovalStatus.PENDING, 0), (
        f"status {response.status_code}, request {approval.status}, note of {len(approval.note)} chars stored"
    )
