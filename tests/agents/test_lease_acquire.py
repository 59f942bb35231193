"""Taking a ticket's lease, with the turn's first reads in the same round trip."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from agents.lease import LOCK_NAMESPACE, lease_acquire, lease_acquire_and_read, lock_key
from agents.models import TicketLease
from agents.runner import advance
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)


def advisory_locks_held() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND pid = pg_backend_pid()",
            [LOCK_NAMESPACE],
        )
        return cursor.fetchone()[0]


def test_the_reads_sent_with_the_lease_see_it_taken():
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Lease", body="hello")
    lease, (row,) = lease_acquire_and_read(
        ticket_id=ticket.pk,
        owner="worker-a",
        then=[("SELECT owner, epoch FROM agents_ticketlease WHERE ticket_id = %s", [ticket.pk])],
    )
    assert lease is not None and row == [("worker-a", lease.epoch)]
    lease.release()


def test_a_ticket_held_by_another_worker_is_busy_and_left_as_it_is():
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Lease", body="hello")
    other = lease_acquire(ticket_id=ticket.pk, owner="worker-a")
    assert other is not None
    # The other worker's own session holds the advisory lock (this one lets go of it).
    settings = connection.get_connection_params()
    with psycopg.connect(**settings, autocommit=True) as elsewhere:
        other.unlock()
        elsewhere.execute("SELECT pg_advisory_lock(%s)", [lock_key(ticket.pk)])
        assert advance(ticket.pk).state == "busy"
        held = TicketLease.objects.get(ticket_id=ticket.pk)
        assert (held.owner, held.epoch) == ("worker-a", other.epoch)
        assert advisory_locks_held() == 0


def test_a_ticket_that_does_not_exist_is_missing_and_leaves_no_lease_and_no_lock():
    assert advance(987_654_321).state == "missing"
    assert lease_acquire(ticket_id=987_654_321, owner="worker-a") is None
    assert not TicketLease.objects.filter(ticket_id=987_654_321).exists()
    assert advisory_locks_held() == 0
