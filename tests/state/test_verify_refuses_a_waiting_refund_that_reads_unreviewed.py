"""A bundle whose waiting refund reads as needing no approval, though its rules ask one, is refused.

``verify`` and ``restore`` judged whether a refund needed an approval only once it had reached the
provider, and for a call still to run only whether an approval it reads as having was given. A $450
refund waiting for staff (the threshold: $200), edited to read as one that needs no approval and is
recorded to run (its run running again, its request withdrawn; the edited parts' digests rewritten,
so the checksums hold), passed both; the new deployment's agent then paid it, reviewed by nobody.
"""

from __future__ import annotations

import pytest

from agents.models import CallStatus, Refund, RunStatus
from agents.runner import advance
from tests.state.conftest import export, rewrite_part, verify
from tests.state.test_bundle import customer_with_paid_order, edited_bundle_pays_nothing
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def _unreviewed(rows: list[dict]) -> list[dict]:
    return [
        {**r, "status": CallStatus.STARTED, "approval_required": False, "approval_reason": ""}
        if r["status"] == CallStatus.AWAITING_APPROVAL
        else r
        for r in rows
    ]


def _running(rows: list[dict]) -> list[dict]:
    return [{**r, "status": RunStatus.RUNNING} if r["status"] == RunStatus.WAITING_APPROVAL else r for r in rows]


def _withdrawn(rows: list[dict]) -> list[dict]:
    return [{**r, "status": "withdrawn"} if r["status"] == "pending" else r for r in rows]


def test_a_refund_over_the_threshold_edited_to_run_unreviewed_is_reported_and_not_restored(tmp_path, sandbox):
    customer, _ = customer_with_paid_order(sandbox, "Q-7701", 45000)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order Q-7701")
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL
    path = export(tmp_path, ticket, include_personal_data=True)
    assert verify(path)[0] == 0
    rewrite_part(path, "agents.ToolCall", _unreviewed)
    rewrite_part(path, "agents.AgentRun", _running)
    rewrite_part(path, "approvals.ApprovalRequest", _withdrawn)

    edited_bundle_pays_nothing(
        path,
        ticket,
        refused_for="approval",
        verify_says="no call still to run reads as needing no approval its rules ask",
        edited="$450 refund waiting for staff was edited to run unreviewed",
    )


def test_a_refund_under_the_threshold_recorded_to_run_passes_verify(tmp_path, sandbox):
    customer, _ = customer_with_paid_order(sandbox, "Q-7702", 4999)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order Q-7702")
    advance(ticket.pk)
    assert Refund.objects.get(ticket=ticket).status == "succeeded"
    path = export(tmp_path, ticket, include_personal_data=True)
    status, out = verify(path)
    assert status == 0, out
