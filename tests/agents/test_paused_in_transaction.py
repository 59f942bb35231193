"""A worker paused (SIGSTOP, a long GC, a frozen VM) inside one of its fenced transactions does not block
the workers rung for its ticket forever.

Lease.guard's fence is an UPDATE of the lease row; when the transaction was already open (a step
whose rows were not all held), the fence is sent and COMMIT follows in another round trip. A worker
stopped between the two keeps its connection alive (the kernel answers TCP keepalives for a stopped
process), its transaction open and the lease row locked, indefinitely. Its lease expires (no
heartbeat), the sweeper rings the ticket every few seconds, and every worker that answers a ring
blocks in lease_acquire's INSERT .. ON CONFLICT DO UPDATE behind that row lock, with no lock
timeout and no idle-in-transaction timeout: the ticket was stuck, and so, one ring at a time, was
every worker of the fleet. Every connection now carries idle_in_transaction_session_timeout
(DB_IDLE_IN_TRANSACTION_TIMEOUT_MS): the server ends the paused session, its locks go, and the
worker rung next takes the ticket over.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, connections
from django.utils import timezone

from agents.lease import lease_acquire, lock_key
from agents.models import TicketLease
from agents.selectors import tickets_with_agent_work
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_owner_paused_inside_its_fenced_transaction_does_not_block_takers_forever(settings):
    settings.AGENT_LEASE_SECONDS = 5
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Paused", body="hello?")
    owner = lease_acquire(ticket_id=ticket.pk, owner="worker-a")
    assert owner is not None

    # Worker A's own session (opened as the product opens worker connections): it holds the
    # advisory lock, sends a guarded step's fence, and is stopped before its COMMIT.
    params = connection.get_connection_params()
    assert "idle_in_transaction_session_timeout" in params.get("options", ""), "worker connections carry no limit"
    a_session = psycopg.connect(**params, autocommit=True)
    # The product's limit, shortened for the test (30 s by default): the server ends the open transaction.
    a_session.execute("SET idle_in_transaction_session_timeout = 2000")
    taker: dict[str, object] = {}
    try:
        owner.unlock()
        a_session.execute("SELECT pg_advisory_lock(%s)", [lock_key(ticket.pk)])
        # Its last renewal was a lease ago (it has been stopped since; shortened here, not slept through).
        TicketLease.objects.filter(ticket_id=ticket.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        a_session.execute("BEGIN")
        a_session.execute(
            "UPDATE agents_ticketlease SET expires_at = GREATEST(expires_at, %s) "
            "WHERE ticket_id = %s AND epoch = %s AND owner = %s RETURNING 1",
            [timezone.now() + timedelta(seconds=1), ticket.pk, owner.epoch, owner.owner],
        )
        # SIGSTOP here: no heartbeat, no COMMIT.
        assert tickets_with_agent_work() == [ticket.pk]  # the sweeper rings it, every sweep

        def worker_b() -> None:
            try:
                taker["lease"] = lease_acquire(ticket_id=ticket.pk, owner="worker-b")
            except Exception as exc:  # noqa: BLE001
                taker["error"] = exc
            finally:
                connections.close_all()

        started = time.monotonic()
        thread = threading.Thread(target=worker_b, daemon=True)
        thread.start()
        thread.join(timeout=2 + 15)
        blocked = thread.is_alive()
        waited = time.monotonic() - started
    finally:
        a_session.close()  # SIGCONT / kill: lets worker B go
    thread.join(timeout=30)
    assert not blocked, (
        f"worker-b was still blocked in lease_acquire after {waited:.0f} s behind the paused owner's "
        "open transaction (the lease had expired; the sweeper rings it every sweep)"
    )
