"""A worker killed after the database cut its session is taken over in seconds, not at its lease's expiry.

A dead owner is seen through its session (DESIGN.md, invariant 15): the ticket's advisory lock goes
with it. When the database ends a living worker's session (a failover, a restart), its heartbeat marks
the lease as cut and the worker keeps it as a plain lease until its pass ends
(test_database_cuts_are_not_worker_stops.py). If that worker then died before its pass ended, nothing
held a lock that its death would drop: the ticket waited for the lease to expire (60 s at the
defaults) before another worker carried it on.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

import psycopg
import pytest
from django.db import connection

from agents.lease import lease_acquire, lock_key, ticket_lease_held
from agents.models import TicketLease
from tests.agents.test_crash_recovery import at_rest, replies
from tests.agents.test_database_sessions_cut import END_THE_OTHER_SESSIONS
from tests.conftest import make_customer
from tests.workers import test_database_url as database_url
from tests.workers import wait_until
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)

# The product's defaults (the test cluster's workers take a 2 s lease, which would hide the expiry).
DEFAULTS = {"AGENT_LEASE_SECONDS": "60", "AGENT_SWEEP_SECONDS": "3"}
CUT_SEEN = "the database ended the session of this worker's pass"


@pytest.mark.workers
@pytest.mark.timeout(240)
def test_a_worker_killed_after_its_session_was_cut_is_taken_over_in_seconds(cluster):
    ticket, _ = ticket_services.ticket_open(
        customer=make_customer(), subject="Hours", body="Hello, when are you open, and how long does shipping take?"
    )
    # Streamed slowly: the pass's session sits idle while the answer streams, and is cut then.
    first = cluster.worker(OFFLINE_MODEL_TOKEN_DELAY_MS="400", **DEFAULTS)
    cluster.beat(**DEFAULTS)
    wait_until(
        lambda: TicketLease.objects.filter(ticket=ticket, session_locked=True).exclude(owner="").exists(),
        timeout=60,
        what="the first worker holds the lease",
        cluster=cluster,
    )
    owner = TicketLease.objects.get(ticket=ticket).owner
    time.sleep(0.5)
    with connection.cursor() as cursor:
        cursor.execute(END_THE_OTHER_SESSIONS)
    wait_until(lambda: CUT_SEEN in first.log(), timeout=15, what="the heartbeat saw the cut", cluster=cluster)
    assert not at_rest(ticket), "the answer ended before the worker could be killed mid-pass"

    first.signal(signal.SIGKILL)
    first.wait_dead(10)
    killed_at = time.monotonic()
    cluster.worker(OFFLINE_MODEL_TOKEN_DELAY_MS="0", **DEFAULTS)

    def taken_over() -> bool:
        return TicketLease.objects.filter(ticket=ticket).exclude(owner=owner).exists()

    wait_until(taken_over, timeout=90, what="another worker took the ticket over", cluster=cluster)
    took = time.monotonic() - killed_at
    assert took < 15, f"taken over {took:.0f} s after the worker was killed (the lease's expiry, not its death)"
    wait_until(lambda: at_rest(ticket), timeout=60, what="the ticket answered", cluster=cluster)
    assert len(replies(ticket)) == 1


@pytest.mark.parametrize("end", ["released", "lost"])
def test_the_lock_the_heartbeat_took_again_is_let_go_with_the_lease(end):
    # In-process: the pass's session is cut, the heartbeat holds the ticket's lock on its own session,
    # and the pass's end lets go of it, so the next worker's lease is held by a lock again.
    customer = make_customer()
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Hours", body="hello")
    # Another pass of the same process (a threads pool) keeps the heartbeat's session open throughout.
    other_ticket, _ = ticket_services.ticket_open(customer=customer, subject="Other", body="hello")
    lease = lease_acquire(ticket_id=ticket.pk, owner="worker-cut")
    assert lease is not None and lease.locked
    lease.start_heartbeat()
    with psycopg.connect(database_url(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [lease.session_pid])
    connection.close()  # the pass's connection, ended under it: a new one for what follows
    beside = lease_acquire(ticket_id=other_ticket.pk, owner="worker-beside")
    assert beside is not None
    beside.start_heartbeat()
    try:
        wait_until(lambda: lease.heartbeat_locked, timeout=10, what="the heartbeat took the lock again")
        row = TicketLease.objects.get(ticket=ticket)
        assert (row.session_locked, row.session_cut) == (True, False)
        assert ticket_lease_held(ticket.pk)
        # Held from then on, round after round (the heartbeat's session is not closed under it):
        # another worker does not take the living pass's ticket over.
        for _ in range(4):
            time.sleep(0.6)
            assert lease_acquire(ticket_id=ticket.pk, owner="worker-thief") is None
    finally:
        lease.stop_heartbeat()
        if end == "released":
            lease.release()
        else:
            lease.unlock()
            TicketLease.objects.filter(ticket=ticket).update(owner="")

    try:
        after = lease_acquire(ticket_id=ticket.pk, owner="worker-next")
        assert after is not None
        assert after.locked, "the next worker's lease is held by no lock: its death would be seen at expiry only"
        after.release()
    finally:
        beside.stop_heartbeat()
        beside.release()


def test_the_heartbeat_takes_the_lock_again_once_another_session_lets_go_of_it():
    # A worker taking the ticket over looks at the lock by taking it for a moment: the heartbeat that
    # finds it taken then tries again at its next round, instead of leaving the lease unlocked.
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hours", body="hello")
    lease = lease_acquire(ticket_id=ticket.pk, owner="worker-cut")
    assert lease is not None
    lease.start_heartbeat()
    try:
        with psycopg.connect(database_url(), autocommit=True) as other:
            # Queued for the lock before the pass's session ends, so it is granted the lock as that
            # session goes, before the heartbeat's next round could try for it.
            waiting = threading.Thread(
                target=other.execute, args=("SELECT pg_advisory_lock(%s)", [lock_key(ticket.pk)]), daemon=True
            )
            waiting.start()
            with psycopg.connect(database_url(), autocommit=True) as look:
                wait_until(
                    lambda: look.execute(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                    ).fetchone()[0],
                    timeout=5,
                    what="the other session queued for the lock",
                )
                look.execute("SELECT pg_terminate_backend(%s)", [lease.session_pid])
            waiting.join(5)
            assert not waiting.is_alive(), "the lock was not granted once the pass's session ended"
            connection.close()
            wait_until(lambda: lease.cut, timeout=10, what="the heartbeat saw the cut")
            time.sleep(1.2)
            assert not lease.heartbeat_locked
            other.execute("SELECT pg_advisory_unlock(%s)", [lock_key(ticket.pk)])
            wait_until(lambda: lease.heartbeat_locked, timeout=5, what="the heartbeat took the lock again")
        assert ticket_lease_held(ticket.pk)
    finally:
        lease.stop_heartbeat()
        lease.release()


def test_the_lock_is_held_again_before_the_cut_is_told(caplog):
    # The worker that saw its pass's session cut and died a moment later was taken over at its lease's
    # expiry (62 s on CI), not in seconds: the heartbeat marked the lease cut, said so, and only then
    # took the lock again. A death between the two left a lease held by nothing but its expiry.
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Hours", body="hello")
    lease = lease_acquire(ticket_id=ticket.pk, owner="worker-cut")
    assert lease is not None and lease.locked
    seen: list[tuple[bool, bool, bool]] = []

    class AtTheTelling(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if CUT_SEEN in record.getMessage():
                with psycopg.connect(database_url(), autocommit=True) as look:
                    row = look.execute(
                        "SELECT session_locked, session_cut FROM agents_ticketlease WHERE ticket_id = %s", [ticket.pk]
                    ).fetchone()
                    free = look.execute("SELECT pg_try_advisory_lock(%s)", [lock_key(ticket.pk)]).fetchone()[0]
                    if free:
                        look.execute("SELECT pg_advisory_unlock(%s)", [lock_key(ticket.pk)])
                seen.append((row[0], row[1], not free))

    handler = AtTheTelling()
    logging.getLogger("agents.lease").addHandler(handler)
    lease.start_heartbeat()
    try:
        with psycopg.connect(database_url(), autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [lease.session_pid])
        connection.close()
        wait_until(lambda: seen, timeout=10, what="the heartbeat told of the cut")
        # (session_locked, session_cut, the lock held): a worker killed from here on is seen dead at once.
        assert seen[0] == (True, False, True), f"when the cut was told the lease read {seen[0]}"
        assert lease.heartbeat_locked
    finally:
        logging.getLogger("agents.lease").removeHandler(handler)
        lease.stop_heartbeat()
        lease.release()
