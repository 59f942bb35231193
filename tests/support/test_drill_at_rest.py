"""The drill judges the tickets at rest only when the agent has nothing left to do on them.

A refund above the threshold pauses its run for staff; the drill's staff approve it, and the next
pass carries the run on: the refund, then the answer. Until that pass has run, the customer's message
has been taken in (by the run that paused) and has no answer. The drill called the tickets at rest
as soon as no request was pending and no run was running, so a decision not yet applied (its pass
backing off after the database's connections were dropped, or its doorbell not yet served) was read
as the end: "message ... has no answer" on a ticket the agent answered a few seconds later.
A decision that is never applied is a stuck ticket, and the drill now says so.
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, RunStatus
from agents.runner import advance
from agents.tools import REGISTRY
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from drill.__main__ import _at_rest, check_invariants
from tests.agents.conftest import CallsThenReplies, retry_time_comes
from tests.agents.test_never_stuck_outside_the_loop import _gated
from tests.agents.test_taking_up_a_paused_run_backs_off import FailsWhileDown
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db(transaction=True)


def _violations(ticket_id: int, name: str) -> list[str]:
    [check] = [c for c in check_invariants([ticket_id], []) if c.name == name]
    return check.violations


@pytest.mark.parametrize("taking_up", ["not yet rung", "failed, backing off"])
def test_a_run_whose_approval_is_not_applied_yet_is_not_at_rest(monkeypatch, taking_up):
    import agents.runner

    monkeypatch.setitem(REGISTRY, "gated_a", _gated("gated_a", lambda ctx, args: {"ok": True}))
    monkeypatch.setattr("agents.runner.retry_delay", lambda failures, retry_after=None: 30.0)
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Do it, please")
    model = CallsThenReplies("gated_a", reply="Done, as approved.")
    assert advance(ticket.pk, model=model).state == RunStatus.WAITING_APPROVAL
    broken = FailsWhileDown(agents.runner.decided_calls)
    monkeypatch.setattr("agents.runner.decided_calls", broken)
    approval_services.approval_decide(
        approval_id=ApprovalRequest.objects.get(ticket=ticket).pk, user=make_staff("ok-er", can_decide=True),
        approve=True,
    )  # fmt: skip
    if taking_up == "failed, backing off":
        assert advance(ticket.pk, model=model).state == "retry"
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.WAITING_APPROVAL

    assert not _at_rest([ticket.pk]), "the drill took a decision still to apply for the end"
    assert _violations(ticket.pk, "no ticket stuck"), "a decision never applied is not reported as stuck"

    broken.down = False
    retry_time_comes(ticket.pk)
    assert advance(ticket.pk, model=model).state == RunStatus.COMPLETED
    assert _at_rest([ticket.pk])
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, body="Done, as approved.").exists()
    assert _violations(ticket.pk, "every customer message answered or handed to a person") == []
    assert _violations(ticket.pk, "no ticket stuck") == []


@pytest.mark.parametrize("held", ["for one look", "throughout"])
def test_a_lease_is_stuck_only_when_it_stays_held(monkeypatch, held):
    """After rest, a doorbell may still come (a sweep, a flushed broker's doorbells again) and its pass,
    finding nothing to do, holds the ticket's lease for some milliseconds. The drill read such a
    lease, taken between its rest and its checks, as a ticket stuck: "its lease is still held by
    ..., alive" on two tickets that no worker held a moment later."""
    import psycopg

    import drill.__main__ as drill_main
    from agents.lease import lock_key
    from tests.conftest import conninfo_of_the_test_database

    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Where is it?")
    assert advance(ticket.pk).state == RunStatus.COMPLETED  # answered: the lease was taken and released
    worker = psycopg.connect(conninfo_of_the_test_database(), autocommit=True)
    looks = []

    def pause(seconds: float) -> None:
        looks.append(seconds)
        if held == "for one look":
            worker.execute("SELECT pg_advisory_unlock(%s)", [lock_key(ticket.pk)])

    monkeypatch.setattr(drill_main, "_pause", pause)
    try:
        worker.execute("SELECT pg_advisory_lock(%s)", [lock_key(ticket.pk)])
        violations = _violations(ticket.pk, "no ticket stuck")
    finally:
        worker.close()
    if held == "throughout":
        assert violations == [f"ticket {ticket.pk}: its lease is still held by , alive"]
    else:
        assert violations == [], "a lease held for one look was reported as a stuck ticket"
    assert looks, "the lease was looked at once only"
