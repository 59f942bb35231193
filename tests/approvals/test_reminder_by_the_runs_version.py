"""Staff are reminded of a waiting request when the version of the run that asked for it says.

A run keeps its agent profile version to the end, the approval policy's reminder included. The sweep
reminded every waiting request by the version active at the time of the sweep: a run paused under a
version that reminds 12 hours before the request expires got its reminder an hour before, once a
version reminding one hour before was made active (or never, with one that reminds 0 hours before).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from agents.models import AgentRun, RunStatus
from agents.profiles import active_profile, profile_new_version
from agents.runner import advance
from approvals import services
from approvals.models import ApprovalRequest
from tests.approvals.test_approvals import refund_ticket

pytestmark = pytest.mark.django_db(transaction=True)


def reminded(ticket) -> int:  # noqa: ANN001
    return ticket.events.filter(kind="approval_reminder").count()


def test_a_waiting_request_is_reminded_by_its_runs_version_not_the_active_one(sandbox):
    v1 = active_profile()
    assert v1.approval_policy["ttl_hours"] == 72 and v1.approval_policy["reminder_before_hours"] == 12
    paused, _ = refund_ticket(sandbox, number="R-1001")
    advance(paused.pk)
    assert AgentRun.objects.get(ticket=paused).status == RunStatus.WAITING_APPROVAL
    v2 = profile_new_version(changes={"approval_policy": {**v1.approval_policy, "reminder_before_hours": 1}}, user=None)
    later, _ = refund_ticket(sandbox, number="R-1002")  # started on v2
    advance(later.pk)
    assert AgentRun.objects.get(ticket=later).profile == v2

    first = ApprovalRequest.objects.get(ticket=paused)
    eleven_hours_before = first.expires_at - timedelta(hours=11)
    services.approvals_expire_due(now=eleven_hours_before)
    assert (reminded(paused), reminded(later)) == (1, 0), "v1 reminds 12 hours before, v2 one hour before"

    second = ApprovalRequest.objects.get(ticket=later)
    services.approvals_expire_due(now=second.expires_at - timedelta(minutes=30))
    assert (reminded(paused), reminded(later)) == (1, 1)
