"""A decision's note (the customer is told it; it goes into the agent's conversation as the call's
result) is limited to what the card allows, 500 characters, by the server too: a longer one sent
without the browser's limit is a clear 400 and changes nothing."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.models import ReplayPolicy, RunStatus, ToolCall
from agents.runner import advance
from agents.tools import REGISTRY, Tool
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.approvals.conftest import make_staff
from tests.approvals.test_decision_input import AsksForIt
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_rejection_reason_far_over_the_cards_limit_is_a_400_and_changes_nothing(monkeypatch):
    monkeypatch.setitem(
        REGISTRY,
        "gated_x",
        Tool(name="gated_x", description="", parameters={"type": "object"}, replay_policy=ReplayPolicy.KEYED,
             handler=lambda ctx, args: {"ok": True}, needs_approval=lambda ctx, args: "staff approve every one"),
    )  # fmt: skip
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Do it")
    assert advance(ticket.pk, model=AsksForIt()).state == RunStatus.WAITING_APPROVAL
    approval = ApprovalRequest.objects.get(ticket=ticket)
    client = Client()
    client.force_login(make_staff("approver", can_decide=True))
    page = client.get("/staff/approvals/").content.decode()
    assert 'name="note" required maxlength="500"' in page  # what the card itself allows

    response = client.post(f"/staff/approvals/{approval.pk}/decide/", {"decision": "reject", "note": "x" * 200_000})

    approval.refresh_from_db()
    stored = len(ToolCall.objects.get(pk=approval.tool_call_id).approval_note)
    assert (response.status_code, approval.status, stored) == (400, ApprovalStatus.PENDING, 0), (
        f"status {response.status_code}, request {approval.status}, note of {len(approval.note)} chars stored"
    )
