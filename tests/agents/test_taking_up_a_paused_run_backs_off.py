"""A paused run whose taking up failed waits out its backoff, as a failed step does (invariant 14).

A pass that takes up a paused run (telling a customer who wrote during the pause that their message
waits, or resuming the run after the decision) and fails there counts the failure on the run and
backs off. But the backoff was honoured only for a running run: the sweeper, which rings a paused
run with a decision to apply or a customer not yet told, rang it every few seconds during the wait,
and each ring took the run up again and counted one more failure, so a failure of a few seconds
parked the ticket with a person and told the customer so.
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, RunStatus
from agents.runner import advance
from agents.selectors import ticket_has_agent_work, tickets_with_agent_work
from agents.services import PARKED_NOTE, WAITING_NOTE
from agents.tools import REGISTRY
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.conftest import CallsThenReplies, retry_time_comes
from tests.agents.test_never_stuck_outside_the_loop import _gated
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


class FailsWhileDown:
    def __init__(self, real) -> None:  # noqa: ANN001
        self.real = real
        self.down = True
        self.tries = 0

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
        self.tries += 1
        if self.down:
            raise RuntimeError("the database is restarting (taking the paused run up)")
        return self.real(*args, **kwargs)


@pytest.mark.parametrize("where", ["acknowledge", "resume"])
def test_rings_during_the_backoff_of_a_failed_take_up_are_not_counted_and_a_brief_failure_parks_nothing(
    monkeypatch, settings, where
):
    import agents.runner
    import agents.services

    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    monkeypatch.setitem(REGISTRY, "gated_a", _gated("gated_a", lambda ctx, args: {"ok": True}))
    monkeypatch.setattr("agents.runner.retry_delay", lambda failures, retry_after=None: 30.0)  # a wait to be in
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Do it, please")
    model = CallsThenReplies("gated_a")
    assert advance(ticket.pk, model=model).state == RunStatus.WAITING_APPROVAL
    if where == "acknowledge":
        broken = FailsWhileDown(agents.services.acknowledge_while_paused)
        monkeypatch.setattr("agents.services.acknowledge_while_paused", broken)
        ticket_services.message_post(
            ticket=ticket.pk, author_kind=AuthorKind.CUSTOMER, author_user=ticket.customer.user, body="Any news?"
        )
    else:
        broken = FailsWhileDown(agents.runner.decided_calls)
        monkeypatch.setattr("agents.runner.decided_calls", broken)
        approval_services.approval_decide(
            approval_id=ApprovalRequest.objects.get(ticket=ticket).pk, user=make_staff("ok-er", can_decide=True),
            approve=True,
        )  # fmt: skip

    assert advance(ticket.pk, model=model).state == "retry"
    tries = broken.tries
    run = AgentRun.objects.get(ticket=ticket)
    assert run.failures == 1

    # During the wait: the sweeper looks, and rings come again and again.
    assert ticket.pk not in tickets_with_agent_work(), "the sweeper rings a paused run waiting out its backoff"
    for _ in range(4):
        outcome = advance(ticket.pk, model=model)
        assert outcome.state == "idle" and not outcome.more_work, outcome
    run.refresh_from_db()
    assert broken.tries == tries, "a ring during the backoff took the paused run up again"
    assert run.failures == 1 and run.status != RunStatus.FAILED
    ticket.refresh_from_db()
    assert ticket.status != TicketStatus.WITH_HUMAN

    # Mended before the wait is over: the retry takes the run up, and nobody is parked.
    broken.down = False
    retry_time_comes(ticket.pk)
    assert ticket.pk in tickets_with_agent_work() or ticket_has_agent_work(ticket.pk)
    outcome = advance(ticket.pk, model=model)
    run.refresh_from_db()
    if where == "acknowledge":
        assert outcome.state == "idle" and run.status == RunStatus.WAITING_APPROVAL  # told, and still paused
        assert Message.objects.filter(ticket=ticket, body=WAITING_NOTE).count() == 1
    else:
        assert outcome.state == RunStatus.COMPLETED and run.status == RunStatus.COMPLETED
    assert not Message.objects.filter(ticket=ticket, body=PARKED_NOTE).exists()
    ticket.refresh_from_db()
    assert ticket.status != TicketStatus.WITH_HUMAN
