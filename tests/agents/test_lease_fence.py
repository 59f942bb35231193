"""The lease's fence when a transaction's one statement is the whole transaction.

A step whose rows are all held reaches the server as one statement, sent on its own
(no BEGIN, no COMMIT). The fence must then fail that statement itself: a worker that
lost its lease leaves nothing behind, whichever way its transaction went out.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents import services as agent_services
from agents.lease import Lease, LeaseLost, lease_acquire
from agents.models import AgentRun, RunStatus
from support import rows
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import ActorKind, Message, Ticket, TicketEvent

pytestmark = pytest.mark.django_db(transaction=True)


class ServerCommands:
    """The BEGINs and COMMITs psycopg sends on Django's connection."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[bytes] = []
        original = psycopg.Connection._exec_command
        recorder = self

        def exec_command(conn: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            text = command if isinstance(command, bytes) else str(command).encode()
            if text.split(b" ")[0] in {b"BEGIN", b"COMMIT"}:
                recorder.sent.append(text.split(b" ")[0])
            return original(conn, command, *args, **kwargs)

        monkeypatch.setattr(psycopg.Connection, "_exec_command", exec_command)


def held_run_and_event(lease: Lease, ticket: Ticket, key: int) -> AgentRun:
    """A row and an event, both held to go out with the fence (the row's key taken before)."""
    run = AgentRun(pk=key, ticket=ticket, input_message_ids=[], model_name="fence-test", epochs=[lease.epoch])
    rows.insert([run])
    ticket_services.event_append(
        ticket=ticket, kind="agent_run_started", actor_kind=ActorKind.AGENT, payload={"run_id": run.pk}
    )
    return run


def taken_over(ticket: Ticket) -> None:
    """Another worker takes the lease over (its epoch moves on), as after an expiry."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agents_ticketlease SET epoch = epoch + 1, owner = 'someone-else' WHERE ticket_id = %s",
            [ticket.pk],
        )


@pytest.fixture
def ticket_and_lease() -> Any:
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Fence", body="hello")
    lease = lease_acquire(ticket_id=ticket.pk, owner="worker-under-test")
    assert lease is not None
    yield ticket, lease, rows.new_key(AgentRun)
    if lease.locked:
        lease.unlock()


def test_a_step_of_held_rows_is_sent_as_one_statement_without_begin_or_commit(ticket_and_lease, monkeypatch):  # noqa: ANN001
    ticket, lease, key = ticket_and_lease
    commands = ServerCommands(monkeypatch)
    events_before = TicketEvent.objects.filter(ticket=ticket).count()

    with lease.guard():
        run = held_run_and_event(lease, ticket, key)

    assert commands.sent == []  # the statement was the whole transaction
    assert AgentRun.objects.filter(pk=run.pk).exists()
    assert TicketEvent.objects.filter(ticket=ticket).count() == events_before + 1


def test_a_lost_lease_leaves_nothing_when_the_statement_is_the_whole_transaction(ticket_and_lease, monkeypatch):  # noqa: ANN001
    ticket, lease, key = ticket_and_lease
    taken_over(ticket)
    commands = ServerCommands(monkeypatch)
    events_before = TicketEvent.objects.filter(ticket=ticket).count()

    with pytest.raises(LeaseLost):
        with lease.guard():
            run = held_run_and_event(lease, ticket, key)

    assert commands.sent == []  # it went out as one statement, and that statement failed whole
    assert not AgentRun.objects.filter(pk=run.pk).exists()
    assert TicketEvent.objects.filter(ticket=ticket).count() == events_before
    assert lease.lost


def test_a_lost_lease_leaves_nothing_when_the_transaction_was_open(ticket_and_lease, monkeypatch):  # noqa: ANN001
    ticket, lease, key = ticket_and_lease
    taken_over(ticket)
    commands = ServerCommands(monkeypatch)
    events_before = TicketEvent.objects.filter(ticket=ticket).count()

    with pytest.raises(LeaseLost):
        with lease.guard():
            Ticket.objects.get(pk=ticket.pk)  # a read first: the transaction is open on the server
            run = held_run_and_event(lease, ticket, key)

    assert commands.sent == [b"BEGIN"]  # and rolled back, not committed
    assert not AgentRun.objects.filter(pk=run.pk).exists()
    assert TicketEvent.objects.filter(ticket=ticket).count() == events_before


def run_of(lease: Lease, ticket: Ticket, key: int) -> AgentRun:
    with lease.guard():
        return held_run_and_event(lease, ticket, key)


def test_a_run_moved_on_goes_out_with_the_step_as_one_statement(ticket_and_lease, monkeypatch):  # noqa: ANN001
    # The answer's run update is held with the step's rows and checked by the statement that
    # carries them (no statement of its own, no BEGIN and no COMMIT).
    ticket, lease, key = ticket_and_lease
    run = run_of(lease, ticket, key)
    commands = ServerCommands(monkeypatch)
    with CaptureQueriesContext(connection) as queries:
        agent_services.run_transition(
            lease=lease, run=run, to_status=RunStatus.COMPLETED, tokens=(1, 2, 0), outcome="replied", nothing_waits=True
        )

    statements = [q["sql"] for q in queries if q["sql"] not in {"BEGIN", "COMMIT"}]  # (Django's log of atomic)
    assert commands.sent == [] and len(statements) == 1, statements
    stored = AgentRun.objects.get(pk=run.pk)
    assert (stored.status, stored.outcome, stored.prompt_tokens, stored.completion_tokens) == (
        RunStatus.COMPLETED, "replied", 1, 2,
    )  # fmt: skip
    assert run.status == RunStatus.COMPLETED
    assert TicketEvent.objects.filter(ticket=ticket, kind="agent_run_completed").count() == 1


def test_a_run_whose_status_changed_elsewhere_is_not_moved(ticket_and_lease):  # noqa: ANN001
    ticket, lease, key = ticket_and_lease
    run = run_of(lease, ticket, key)
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.HANDED_OFF)  # not by this worker
    events_before = TicketEvent.objects.filter(ticket=ticket).count()

    with pytest.raises(ValueError, match=f"run {run.pk} is no longer running: not moved to completed"):
        agent_services.run_transition(
            lease=lease, run=run, to_status=RunStatus.COMPLETED, tokens=(1, 2, 0), nothing_waits=True
        )

    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.HANDED_OFF
    assert run.status == RunStatus.RUNNING  # the run in memory did not move either
    assert TicketEvent.objects.filter(ticket=ticket).count() == events_before
    assert not lease.lost


@pytest.mark.parametrize("open_first", [False, True], ids=["one statement", "transaction open"])
def test_nothing_of_a_transaction_stays_when_its_run_had_changed_elsewhere(ticket_and_lease, open_first):  # noqa: ANN001
    ticket, lease, key = ticket_and_lease
    run = run_of(lease, ticket, key)
    AgentRun.objects.filter(pk=run.pk).update(status=RunStatus.HANDED_OFF)  # not by this worker
    events_before = TicketEvent.objects.filter(ticket=ticket).count()
    other = Message.objects.filter(ticket=ticket).get()

    with pytest.raises(ValueError, match=f"run {run.pk} is no longer running: not moved to completed"):
        with lease.guard():
            if open_first:
                Ticket.objects.get(pk=ticket.pk)
            other.body = "written with the run's move"
            rows.update([other], ["body"])
            agent_services.run_transition(
                lease=lease, run=run, to_status=RunStatus.COMPLETED, tokens=(1, 2, 0), nothing_waits=True
            )

    assert AgentRun.objects.get(pk=run.pk).status == RunStatus.HANDED_OFF
    assert Message.objects.get(pk=other.pk).body == "hello"
    assert TicketEvent.objects.filter(ticket=ticket).count() == events_before
    assert not lease.lost
