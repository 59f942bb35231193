"""Each step of the loop moves the ticket's event counter on and records the outcome of the call
before it: two updates a step. When neither changes a column that an index of its table holds,
PostgreSQL writes the new row version beside the old one and no index entry at all (a HOT update);
otherwise every index of the table gets a new entry, at every step.

Counted by the server (``pg_stat_user_tables``), not timed.
"""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from django.db import connection

from agents.models import CallStatus, ToolCall
from agents.offline_model import OfflineDeterministicModel
from agents.profiles import active_profile
from agents.runner import advance
from tests.agents.test_database_sessions_cut import END_THE_OTHER_SESSIONS
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import ActorKind, AuthorKind, Ticket, TicketStatus

pytestmark = pytest.mark.django_db(transaction=True)

TABLES = ("tickets_ticket", "agents_toolcall")


def _updates() -> dict[str, tuple[int, int]]:
    """(updates, of which in place) per table, as the server has counted them so far."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = ANY(%s)", [list(TABLES)]
        )
        return {name: (updated, hot) for name, updated, hot in cursor.fetchall()}


def _flush_counters() -> None:
    """This session's counts reach the server's statistics when its next transaction ends."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT 1")


def _vacuumed() -> None:
    """The two tables' pages as a fresh database has them: the rows earlier tests left and their
    teardown deleted are still on the pages until a vacuum, and a page full of them has no room for
    an update in place."""
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM {', '.join(TABLES)}")


def _others() -> list[tuple[str, str, str]]:
    """The other sessions of this database (a worker or a thread's connection an earlier test left):
    what they update is counted by the server with this test's updates."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT application_name, state, left(query, 80) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        return cursor.fetchall()


def _alone() -> None:
    """End the other sessions of this database and wait until they are gone: a session sends the
    counts of its updates to the server's statistics when it ends, or a second after it goes idle."""
    with connection.cursor() as cursor:
        cursor.execute(END_THE_OTHER_SESSIONS)
    until = time.monotonic() + 10
    while _others() and time.monotonic() < until:
        time.sleep(0.1)
    time.sleep(1.1)


def test_a_turns_steps_update_the_ticket_and_its_calls_in_place():
    _vacuumed()
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Bench", body="bench:10")
    active_profile()
    _alone()
    _flush_counters()
    before = _updates()

    began = time.monotonic()
    advance(ticket.pk, model=OfflineDeterministicModel(token_delay_ms=0))
    took = time.monotonic() - began
    _flush_counters()
    after = _updates()
    others = _others()

    assert ToolCall.objects.filter(ticket=ticket, status=CallStatus.SUCCEEDED).count() == 10
    moved = {name: (after[name][0] - before[name][0], after[name][1] - before[name][1]) for name in TABLES}
    ticket_updates, ticket_in_place = moved["tickets_ticket"]
    call_updates, call_in_place = moved["agents_toolcall"]
    seen = f"{moved}; the turn took {took:.2f} s; other sessions at the end: {others}"
    assert ticket_updates >= 11 and call_updates >= 10, seen
    # One update changes the ticket's status (the reply leaves it waiting on the customer): that
    # one gives every index holding the status an entry. The counter's updates of the steps do not,
    # but for the ticket's last change, moved on once it is a second old: by the first step (the
    # ticket was opened more than a second before it), then once a second of the turn (a turn slowed
    # down past a second, on a loaded machine). A call's outcome stays in place too; one may find its
    # page full (the turn's calls fill it).
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WAITING_ON_CUSTOMER
    assert 1 <= ticket_updates - ticket_in_place <= 2 + int(took), seen
    assert call_updates - call_in_place <= 1, seen


def _updated_at(ticket: Ticket):
    return Ticket.objects.values_list("updated_at", flat=True).get(pk=ticket.pk)


def _note(ticket: Ticket, text: str) -> None:
    ticket_services.event_append(
        ticket=ticket.pk, kind="agent_note", actor_kind=ActorKind.AGENT, payload={"body": text}
    )


def _set_updated_at(ticket: Ticket, ago: str) -> datetime:
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE tickets_ticket SET updated_at = now() - interval '{ago}' WHERE id = %s", [ticket.pk])
    return _updated_at(ticket)


def test_the_agents_steps_move_the_tickets_last_change_on_once_it_is_a_second_old():
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body="Where is it?")
    recent = _set_updated_at(ticket, "100 milliseconds")
    _note(ticket, "written within the second")
    assert _updated_at(ticket) == recent

    old = _set_updated_at(ticket, "2 seconds")
    _note(ticket, "written a second later")
    assert _updated_at(ticket) > old


def test_what_a_customer_or_a_person_does_moves_the_tickets_last_change_to_the_instant():
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Order", body="Where is it?")
    recent = _set_updated_at(ticket, "100 milliseconds")
    ticket_services.message_post(
        ticket=ticket, author_kind=AuthorKind.CUSTOMER, author_user=customer.user, body="Hello?"
    )
    assert _updated_at(ticket) > recent

    recent = _set_updated_at(ticket, "100 milliseconds")
    ticket_services.ticket_hand_to_person(ticket=ticket, reason="asked for a person")
    assert _updated_at(ticket) > recent
