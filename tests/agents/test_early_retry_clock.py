"""A retry that comes before its backoff is over is scheduled again for what is left of the wait.

A failed step commits the end of its wait on the database's clock and its task schedules a retry
with a countdown. Celery turns the countdown into a time on the sending host's clock, and the worker
that receives the message compares it with its own clock: a worker whose clock runs a minute ahead
of the sender's runs the retry at once. The pass found the run still in its backoff (rightly, on the
database's clock) and left it, and nothing was scheduled any more: while beat was down (the case the
retry exists for, tests/agents/test_backoff_without_beat.py) the customer was never answered.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import AgentRun, RunStatus
from agents.runner import advance
from agents.tasks import advance_ticket
from tests.agents.test_backoff_clock import FailsOnceThenAnswers
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)

AHEAD = timedelta(seconds=90)


def receive_retry(monkeypatch: pytest.MonkeyPatch, ticket_id: int, *, due: timedelta) -> tuple[str, list]:
    """Run the ticket's retry as a worker does with a message due ``due`` from now on its clock, and
    return its outcome and the messages it scheduled (ticket, countdown)."""
    sent: list[tuple[list[int], float]] = []
    monkeypatch.setattr(
        advance_ticket, "apply_async", lambda args, countdown=None, **kwargs: sent.append((args, countdown))
    )
    advance_ticket.push_request(args=[ticket_id], eta=(timezone.now() + due).isoformat())
    try:
        state = advance_ticket.run(ticket_id)
    finally:
        advance_ticket.pop_request()
    return state, sent


def test_a_retry_run_early_by_a_worker_whose_clock_runs_ahead_is_scheduled_again_for_the_rest_of_its_wait(
    monkeypatch,
):
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Hello there")
    model = FailsOnceThenAnswers(retry_after=30)  # the server: 503, come back in 30 s
    monkeypatch.setattr("agents.runner.model_of", lambda profile: model)
    first = advance(ticket.pk, model=model)
    assert first.state == "retry" and first.retry_in >= 30

    # Its retry, due in 30 s on the sender's clock, reaches a worker whose clock is 90 s ahead: due now.
    state, sent = receive_retry(monkeypatch, ticket.pk, due=timedelta(seconds=first.retry_in) - AHEAD)

    assert state == "idle" and model.calls == 1, "the model was asked again before the server's Retry-After"
    assert sent, "the retry came early, found the run in its wait, and scheduled nothing: without beat, never answered"
    ((args, countdown),) = sent
    assert args == [ticket.pk] and 20 < countdown <= 30, countdown


def test_a_retry_that_comes_when_its_wait_is_over_carries_the_run_on_and_schedules_nothing(monkeypatch):
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Hello there")
    model = FailsOnceThenAnswers(retry_after=1)
    monkeypatch.setattr("agents.runner.model_of", lambda profile: model)
    assert advance(ticket.pk, model=model).state == "retry"
    time.sleep(1.5)  # the wait is over

    state, sent = receive_retry(monkeypatch, ticket.pk, due=timedelta(0))

    assert state == RunStatus.COMPLETED and sent == []
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED
