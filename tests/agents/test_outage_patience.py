"""An outage of the model endpoint is waited out, not handed to a person (AGENT_OUTAGE_PATIENCE_SECONDS).

With three failures in a row allowed and backoffs of about 1-2 s then 2-4 s, an endpoint that
answered 503 or refused connections for more than a few seconds parked every open ticket with a
person ("something went wrong on our side"), although nothing was wrong with any of them: once the
endpoint was back, nobody but a person answered. A failure that is an outage (the endpoint out of
reach, timing out, 5xx, 429; the database's connection lost) is now tried again with a capped,
jittered backoff for the patience window, the customer told once that the answer is delayed, and
answered once when the endpoint is back; an outage longer than the window parks the ticket as before.
Real worker and beat processes, the model an OpenAI-compatible endpoint on loopback called through
the SDK.
"""

from __future__ import annotations

import time

import pytest

from agents.models import AgentRun, ModelStep, RunStatus, StepStatus
from agents.services import DELAYED_NOTE, PARKED_NOTE
from tests.agents.model_outage import ModelEndpoint
from tests.agents.test_crash_recovery import at_rest, open_ticket, replies
from tests.workers import wait_until
from tickets.models import Message, Ticket, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(300)]


@pytest.fixture
def endpoint(request):  # noqa: ANN001, ANN201
    started = ModelEndpoint(mode=getattr(request, "param", "503")).start()
    started.use_for_new_runs()
    yield started
    started.stop()


def told(ticket: Ticket, body: str) -> int:
    return Message.objects.filter(ticket=ticket, is_public=True, body=body).count()


def parked(ticket: Ticket) -> bool:
    ticket.refresh_from_db()
    return ticket.status == TicketStatus.WITH_HUMAN


def outage_tries(ticket: Ticket) -> int:
    return ModelStep.objects.filter(ticket=ticket, status=StepStatus.FAILED, outage=True).count()


@pytest.mark.parametrize("endpoint", ["503", "refused"], indirect=True)
def test_tickets_open_through_a_model_outage_within_the_patience_are_answered_once_when_it_ends(cluster, endpoint):
    endpoint.go_down()
    tickets = [open_ticket(f"Where is my order A-84{n:02d}?", f"A-84{n:02d}") for n in range(3)]
    cluster.worker(AGENT_OUTAGE_PATIENCE_SECONDS="240", AGENT_OUTAGE_RETRY_MAX_SECONDS="5", **endpoint.worker_env())
    cluster.beat()

    # Until each ticket has failed more tries than the three that parked it (and waited them out).
    wait_until(
        lambda: all(outage_tries(t) > 3 or parked(t) for t in tickets), timeout=150, what="4 tries each",
        cluster=cluster,
    )  # fmt: skip
    time.sleep(5)  # and a little longer, the endpoint still down
    for ticket in tickets:
        assert not parked(ticket), f"#{ticket.pk} parked during the outage\n{cluster.logs()}"
    endpoint.come_back()

    for ticket in tickets:
        wait_until(lambda t=ticket: at_rest(t), timeout=90, what=f"#{ticket.pk} answered", cluster=cluster)
    for n, ticket in enumerate(tickets):
        ticket.refresh_from_db()
        assert ticket.status == TicketStatus.WAITING_ON_CUSTOMER
        [reply] = replies(ticket)
        assert f"A-84{n:02d}" in reply
        assert told(ticket, PARKED_NOTE) == 0
        assert told(ticket, DELAYED_NOTE) == 1  # told once that the answer is late, not once a try
        [run] = AgentRun.objects.filter(ticket=ticket)
        assert run.status == RunStatus.COMPLETED and run.outage_since is None and run.failures == 0
        assert not Message.objects.filter(ticket=ticket, is_public=False).exists()  # no note for a person


def test_a_model_outage_longer_than_the_patience_parks_the_ticket_with_a_person_as_before(cluster, endpoint):
    endpoint.go_down()
    ticket = open_ticket("Where is my order A-8410?", "A-8410")
    cluster.worker(AGENT_OUTAGE_PATIENCE_SECONDS="12", AGENT_OUTAGE_RETRY_MAX_SECONDS="3", **endpoint.worker_env())
    cluster.beat()

    wait_until(lambda: parked(ticket), timeout=120, what="the ticket parked", cluster=cluster)
    endpoint.come_back()
    [run] = AgentRun.objects.filter(ticket=ticket)
    assert run.status == RunStatus.FAILED and "AGENT_OUTAGE_PATIENCE_SECONDS" in run.outcome
    assert outage_tries(ticket) > 3
    assert told(ticket, PARKED_NOTE) == 1 and told(ticket, DELAYED_NOTE) == 1
    note = Message.objects.get(ticket=ticket, is_public=False)
    assert "503" in note.body or "unavailable" in note.body
    # The person has it: the endpoint back, the agent does not answer behind them.
    time.sleep(3)
    assert replies(ticket) == []
