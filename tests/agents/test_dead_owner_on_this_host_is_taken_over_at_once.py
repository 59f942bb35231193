"""A worker taking over the ticket of an owner that died on its own host does not wait for a heartbeat.

When the owner's advisory lock is gone before its lease expires, the taker cannot tell from the
database alone a worker that died from one whose sessions the database ended while it lives on (the
outage that must not count as a stopped worker, test_database_cuts_are_not_worker_stops.py): it
gives the owner's heartbeat time to take the lock again (three of its rounds, 1.5 s) before it
takes the ticket over. A dead owner has no heartbeat, so every recovery of a killed worker paid that
wait on top of the sweep that found it: recovery's p99 was one sweep interval plus 1.5 s (3.6 to
4.5 s at the defaults, bench.recovery). An owner that ran on the taker's own host (same boot, same
process namespace) is known dead from its process: gone, or another process under its pid. Then
there is nothing to wait for; an owner alive on this host, or on another host, is still waited for.
"""

from __future__ import annotations

import signal
import threading
import time
import types

import psycopg
import pytest
from django.db import connection

from agents import lease as lease_module
from agents.lease import _Heartbeat, lease_acquire, owner_died_here, worker_identity
from agents.models import TicketLease
from agents.tasks import advance_ticket
from tests.agents.test_crash_recovery import at_rest, open_ticket, replies
from tests.workers import test_database_url as database_url
from tests.workers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]

HEARTBEAT_WAIT = _Heartbeat.CHECK_SECONDS * 3


@pytest.fixture
def waits(monkeypatch):  # noqa: ANN001
    """The sleeps agents.lease makes (recorded, not slept): the take-over's wait for a heartbeat is one."""
    slept: list[float] = []
    clock = types.SimpleNamespace(monotonic=time.monotonic, sleep=slept.append)
    monkeypatch.setattr(lease_module, "time", clock)
    return slept


@pytest.mark.workers
@pytest.mark.timeout(180)
def test_the_ticket_of_a_worker_killed_on_this_host_is_taken_over_without_waiting_for_its_heartbeat(cluster, waits):
    ticket = open_ticket("Where is my order A-8240?", "A-8240")
    doomed = cluster.worker(faults="after_step_stored", AGENT_LEASE_SECONDS="60")
    cluster.beat()  # a doorbell lost is rung again; after the kill no worker of this test is left to take it
    doomed.wait_dead(timeout=60)
    assert doomed.popen.returncode == -signal.SIGKILL, doomed.log()
    dead = TicketLease.objects.get(ticket=ticket)
    assert dead.owner and dead.session_locked

    taken = lease_acquire(ticket_id=ticket.pk, owner=worker_identity())

    assert taken is not None and taken.took_over_from == dead.owner
    assert [w for w in waits if w >= _Heartbeat.CHECK_SECONDS] == [], (
        f"the take-over waited {waits} s for the heartbeat of a worker known dead on this host"
    )
    taken.release()
    cluster.worker()  # and the turn is finished from the stored step
    advance_ticket.delay(ticket.pk)
    wait_until(lambda: at_rest(ticket), timeout=60, what="the ticket answered", cluster=cluster)
    assert len(replies(ticket)) == 1


def test_an_owner_alive_on_this_host_whose_session_was_cut_is_still_given_its_heartbeats_time(waits):
    ticket = open_ticket("Where is my order A-8241?", "A-8241")
    held: list[object] = []

    def take() -> None:  # a pass of this (living) process, on a session of its own
        held.append(lease_acquire(ticket_id=ticket.pk, owner=worker_identity()))

    thread = threading.Thread(target=take)
    thread.start()
    thread.join()
    (alive,) = held
    assert alive is not None and alive.locked
    with psycopg.connect(database_url(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [alive.session_pid])
    wait_until(lambda: _lock_gone(ticket.pk), timeout=10, what="the cut session's lock to go")

    taken = lease_acquire(ticket_id=ticket.pk, owner="worker-next")

    assert HEARTBEAT_WAIT in waits, "a living owner's ticket was taken over without giving its heartbeat time"
    assert taken is not None  # no heartbeat ran here to take the lock again: taken after the wait
    taken.release()
    connection.close()


def _lock_gone(ticket_id: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = %s AND objid::bigint = %s AND objsubid = 1)",
            [lease_module.LOCK_NAMESPACE, ticket_id & 0xFFFFFFFF],
        )
        return bool(cursor.fetchone()[0])


def test_an_owner_is_known_dead_only_when_its_process_on_this_host_is_gone():
    here = worker_identity()
    host, pid, pass_id, place, start = here.rsplit(":", 4)
    assert not owner_died_here(here)  # this very process
    assert owner_died_here(f"{host}:{pid}:{pass_id}:{place}:{int(start) + 1}")  # its pid, now another process
    assert owner_died_here(f"{host}:{2**22 + 7}:{pass_id}:{place}:{start}")  # no such process
    assert not owner_died_here(f"{host}-elsewhere:{2**22 + 7}:{pass_id}:{place}:{start}")  # another host
    assert not owner_died_here(f"{host}:{2**22 + 7}:{pass_id}:another-boot:{start}")  # another boot or namespace
    assert not owner_died_here(f"{host}:{2**22 + 7}:{pass_id}")  # named before owners said where they ran
    assert not owner_died_here("worker-a")
