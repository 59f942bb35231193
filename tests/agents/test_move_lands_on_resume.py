"""A run moved to another profile version between the worker's read of it and its resume.

The worker reads the ticket's active run (with its ``profile_id``) when it takes the lease, then
resumes it (``run_transition`` to running: an UPDATE on the status only) and builds the pass from
that copy (``Pass.reload``: ``profile_of(self.run)``). Staff who move the paused run to the active
version in that window (the move is allowed: the only waiting call needs an approval and has it)
get a row that says "version 2" and a pass that decides approvals by version 1's rules: a refund
the model asks for next is recorded with version 1's rules and paid unreviewed, although version 2
(the one the run is pinned to) reviews every refund. The pass reads the version again once the run
runs (it can no longer be moved then), so version 2's rules decide.
"""

from __future__ import annotations

import json

import pytest

from agents import runner
from agents.llm import ModelResponse, ToolCallRequest
from agents.models import AgentRun
from agents.profiles import active_profile, profile_new_version, run_move_to_active
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_gates import only_the_order_threshold, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


class OneRefundPerStep:
    """Asks for one refund per step, in order, then says it is done."""

    name = "scripted-one-per-step"

    def __init__(self, *wanted: tuple[str, int]) -> None:
        self.wanted = wanted

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        done = sum(1 for m in messages if m["role"] == "tool")
        if done >= len(self.wanted):
            return ModelResponse(text="Done.")
        number, cents = self.wanted[done]
        arguments = json.dumps({"order_number": number, "amount_cents": cents})
        return ModelResponse(text="", tool_calls=[ToolCallRequest(f"c{done}", "issue_refund", arguments)])


@pytest.mark.parametrize("when", ["before_the_read", "after_the_read"])
def test_a_run_moved_as_its_worker_resumes_it_is_judged_by_the_version_it_is_moved_to(sandbox, monkeypatch, when):  # noqa: ANN001
    """``before_the_read`` (the move lands before the worker reads the run) passes today: the control."""
    staff = make_staff("move-racer", can_decide=True)
    customer = make_customer()
    only_the_order_threshold()
    large = order_for(customer, "MV-1001", 50000, sandbox)
    small = order_for(customer, "MV-1002", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund both")
    model = OneRefundPerStep(("MV-1001", 30000), ("MV-1002", 5000))
    advance(ticket.pk, model=model)
    (first,) = refund_calls(ticket)
    run = AgentRun.objects.get(ticket=ticket)
    v1 = run.profile.version

    # Version 2: every refund is reviewed by staff.
    tools = [{**t, "requires_approval": t["requires_approval"] or t["name"] == "issue_refund"}
             for t in active_profile().tools]  # fmt: skip
    profile_new_version(changes={"tools": tools}, user=staff, note="every refund reviewed from now on")
    card = ApprovalRequest.objects.get(tool_call=first)
    approval_services.approval_decide(approval_id=card.pk, user=staff, approve=True)

    # Staff move the paused run to version 2 just after the worker read it, before it resumes it.
    real = runner.decided_calls
    moved = []

    def move_in_the_window(**kwargs):  # noqa: ANN003, ANN202
        if not moved:
            moved.append(run_move_to_active(run=AgentRun.objects.get(pk=run.pk), user=staff))
        return real(**kwargs) if kwargs.get("run") is not None else None

    if when == "before_the_read":
        move_in_the_window(run=None)
    monkeypatch.setattr(runner, "decided_calls", move_in_the_window)
    advance(ticket.pk, model=model)

    assert moved == [True]
    run.refresh_from_db()
    assert run.profile.version == v1 + 1  # the run is on version 2: every refund reviewed
    assert [r["amount"] for r in paid(sandbox, large)] == [30000]  # approved
    second = refund_calls(ticket)[1]
    assert paid(sandbox, small) == [], (
        f"a refund recorded on a run pinned to version {v1 + 1} (every refund reviewed) was judged by version "
        f"{v1}'s rules and paid unreviewed (approval_required={second.approval_required})"
    )
