"""How an outage of a dependency is counted (AGENT_OUTAGE_PATIENCE_SECONDS), pass by pass.

A failure that is an outage (the model endpoint unreachable or answering 5xx/429, the database's
connection lost) is not counted among the failures in a row about the ticket: it is tried again
for the patience window from the outage's first failure, its failed steps do not use up the run's
steps, the customer is told once that the answer is late, and past the window the ticket is parked
as before. A bad answer is counted as before. (With real workers: test_outage_patience.py.)
"""

from __future__ import annotations

import pytest
from django.db import OperationalError, connection

from agents.llm import ModelError, ModelOutputInvalid
from agents.models import AgentRun, ModelStep, RunStatus, StepStatus
from agents.offline_model import OfflineDeterministicModel
from agents.outage import is_outage
from agents.runner import advance
from agents.services import DELAYED_NOTE, PARKED_NOTE
from payments.provider import ProviderDeclined, ProviderUnreachable
from tests.agents.conftest import retry_time_comes
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Message, TicketEvent, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


class DownThenUp:
    """The endpoint answers 503 ``down`` times, then as the offline model."""

    name = "down-then-up"

    def __init__(self, down: int) -> None:
        self.down = down
        self.inner = OfflineDeterministicModel(token_delay_ms=0)

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        if self.down:
            self.down -= 1
            raise ModelError("upstream is down", retryable=True, status_code=503)
        return self.inner.complete(messages=messages, tools=tools, on_token=on_token)


def outage_began_seconds_ago(ticket_id: int, seconds: int) -> None:
    """The outage under way started that long ago (moved back rather than waited through)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agents_agentrun SET outage_since = now() - make_interval(secs => %s) "
            "WHERE ticket_id = %s AND outage_since IS NOT NULL",
            [seconds, ticket_id],
        )


def told(ticket_id: int, body: str) -> int:
    return Message.objects.filter(ticket_id=ticket_id, is_public=True, body=body).count()


def test_a_model_outage_is_tried_past_the_failure_limit_told_once_and_answered_when_it_ends(settings):
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    settings.AGENT_MAX_STEPS = 4  # fewer than the tries of the outage: they are not the ticket's steps
    settings.AGENT_OUTAGE_PATIENCE_SECONDS = 600
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hi", body="What is your return policy?")
    model = DownThenUp(down=8)

    states = []
    for _ in range(8):
        outcome = advance(ticket.pk, model=model)
        states.append(outcome.state)
        assert outcome.retry_in is not None and outcome.retry_in <= settings.AGENT_OUTAGE_RETRY_MAX_SECONDS
        retry_time_comes(ticket.pk)
    assert states == ["retry"] * 8
    run = AgentRun.objects.get(ticket=ticket)
    assert run.failures == 0 and run.outage_failures == 8 and run.outage_since is not None
    assert told(ticket.pk, DELAYED_NOTE) == 1  # once, when the outage had lasted the failure limit

    assert advance(ticket.pk, model=model).state == RunStatus.COMPLETED
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WAITING_ON_CUSTOMER
    run.refresh_from_db()
    assert run.outage_since is None and run.outage_failures == 0
    assert ModelStep.objects.filter(run=run, status=StepStatus.FAILED, outage=True).count() == 8
    assert told(ticket.pk, PARKED_NOTE) == 0
    assert Message.objects.filter(ticket=ticket, author_kind="agent").count() == 1


def test_a_model_outage_past_the_patience_parks_the_ticket_with_a_person(settings):
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    settings.AGENT_OUTAGE_PATIENCE_SECONDS = 300
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hi", body="Hello?")
    model = DownThenUp(down=100)

    assert advance(ticket.pk, model=model).state == "retry"
    retry_time_comes(ticket.pk)
    outage_began_seconds_ago(ticket.pk, 299)
    assert advance(ticket.pk, model=model).state == "retry"  # within the window still
    retry_time_comes(ticket.pk)
    outage_began_seconds_ago(ticket.pk, 301)
    assert advance(ticket.pk, model=model).state == "parked"

    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    run = AgentRun.objects.get(ticket=ticket)
    assert run.status == RunStatus.FAILED and "AGENT_OUTAGE_PATIENCE_SECONDS" in run.outcome
    assert told(ticket.pk, PARKED_NOTE) == 1
    note = Message.objects.get(ticket=ticket, is_public=False).body
    assert "upstream is down" in note and "AGENT_OUTAGE_PATIENCE_SECONDS" in note


def test_bad_answers_are_counted_as_before_whatever_the_patience(settings):
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    settings.AGENT_OUTAGE_PATIENCE_SECONDS = 600

    class Poison:
        name = "poison"

        def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN202
            raise ModelOutputInvalid("a tool call with no name")

    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hi", body="Hello?")
    states = []
    for _ in range(3):
        states.append(advance(ticket.pk, model=Poison()).state)
        retry_time_comes(ticket.pk)
    assert states == ["retry", "retry", "parked"]
    assert told(ticket.pk, DELAYED_NOTE) == 0


def test_a_run_that_cannot_start_for_a_database_outage_is_tried_for_the_patience_then_parked(settings, monkeypatch):
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    settings.AGENT_OUTAGE_PATIENCE_SECONDS = 300

    def cut(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr("agents.services.run_start", cut)
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hi", body="Where is my order?")
    states = []
    for _ in range(5):
        states.append(advance(ticket.pk).state)
        retry_time_comes(ticket.pk)
    assert states == ["retry"] * 5
    events = list(
        TicketEvent.objects.filter(ticket=ticket, kind="agent_run_start_failed")
        .order_by("seq")
        .values_list("payload", flat=True)
    )
    assert [e["outage_tries"] for e in events] == [1, 2, 3, 4, 5] and {e["failures"] for e in events} == {0}
    assert len({e["outage_since"] for e in events}) == 1  # one outage, from its first failure

    with connection.cursor() as cursor:  # it began five minutes ago
        cursor.execute(
            "UPDATE tickets_ticketevent SET payload = jsonb_set(payload, '{outage_since}', "
            "to_jsonb(now() - interval '301 seconds')) WHERE ticket_id = %s AND kind = 'agent_run_start_failed'",
            [ticket.pk],
        )
    assert advance(ticket.pk).state == "parked"
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN and told(ticket.pk, PARKED_NOTE) == 1


def test_a_customer_whose_run_cannot_start_for_an_outage_is_told_once_that_the_answer_is_delayed(settings, monkeypatch):
    """As when the outage hits mid-run: told once, when it has lasted the failure limit, then answered."""
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    settings.AGENT_OUTAGE_PATIENCE_SECONDS = 300
    starts = []

    def cut(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        starts.append(1)
        raise OperationalError("server closed the connection unexpectedly")

    with monkeypatch.context() as patched:
        patched.setattr("agents.services.run_start", cut)
        ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hi", body="Where is my order?")
        for tries in range(1, 7):
            assert advance(ticket.pk).state == "retry"
            assert told(ticket.pk, DELAYED_NOTE) == (1 if tries >= 3 else 0), f"after {tries} tries"
            retry_time_comes(ticket.pk)
    assert len(starts) == 6

    assert advance(ticket.pk).state == RunStatus.COMPLETED  # the database back: answered
    assert told(ticket.pk, DELAYED_NOTE) == 1 and told(ticket.pk, PARKED_NOTE) == 0
    assert Message.objects.filter(ticket=ticket, author_kind="agent").count() == 1


@pytest.mark.parametrize(
    ("exc", "outage"),
    [
        (ModelError("x", retryable=True, status_code=503), True),
        (ModelError("x", retryable=True, status_code=429), True),
        (ModelError("x", retryable=True, unreachable=True), True),
        (ModelError("x", retryable=False, status_code=400), False),
        (ModelError("the answer was still streaming after 300 s", retryable=True), False),
        (ModelOutputInvalid("bad"), False),
        (OperationalError("terminating connection due to administrator command"), True),
        (ProviderUnreachable("connection refused"), True),
        (ProviderDeclined("no such charge"), False),
        (ValueError("a bug"), False),
    ],
)
def test_what_counts_as_an_outage(exc, outage):  # noqa: ANN001
    assert is_outage(exc) is outage
    try:
        raise RuntimeError("the tool issue_refund failed") from exc
    except RuntimeError as wrapped:
        assert is_outage(wrapped) is outage  # through what it was raised from
