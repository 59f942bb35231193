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

from agents.lease import Lease, LeaseLost, lease_acquire
from agents.models import AgentRun
from support import rows
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import ActorKind, Ticket, TicketEvent

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
