"""A run waiting out a backoff is left alone until it is over, whatever rings in the meantime.

The model said "slow down" (a 429 with Retry-After): the run waits, its retry scheduled. A
customer who writes meanwhile rings the ticket; that ring, and the sweeper, leave the run to its
wait instead of calling the model again at once (which would count failures until the ticket is
parked with a person for nothing). When the wait is over the run answers everything at once.
"""

from __future__ import annotations

import pytest

from agents.llm import ModelError
from agents.models import AgentRun, RunStatus
from agents.offline_model import OfflineDeterministicModel
from agents.runner import advance
from agents.selectors import backoffs_ending, tickets_with_agent_work
from tests.agents.conftest import retry_time_comes
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = pytest.mark.django_db(transaction=True)


class SlowDownFirst:
    """Rate-limited on its first request (Retry-After: 30 s), then the offline model."""

    name = "slow-down-first"

    def __init__(self) -> None:
        self.inner = OfflineDeterministicModel()
        self.calls = 0

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        self.calls += 1
        if self.calls == 1:
            raise ModelError("rate limited", retryable=True, status_code=429, retry_after=30)
        return self.inner.complete(messages=messages, tools=tools, on_token=on_token)


def test_a_customer_writing_during_a_retry_after_wait_does_not_call_the_model_early():
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Hello")
    model = SlowDownFirst()

    first = advance(ticket.pk, model=model)
    assert first.state == "retry" and first.retry_in >= 30
    ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="Anyone there?")

    assert ticket.pk not in tickets_with_agent_work()  # the sweeper leaves it to its wait
    [(waiting, left)] = backoffs_ending()  # a worker that starts rings it when the wait ends
    assert waiting == ticket.pk and 25 < left <= 30
    for _ in range(3):  # the customer's doorbell, rung again and again
        advance(ticket.pk, model=model)
    run = AgentRun.objects.get(ticket=ticket)
    assert model.calls == 1
    # A 429 is the endpoint's outage, counted on it rather than among the failures about the ticket.
    assert run.status == RunStatus.RUNNING and run.failures + run.outage_failures == 1

    retry_time_comes(ticket.pk)  # 30 s on
    assert ticket.pk in tickets_with_agent_work()
    outcome = advance(ticket.pk, model=model)

    assert outcome.state == RunStatus.COMPLETED and model.calls >= 2
    assert not AgentRun.objects.filter(ticket=ticket, status=RunStatus.FAILED).exists()  # never parked
    unanswered = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True)
    assert not unanswered.exists()
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT, client_msg_id__startswith="reply:")
