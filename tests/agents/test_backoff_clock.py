"""A failed step's backoff is timed on the database's clock, not each worker's.

The wait after a failed step (``AgentRun.retry_not_before``) was written with the failing worker's
clock and compared with the clock of whichever worker or sweeper read it. On many hosts, with one
clock 90 s off (as tests/agents/test_lease_clock.py), a worker whose clock ran ahead left the run
waiting 90 s past the end of its backoff, the customer unanswered; one whose clock ran behind (or a
sweeper whose clock ran ahead) ended the wait at once, asking the model again whatever Retry-After
the server had asked for. The backoff is now written and read on the database's clock, as the lease.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.llm import ModelError
from agents.models import AgentRun, RunStatus
from agents.offline_model import OfflineDeterministicModel
from agents.runner import advance
from agents.selectors import tickets_with_agent_work
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)

SKEW = timedelta(seconds=90)


class FailsOnceThenAnswers:
    """A 503 (with the server's Retry-After, if given) on the first request, then the offline model."""

    name = "fails-once"

    def __init__(self, retry_after: float | None = None) -> None:
        self.inner, self.calls, self.retry_after = OfflineDeterministicModel(), 0, retry_after

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        self.calls += 1
        if self.calls == 1:
            raise ModelError("server error", retryable=True, status_code=503, retry_after=self.retry_after)
        return self.inner.complete(messages=messages, tools=tools, on_token=on_token)


def on_a_host_whose_clock_is_off(monkeypatch: pytest.MonkeyPatch, offset: timedelta):  # noqa: ANN201
    """Run what follows on a host whose clock is ``offset`` from the database's; returns the undo."""
    real = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real() + offset)
    return lambda: monkeypatch.setattr(timezone, "now", real)


def test_a_backoff_set_by_a_worker_whose_clock_runs_ahead_ends_when_it_is_over(monkeypatch):
    monkeypatch.setattr("agents.runner.retry_delay", lambda failures, retry_after=None: 0.5)
    # A 503 is an outage of the endpoint: waited out with its own backoff, here as short.
    monkeypatch.setattr("agents.runner.outage_delay", lambda tries, retry_after=None: 0.5)
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Hello there")
    model = FailsOnceThenAnswers()

    back = on_a_host_whose_clock_is_off(monkeypatch, SKEW)
    assert advance(ticket.pk, model=model).state == "retry"
    back()
    time.sleep(0.7)  # the 0.5 s backoff is over

    assert ticket.pk in tickets_with_agent_work(), "the sweeper leaves the run waiting 90 s past its backoff"
    assert advance(ticket.pk, model=model).state == RunStatus.COMPLETED


@pytest.mark.parametrize(
    ("writer", "reader"),
    [(-SKEW, timedelta(0)), (timedelta(0), SKEW)],
    ids=["written_by_a_worker_behind", "read_by_a_sweeper_ahead"],
)
def test_a_backoff_honours_the_servers_retry_after_whatever_the_hosts_clocks(monkeypatch, writer, reader):
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Hello there")
    model = FailsOnceThenAnswers(retry_after=30)  # the server: 503, come back in 30 s

    back = on_a_host_whose_clock_is_off(monkeypatch, writer)
    first = advance(ticket.pk, model=model)
    back()
    assert first.state == "retry" and first.retry_in >= 30

    # A moment later, on another host: the wait the server asked for is not over.
    back = on_a_host_whose_clock_is_off(monkeypatch, reader)
    rung = ticket.pk in tickets_with_agent_work()
    again = advance(ticket.pk, model=model)
    back()

    assert not rung, "the sweeper rang the ticket a moment into a 30 s Retry-After"
    assert again.state == "idle" and model.calls == 1, "the model was asked again before the server's Retry-After"
    run = AgentRun.objects.get(ticket=ticket)
    assert run.status == RunStatus.RUNNING and run.retry_not_before is not None
