"""A failure to start a run is backed off as a failed step is (DESIGN.md, invariant 14).

Starting a run (choosing its profile, taking the customer's messages in) has no run to count a
failure on: it is counted on the ticket's timeline. It was backed off only by the retry the task
scheduled; every other ring in the meantime (the sweeper every few seconds, the doorbell of a
customer who writes again, a worker that starts) tried the start again at once and counted one more
failure, so an outage of a few seconds handed the ticket to a person and told the customer so,
where a failed step waits out its backoff. Now a ring during the wait is not a try: the sweeper
leaves the ticket alone, a doorbell finds nothing to do, and the retry (or the sweeper once the
wait is over) tries again; the ticket is parked only after the same number of counted failures.
"""

from __future__ import annotations

import pytest

from agents.models import AgentRun, RunStatus
from agents.runner import advance
from agents.selectors import backoffs_ending, ticket_has_agent_work, tickets_with_agent_work
from agents.services import PARKED_NOTE
from tests.agents.conftest import retry_time_comes
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketEvent, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)


class Outage:
    """Starting a run fails while ``down`` (the database refusing the messages' lock, a deploy)."""

    def __init__(self) -> None:
        self.down = True
        self.tries = 0

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
        self.tries += 1
        if self.down:
            raise RuntimeError("the run cannot be started: the database is restarting")
        return self.real(*args, **kwargs)


@pytest.fixture
def outage(monkeypatch):  # noqa: ANN001, ANN201
    import agents.services

    broken = Outage()
    broken.real = agents.services.run_start
    monkeypatch.setattr("agents.services.run_start", broken)
    monkeypatch.setattr("agents.runner.retry_delay", lambda failures, retry_after=None: 30.0)  # a wait to be in
    return broken


def counted(ticket_id: int) -> list[dict]:
    return list(
        TicketEvent.objects.filter(ticket_id=ticket_id, kind="agent_run_start_failed")
        .order_by("seq")
        .values_list("payload", flat=True)
    )


def rings_during_the_wait(ticket_id: int, *, rings: int) -> list[str]:
    """The sweeper, the customer's doorbell, a worker starting: rung again and again in the wait."""
    states = []
    for _ in range(rings):
        outcome = advance(ticket_id)
        states.append(outcome.state)
        assert not outcome.more_work, "a ring during the wait rings the ticket again at once"
    return states


def test_rings_during_the_backoff_of_a_failed_start_are_not_counted_and_a_brief_outage_parks_nothing(settings, outage):
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Where is my order?")

    first = advance(ticket.pk)
    assert first.state == "retry" and first.retry_in == 30.0

    # During the wait: the customer writes again (their doorbell), the sweeper looks, rings come.
    ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="Hello? Anyone?")
    assert ticket.pk not in tickets_with_agent_work(), "the sweeper rings a ticket whose start waits out its backoff"
    assert not ticket_has_agent_work(ticket.pk)
    assert rings_during_the_wait(ticket.pk, rings=5) == ["idle"] * 5
    assert outage.tries == 1, "a ring during the backoff tried the start again"
    [failure] = counted(ticket.pk)
    assert failure["failures"] == 1 and failure["retry_in"] == 30.0 and failure["retry_not_before"]
    # A worker that starts while beat is down rings it when the wait ends (agents.ring_when_waits_end).
    [(waiting, left)] = backoffs_ending()
    assert waiting == ticket.pk and 25 < left <= 30
    ticket.refresh_from_db()
    assert ticket.status != TicketStatus.WITH_HUMAN

    # The outage is over before the wait is: the retry starts the run, and it answers both messages.
    outage.down = False
    retry_time_comes(ticket.pk)
    assert ticket.pk in tickets_with_agent_work()
    assert advance(ticket.pk).state == RunStatus.COMPLETED
    ticket.refresh_from_db()
    assert ticket.status != TicketStatus.WITH_HUMAN
    run = AgentRun.objects.get(ticket=ticket)
    customer = list(Message.objects.filter(ticket=ticket, author_kind=AuthorKind.CUSTOMER).values_list("pk", flat=True))
    assert sorted(run.input_message_ids) == sorted(customer)
    assert not Message.objects.filter(ticket=ticket, body=PARKED_NOTE).exists(), "the customer was told of a parking"
    assert ticket.pk not in tickets_with_agent_work()


def test_a_start_that_keeps_failing_is_parked_after_the_same_number_of_backed_off_failures(settings, outage):
    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Where is my order?")

    states = []
    for _ in range(3):
        states.append(advance(ticket.pk).state)
        rings_during_the_wait(ticket.pk, rings=3)  # each wait, rung again and again: none counts
        retry_time_comes(ticket.pk)
    assert states == ["retry", "retry", "parked"]
    assert outage.tries == 3
    assert [c["failures"] for c in counted(ticket.pk)] == [1, 2, 3]
    assert "retry_not_before" not in counted(ticket.pk)[-1]  # parked, not backed off
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN
    assert list(
        Message.objects.filter(ticket=ticket, is_public=True, author_kind=AuthorKind.SYSTEM).values_list(
            "body", flat=True
        )
    ) == [PARKED_NOTE]
    assert ticket.pk not in tickets_with_agent_work()

    # Handed back within what was a wait: a fresh count, no wait left over; the agent answers.
    outage.down = False
    from tests.approvals.conftest import make_staff

    ticket_services.ticket_hand_back(ticket=ticket.pk, user=make_staff("fixer", can_decide=True))
    assert ticket.pk in tickets_with_agent_work()
    assert advance(ticket.pk).state == RunStatus.COMPLETED


def test_a_person_who_had_the_ticket_gives_the_agent_a_fresh_count_of_failed_starts(settings, outage):
    """Two failed starts, then a person takes the ticket over (during the wait) and hands it back: as
    for a run, whose failures a take-over ends with it, the agent starts afresh. Counted on from
    before, the next failed start parked the ticket at once and told the customer so, just after
    the person had given it back; and the wait from before held the start back after the hand-back."""
    from tests.approvals.conftest import make_staff

    settings.AGENT_MAX_CONSECUTIVE_FAILURES = 3
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Where is my order?")
    assert advance(ticket.pk).state == "retry"
    retry_time_comes(ticket.pk)
    assert advance(ticket.pk).state == "retry"  # its wait is not over when the person takes the ticket
    person = make_staff("looker", can_decide=True)
    ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    ticket_services.ticket_hand_back(ticket=ticket.pk, user=person)

    assert ticket.pk in tickets_with_agent_work(), "the wait from before the hand-back holds the ticket back"
    assert advance(ticket.pk).state == "retry"  # the outage goes on: a first failure, not a third
    assert [c["failures"] for c in counted(ticket.pk)] == [1, 2, 1]
    ticket.refresh_from_db()
    assert ticket.status != TicketStatus.WITH_HUMAN
    assert not Message.objects.filter(ticket=ticket, body=PARKED_NOTE).exists()


# --- With a real worker and beat: the sweeper every second, a doorbell during the wait ----------

START_REFUSED = """
CREATE OR REPLACE FUNCTION test_refuse_run_start() RETURNS trigger AS $$
BEGIN RAISE EXCEPTION 'the database is restarting (test outage)'; END $$ LANGUAGE plpgsql;
CREATE TRIGGER test_refuse_run_start BEFORE INSERT ON agents_agentrun
FOR EACH ROW EXECUTE FUNCTION test_refuse_run_start();
"""
START_ALLOWED = (
    "DROP TRIGGER IF EXISTS test_refuse_run_start ON agents_agentrun; DROP FUNCTION IF EXISTS test_refuse_run_start();"
)


@pytest.fixture
def start_outage():  # noqa: ANN201
    """The database refuses new runs (a real failure in the worker's run_start) until ``end()``."""
    from django.db import connection

    class Switch:
        def end(self) -> None:
            with connection.cursor() as cursor:
                cursor.execute(START_ALLOWED)

    with connection.cursor() as cursor:
        cursor.execute(START_REFUSED)
    switch = Switch()
    yield switch
    switch.end()


@pytest.mark.workers
@pytest.mark.timeout(180)
def test_a_worker_and_beat_wait_out_each_failed_starts_backoff_and_carry_on_after_the_outage(cluster, start_outage):
    """The outage lasts two failed starts (the limit is three). Beat sweeps every second and the
    customer writes again during the wait: nothing is counted until the wait is over, so the outage
    parks nothing; once it is over, the scheduled retry starts the run, which answers both
    messages. Each counted failure came only after the previous one's wait was over."""
    from datetime import datetime

    from tests.workers import wait_until

    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Where is my order?")
    cluster.worker(AGENT_MAX_CONSECUTIVE_FAILURES="3")
    cluster.beat()

    wait_until(lambda: len(counted(ticket.pk)) >= 2, timeout=60, what="two failed starts", cluster=cluster)
    # In the wait after the second (one to four seconds): the customer writes again, and their
    # doorbell is rung here, in the test, so that it surely comes before the outage ends.
    ticket_services.message_post(ticket=ticket, author_kind=AuthorKind.CUSTOMER, body="Hello? Anyone?")
    during = advance(ticket.pk)
    start_outage.end()
    # Busy if the worker has the ticket that moment (the doorbell of that message, a sweep).
    assert during.state in {"idle", "busy"}, f"a ring during the wait: {during.state}"

    def settled() -> bool:
        ticket.refresh_from_db()
        answered = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).exists()
        return answered or ticket.status == TicketStatus.WITH_HUMAN

    wait_until(settled, timeout=90, what="the ticket answered or parked", cluster=cluster)
    failures = counted(ticket.pk)
    events = list(
        TicketEvent.objects.filter(ticket=ticket, kind="agent_run_start_failed")
        .order_by("seq")
        .values_list("created_at", flat=True)
    )
    ticket.refresh_from_db()
    assert ticket.status != TicketStatus.WITH_HUMAN, f"parked after {len(failures)} failures"
    assert not Message.objects.filter(ticket=ticket, body=PARKED_NOTE).exists()
    # Each failure after the previous one's wait was over (or within the slack of its end).
    for before, at in zip(failures[:-1], events[1:], strict=True):
        ends = datetime.fromisoformat(before["retry_not_before"])
        assert (at - ends).total_seconds() > -1.0, (
            f"failure {before['failures'] + 1} counted {(ends - at).total_seconds():.1f} s before the wait ended"
            f" ({len(failures)} failures)\n{cluster.logs()}"
        )
    wait_until(
        lambda: (
            not Message.objects.filter(
                ticket=ticket, author_kind=AuthorKind.CUSTOMER, agent_handled_at__isnull=True
            ).exists()
        ),
        timeout=60,
        what="both messages answered",
        cluster=cluster,
    )
    runs = list(AgentRun.objects.filter(ticket=ticket).values_list("status", flat=True))
    assert RunStatus.FAILED not in runs
    assert Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT).count() == len(runs)
