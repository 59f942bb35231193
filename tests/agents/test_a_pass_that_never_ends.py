"""A pass that never ends holds its ticket no longer than the task's time limit.

The heartbeat renewed a lease for as long as its worker's process lived. A pass stuck in the main
thread on something that never returns (a peer that trickles its answer, a lock, a bug) kept the
ticket for ever under a pool that kills nothing at CELERY_TASK_TIME_LIMIT (solo, threads): every
doorbell found the lease held, and the customer waited without anyone on the ticket. Now the
heartbeat leaves a lease held past the time limit to expire: another worker takes the ticket over
and answers, and the stuck pass, should it ever go on, writes nothing.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from agents.llm import ModelResponse, Usage
from agents.runner import advance
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


class NeverReturns:
    """A model whose call does not come back until the test lets it (then too late)."""

    name = "never-returns"

    def __init__(self) -> None:
        self.called = threading.Event()
        self.release = threading.Event()

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        self.called.set()
        self.release.wait(90)
        return ModelResponse(text="An answer from a pass that was stuck.", usage=Usage(5, 5))


class Answers:
    name = "answers"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        return ModelResponse(text="Here is your answer.", usage=Usage(5, 5))


def test_a_pass_stuck_past_the_task_time_limit_lets_another_worker_take_the_ticket(settings):
    settings.AGENT_LEASE_SECONDS = 2
    settings.CELERY_TASK_TIME_LIMIT = 3
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Where is my order?")
    stuck = NeverReturns()
    first: dict = {}

    def stuck_worker() -> None:
        try:
            first["outcome"] = advance(ticket.pk, model=stuck)
        finally:
            connection.close()

    thread = threading.Thread(target=stuck_worker, daemon=True)
    thread.start()
    try:
        assert stuck.called.wait(30)
        # Other workers rung for the ticket (the sweeper, a customer's doorbell), for a while.
        states = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            states.append(advance(ticket.pk, model=Answers()).state)
            if states[-1] != "busy":
                break
            time.sleep(0.5)
    finally:
        stuck.release.set()
        thread.join(60)

    assert states[-1] == "completed", f"the ticket stayed with a pass that never ended: {states[-3:]}"
    replies = list(Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).values_list("body", flat=True))
    assert replies == ["Here is your answer."]
    assert first["outcome"].state == "lease_lost"
