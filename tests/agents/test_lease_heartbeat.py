"""The lease's heartbeat: one thread per process renews every lease its worker holds, each every
third of a lease, stops renewing a lease once it is given up, and marks a lease taken over as lost."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import connection

from agents.lease import Lease, lease_acquire
from agents.models import TicketLease
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def leases(settings: Any) -> Any:
    settings.AGENT_LEASE_SECONDS = 1  # renewed every 0.33 s
    held: list[Lease] = []

    def take(n: int) -> list[Lease]:
        customer = make_customer()
        for i in range(n):
            ticket, _ = ticket_services.ticket_open(customer=customer, subject=f"Lease {i}", body="hello")
            lease = lease_acquire(ticket_id=ticket.pk, owner=f"worker-{i}")
            assert lease is not None
            held.append(lease)
        return held[-n:]

    yield take
    for lease in held:
        lease.stop_heartbeat()
        if lease.locked:
            lease.unlock()


def expiry(lease: Lease) -> Any:
    return TicketLease.objects.get(ticket_id=lease.ticket_id).expires_at


def test_every_lease_held_is_renewed_while_its_worker_works(leases):
    held = leases(3)
    first = [expiry(lease) for lease in held]
    for lease in held:
        lease.start_heartbeat()
    time.sleep(1.6)  # past every lease's first expiry
    assert all(expiry(lease) > before for lease, before in zip(held, first, strict=True))
    assert not any(lease.lost for lease in held)


def test_a_lease_given_up_is_renewed_no_more(leases):
    kept, stopped = leases(2)
    kept.start_heartbeat()
    stopped.start_heartbeat()
    stopped.stop_heartbeat()
    at_stop = expiry(stopped)
    time.sleep(1.2)
    assert expiry(stopped) == at_stop
    assert expiry(kept) > at_stop


def test_a_lease_taken_over_is_marked_lost_and_no_longer_renewed(leases):
    (lease,) = leases(1)
    lease.start_heartbeat()
    with connection.cursor() as cursor:  # another worker took it over (its epoch moved on)
        cursor.execute(
            "UPDATE agents_ticketlease SET epoch = epoch + 1, owner = 'other' WHERE ticket_id = %s", [lease.ticket_id]
        )
    wait_until(lambda: lease.lost, timeout=3, what="the heartbeat to see the lease lost")
    taken = expiry(lease)
    time.sleep(0.8)
    assert expiry(lease) == taken  # the other worker's lease is not moved on by this one
