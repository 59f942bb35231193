"""A paused run moved to a version with other approval rules keeps the rules its waiting calls were
recorded under, or is not moved.

Whether a call needs a staff approval is decided when its intent is recorded. A call with an effect
that waits to run without an approval (for the customer's Confirm, or behind a call waiting for
staff) was judged by its version's rules: moving its run to a version that reviews more would run
it unreviewed under rules that say it needs review. Such a move is refused, with the reason, and
the run stays on its version; a run with nothing of the kind moves.
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, CallStatus
from agents.profiles import MoveRefused, active_profile, profile_new_version, run_move_to_active
from agents.runner import advance
from tests.agents.test_money_gates import Refunds, confirm, only_the_order_threshold, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def _every_refund_needs_approval(staff) -> None:  # noqa: ANN001
    tools = [{**t, "requires_approval": t["requires_approval"] or t["name"] == "issue_refund"}
             for t in active_profile().tools]  # fmt: skip
    profile_new_version(changes={"tools": tools}, user=staff, note="every refund reviewed from now on")


@pytest.mark.customer_confirms
def test_a_refund_waiting_for_the_customer_is_not_moved_to_a_version_that_reviews_every_refund(
    sandbox,
):  # noqa: ANN001
    staff = make_staff("rules-mover", can_decide=True)
    customer = make_customer()
    order = order_for(customer, "M-1001", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund M-1001")
    model = Refunds(("M-1001", 5000))
    advance(ticket.pk, model=model)
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.AWAITING_CONFIRMATION and not call.approval_required

    _every_refund_needs_approval(staff)
    run = AgentRun.objects.get(ticket=ticket)
    with pytest.raises(MoveRefused, match="stays on version 1: version 2 has other approval rules"):
        run_move_to_active(run=run, user=staff)

    run.refresh_from_db()
    assert run.profile.version == 1
    assert not ticket.events.filter(kind="agent_profile_changed").exists()
    # On its own version's rules, the Confirm pays it: those rules needed no review for it.
    assert confirm(ticket, call) == 200
    advance(ticket.pk, model=model)
    assert [r["amount"] for r in paid(sandbox, order)] == [5000]


def test_a_refund_recorded_behind_a_paused_call_is_not_moved_to_a_version_that_reviews_every_refund(
    sandbox, admin_client
):  # noqa: ANN001
    staff = make_staff("rules-mover-2", can_decide=True)
    only_the_order_threshold()
    customer = make_customer()
    large, small = order_for(customer, "M-2001", 50000, sandbox), order_for(customer, "M-2002", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund both")
    model = Refunds(("M-2001", 30000), ("M-2002", 5000))
    advance(ticket.pk, model=model)
    assert [c.status for c in refund_calls(ticket)] == [CallStatus.AWAITING_APPROVAL, CallStatus.STARTED]

    _every_refund_needs_approval(staff)
    run = AgentRun.objects.get(ticket=ticket)
    with pytest.raises(MoveRefused, match=r"a call \(issue_refund\) recorded under version 1's rules"):
        run_move_to_active(run=run, user=staff)
    run.refresh_from_db()
    assert run.profile.version == 1

    # The admin action says the same, and moves nothing.
    response = admin_client.post(
        "/admin/agents/agentrun/", {"action": "move_runs_to_active", "_selected_action": [str(run.pk)]}, follow=True
    )
    assert "stays on version 1" in response.content.decode()
    run.refresh_from_db()
    assert run.profile.version == 1
    assert paid(sandbox, large) == [] and paid(sandbox, small) == []


def test_a_paused_run_whose_waiting_calls_all_wait_for_staff_moves_to_stricter_rules(sandbox):  # noqa: ANN001
    """Its calls go to staff whatever the rules: nothing runs unreviewed, so the move is made."""
    staff = make_staff("rules-mover-3", can_decide=True)
    customer = make_customer(flagged=True)
    order_for(customer, "M-3001", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund M-3001")
    advance(ticket.pk, model=Refunds(("M-3001", 5000)))
    (call,) = refund_calls(ticket)
    assert call.status == CallStatus.AWAITING_APPROVAL

    _every_refund_needs_approval(staff)
    run = AgentRun.objects.get(ticket=ticket)
    assert run_move_to_active(run=run, user=staff)
    run.refresh_from_db()
    assert run.profile.version == 2
