"""A request paused with no ring reaches a dashboard that is open.

A worker cut off from Redis (or whose PUBLISH was lost) pauses a refund for approval: the request is
in the ledger, but the ring that tells the open dashboards to read their list never reaches the web
server holding them. The person on the dashboard saw nothing until they reloaded it, or until the
request's reminder, hours later, while the customer waited. The dashboard's socket now reads the
pending list's mark after a quiet spell and rings its page when it moved.
"""

from __future__ import annotations

import pytest

from approvals.models import ApprovalRequest
from tests.approvals.test_dashboard import heard_after, paused

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def test_a_request_paused_while_its_ring_was_lost_rings_the_open_dashboard(sandbox, approver, monkeypatch):
    monkeypatch.setattr("support.websocket.QUIET_CHECK_SECONDS", 0.5, raising=False)
    lost: list[tuple[str, dict]] = []
    monkeypatch.setattr("tickets.realtime.publish", lambda group, message: lost.append((group, message)))

    heard = heard_after(approver, lambda: paused(sandbox, "D-7001"))

    assert ApprovalRequest.objects.filter(status="pending").count() == 1
    assert any(message.get("type") == "approvals.changed" for _, message in lost), lost  # its ring was lost
    assert heard[0] == {"type": "ready"}
    assert len(heard) == 2 and heard[1]["type"] == "changed", (
        f"a request paused while its ring was lost never reached the open dashboard: it heard {heard}"
    )
