"""A decision on a card whose call no longer waits for it is refused and changes nothing: a card
never says "approved" over a call that carries no approval."""

from __future__ import annotations

import pytest

from agents.models import CallStatus, ToolCall
from approvals import services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.approvals.conftest import make_staff
from tests.state.conftest import paused_ticket

pytestmark = pytest.mark.django_db


def test_approving_a_card_whose_call_no_longer_waits_changes_nothing():
    ticket, _ = paused_ticket()
    card = ApprovalRequest.objects.get(ticket=ticket)
    # The call stopped waiting (its run ended) while the card was still on the dashboard.
    ToolCall.objects.filter(pk=card.tool_call_id).update(status=CallStatus.FAILED)

    with pytest.raises(services.ApprovalClosed, match="no longer waits"):
        services.approval_decide(approval_id=card.pk, user=make_staff("gone-approver", can_decide=True), approve=True)

    card.refresh_from_db()
    assert card.status == ApprovalStatus.PENDING and card.decided_by_id is None
    assert ToolCall.objects.get(pk=card.tool_call_id).approval_decision is None
