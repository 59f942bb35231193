"""The per-ticket lease: one writer per ticket, with fencing.

A worker takes the lease with one conditional statement, renews it by
heartbeat while it works, and proves it still holds it inside every write
transaction (``Lease.guard``). A worker that was paused past its expiry finds
the epoch moved on and its writes refused.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """This worker no longer holds the ticket's lease; it must stop writing."""


def lease_seconds() -> int:
    return int(getattr(settings, "AGENT_LEASE_SECONDS", 60))


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class Lease:
    ticket_id: int
    owner: str
    epoch: int
    # The owner this lease was taken from without a release (it died or lost the lease); "" if none.
    took_over_from: str = ""
    _heartbeat: threading.Thread | None = field(default=None, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    lost: bool = False

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """A transaction that commits only if this lease is still ours.

        The fencing UPDATE takes the lease row's lock until commit, so a
        take-over waits for this transaction and then sees its writes.
        """
        with transaction.atomic(savepoint=False):
            with connection.cursor() as cursor:
                cursor.execute(
                    "UPDATE agents_ticketlease SET expires_at = GREATEST(expires_at, %s) "
                    "WHERE ticket_id = %s AND epoch = %s AND owner = %s",
                    [timezone.now() + timedelta(seconds=1), self.ticket_id, self.epoch, self.owner],
                )
                if cursor.rowcount != 1:
                    self.lost = True
                    raise LeaseLost(f"lease on ticket {self.ticket_id} epoch {self.epoch} is no longer held")
            yield

    def renew(self) -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE agents_ticketlease SET expires_at = %s WHERE ticket_id = %s AND epoch = %s AND owner = %s",
                [timezone.now() + timedelta(seconds=lease_seconds()), self.ticket_id, self.epoch, self.owner],
            )
            ok = cursor.rowcount == 1
        if not ok:
            self.lost = True
        return ok

    def start_heartbeat(self) -> None:
        interval = max(0.2, lease_seconds() / 3)

        def beat() -> None:
            try:
                while not self._stop.wait(interval):
                    if not self.renew():
                        logger.warning("lost the lease on ticket %s (epoch %s)", self.ticket_id, self.epoch)
                        return
            finally:
                connection.close()

        self._heartbeat = threading.Thread(target=beat, name=f"lease-{self.ticket_id}", daemon=True)
        self._heartbeat.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)

    def release(self) -> None:
        self.stop_heartbeat()
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE agents_ticketlease SET owner = '', expires_at = %s "
                "WHERE ticket_id = %s AND epoch = %s AND owner = %s",
                [timezone.now(), self.ticket_id, self.epoch, self.owner],
            )


def lease_acquire(*, ticket_id: int, owner: str) -> Lease | None:
    """Take the ticket's lease if it is free or expired; None if someone else holds it."""
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO agents_ticketlease (ticket_id, owner, epoch, expires_at, acquired_at, previous_owner)
            VALUES (%s, %s, 1, %s, %s, '')
            ON CONFLICT (ticket_id) DO UPDATE
               SET owner = EXCLUDED.owner, epoch = agents_ticketlease.epoch + 1,
                   expires_at = EXCLUDED.expires_at, acquired_at = EXCLUDED.acquired_at,
                   previous_owner = agents_ticketlease.owner
             WHERE agents_ticketlease.owner = '' OR agents_ticketlease.expires_at < %s
            RETURNING epoch, previous_owner
            """,
            [ticket_id, owner, now + timedelta(seconds=lease_seconds()), now, now],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return Lease(ticket_id=ticket_id, owner=owner, epoch=int(row[0]), took_over_from=row[1] or "")
