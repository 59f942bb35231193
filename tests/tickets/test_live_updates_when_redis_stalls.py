"""Redis (the live updates and the streaming buffer) stalls while the agent answers.

README: live updates are best effort, "the ledger has the truth"; the answer is a Message row in
PostgreSQL. A Redis that stops answering (a stopped or overloaded server, a host cut off without a
reset: connections open, nothing comes back) costs a worker one timeout, not one per streamed word
and timeline event: after a live update fails, the next ones are not tried for
``LIVE_UPDATES_PAUSE_SECONDS``. Counted here as the connections the stalled server is asked for.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from agents import doorbells
from agents.llm import ModelResponse, Usage
from agents.models import AgentRun, RunStatus
from agents.runner import advance
from tests.agents.test_money_path import public_words
from tests.conftest import make_customer, silent_server
from tickets import realtime
from tickets import services as ticket_services
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

ANSWER = "It shipped today, and it should reach you by Friday at the latest."


class Streams:
    name = "streams"

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001
        words = ANSWER.split(" ")
        for n, word in enumerate(words):
            if on_token is not None:
                on_token(word + ("" if n == len(words) - 1 else " "))
        return ModelResponse(text=ANSWER, usage=Usage(10, len(words)))


@pytest.fixture
def ticket() -> Ticket:
    """Opened, and its doorbell rung and marked, while Redis still answers: what is counted is the
    worker's answer."""
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Order", body="Where is my order?")
    return ticket


def forget_redis_clients() -> None:
    """The processes' Redis clients are made again at next use, from REDIS_URL as it is then."""
    realtime._client.client, realtime._writer = None, None
    doorbells._client.client = None
    realtime.live_updates_pause.lift()
    doorbells.marks_pause.lift()


@pytest.fixture
def stalled_redis(ticket, settings) -> Iterator[list[socket.socket]]:  # noqa: ANN001
    """A Redis that accepts connections and never answers; yields the connections it was asked for."""
    with silent_server(backlog=128) as (port, accepted):
        settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"
        forget_redis_clients()
        yield accepted
    # A client left on the stalled server would fail every later test's doorbell marks in this process.
    forget_redis_clients()


def test_an_answer_is_stored_while_redis_stalls_and_the_worker_waits_on_it_once(ticket, stalled_redis):  # noqa: ANN001
    outcome = advance(ticket.pk, model=Streams())

    assert outcome.state == RunStatus.COMPLETED
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED
    assert public_words(ticket) == [ANSWER]
    # Thirteen words streamed and several timeline events, each a live update: one connection was
    # tried, timed out, and paused the rest (without the pause: two tries per update).
    assert len(stalled_redis) == 1, f"{len(stalled_redis)} connections to a Redis that never answers"
