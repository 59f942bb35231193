"""A take-over of a ticket whose run waits for staff, handed back before a worker took
the take-over's doorbell, and the doorbell lost (a broker flushed or purged in a deploy).

README: "Taking a ticket over ... ends the agent's run on it at once (the status change rings the
agent; the sweeper catches a lost ring): what it left waiting is closed, its approval cards are
withdrawn from the dashboard". DESIGN.md invariant 2: losing a doorbell may delay work, never lose it.

The hand-back marks the stopped run (``agents.services.runs_note_stopped``, in the hand-back's
transaction), and the sweeper rings it until a pass ends it: its card is withdrawn and nothing
stays pending that staff cannot decide.
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, CallStatus, RunStatus
from agents.runner import advance
from agents.selectors import tickets_with_agent_work
from approvals import services as approval_services
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_money_gates import refund_calls
from tests.agents.test_money_path import order_for
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def test_a_lost_take_over_ring_of_a_paused_run_is_caught_by_the_sweeper_after_a_hand_back(sandbox, person):  # noqa: ANN001
    approver = make_staff("approver", can_decide=True)
    customer = make_customer()
    order_for(customer, "R-2501", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $649.00 on order R-2501"
    )
    advance(ticket.pk)  # above the threshold: waits for staff
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.AWAITING_APPROVAL

    # Workers are restarting; the person takes over and hands back. Both doorbells are lost with the
    # broker's queue (this test runs no worker: nothing takes them).
    ticket_services.ticket_take_over(ticket=ticket, user=person)
    ticket_services.ticket_hand_back(ticket=ticket, user=person)

    approval = ApprovalRequest.objects.get(ticket=ticket)
    with pytest.raises(approval_services.ApprovalClosed):  # staff cannot move it forward
        approval_services.approval_decide(approval_id=approval.pk, user=approver, approve=True)

    # Beat's sweeper runs: does it ring the ticket so the stopped run ends and its card is withdrawn?
    rung = ticket.pk in tickets_with_agent_work()
    if rung:
        advance(ticket.pk)
    run = AgentRun.objects.get(pk=call.run_id)
    approval.refresh_from_db()
    assert rung and run.status != RunStatus.WAITING_APPROVAL and approval.status == ApprovalStatus.WITHDRAWN, (
        "a lost doorbell must only delay work (the sweeper catches a lost ring): after a take-over and "
        f"hand-back the sweeper does not ring the ticket (rung: {rung}); the run stays {run.status}, its "
        f"approval card stays {approval.status} yet cannot be decided, until it expires at "
        f"{approval.expires_at:%Y-%m-%d %H:%M}"
    )
