"""Lease expiry is decided on the database's clock, not each worker's.

Workers run on many machines (DESIGN.md, Scale). A live owner, renewing its lease by heartbeat and
holding its session lock, must not be taken over by another worker just because that worker's clock
runs ahead of the owner's (or the owner's runs behind): expiry should be read on one clock, the
database's, as the session lock already is.
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from agents.lease import lease_acquire, lock_key
from agents.models import TicketLease
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = pytest.mark.django_db(transaction=True)

SKEW = timedelta(seconds=90)  # more than the 60 s lease: NTP off by a minute and a half on one host


def _clock(monkeypatch: pytest.MonkeyPatch, offset: timedelta) -> None:
    real = timezone.now.__wrapped__ if hasattr(timezone.now, "__wrapped__") else timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real() + offset)


@pytest.mark.parametrize("whose", ["taker_ahead", "owner_behind"])
def test_a_live_owner_is_not_taken_over_because_of_clock_skew(settings, monkeypatch, whose):
    settings.AGENT_LEASE_SECONDS = 60
    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Skew", body="hello")
    real_now = timezone.now

    # Worker A (its clock behind, in the second case) takes the lease; its own live session holds the lock.
    if whose == "owner_behind":
        _clock(monkeypatch, -SKEW)
    owner = lease_acquire(ticket_id=ticket.pk, owner="worker-a")
    assert owner is not None and owner.locked
    monkeypatch.setattr(timezone, "now", real_now)
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as a_session:
        owner.unlock()
        a_session.execute("SELECT pg_advisory_lock(%s)", [lock_key(ticket.pk)])
        assert owner.renew()  # A is alive and heartbeating (on its own clock)
        if whose == "owner_behind":
            _clock(monkeypatch, -SKEW)
            assert owner.renew()
            monkeypatch.setattr(timezone, "now", real_now)

        # Worker B on another host, a doorbell in hand (the sweeper rang, or a duplicate).
        if whose == "taker_ahead":
            _clock(monkeypatch, SKEW)
        taker = lease_acquire(ticket_id=ticket.pk, owner="worker-b")
        monkeypatch.setattr(timezone, "now", real_now)
        lease = TicketLease.objects.get(ticket_id=ticket.pk)
        assert taker is None, (
            f"worker-b ({whose}) took the lease of a live owner that renewed it a moment ago and still holds "
            f"its session lock (lease row now {lease.owner!r} epoch {lease.epoch}, previous owner "
            f"{lease.previous_owner!r}): expiry written and compared on the workers' own clocks"
        )
