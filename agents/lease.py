"""The per-ticket lease: one writer per ticket, with fencing, and a dead owner seen at once.

A worker takes the lease with one conditional statement, renews it by
heartbeat while it works, and proves it still holds it inside every write
transaction (``Lease.guard``). A worker that was paused past its expiry finds
the epoch moved on and its writes refused.

The owner also holds a session-level PostgreSQL advisory lock keyed by the
ticket (``lock_key``) for the life of its lease. PostgreSQL drops it the moment
the owner's connection dies (a killed process, a crashed host once TCP
keepalives give up), so the next worker to ring the ticket (the sweeper, every
few seconds) takes the lease over at once instead of waiting for it to expire
(DESIGN.md, invariant 15). Expiry stays the backstop: a worker paused alive
(SIGSTOP, a long GC) keeps its connection and its lock, so it is taken over only
once its lease expires, and the epoch fence refuses its writes when it wakes.
Session-level advisory locks need a session per worker: not behind a
transaction-pooling PgBouncer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from support import reads, rows
from tickets.services import Fence, FenceRefused, events_batched

logger = logging.getLogger(__name__)


class LeaseLost(Exception):
    """This worker no longer holds the ticket's lease; it must stop writing."""


def lease_seconds() -> int:
    return settings.AGENT_LEASE_SECONDS


# The advisory lock of ticket N is the 64-bit key LOCK_NAMESPACE * 2**32 + N: in pg_locks,
# classid = LOCK_NAMESPACE and objid = N (objsubid 1), which the sweeper's query reads.
LOCK_NAMESPACE = 0x5A9E


def lock_key(ticket_id: int) -> int:
    return (LOCK_NAMESPACE << 32) + (int(ticket_id) & 0xFFFFFFFF)


# SQL (on tickets_ticket): does a live session hold this ticket's advisory lock?
LOCK_HELD_SQL = (
    "EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    f'AND l.classid = {LOCK_NAMESPACE} AND l.objid::bigint = ("tickets_ticket"."id" & 4294967295))'
)


def ticket_lease_held(ticket_id: int) -> bool:
    """Is a worker on this ticket now, or may it be: its lease taken and not expired, or its advisory
    lock held by a live session (an owner paused past its lease's expiry may wake and go on)?"""
    sql = (
        "SELECT EXISTS (SELECT 1 FROM agents_ticketlease WHERE ticket_id = %s AND owner <> '' AND expires_at > now()) "
        f'OR EXISTS (SELECT 1 FROM tickets_ticket WHERE "tickets_ticket"."id" = %s AND {LOCK_HELD_SQL})'
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [ticket_id, ticket_id])
        return bool(cursor.fetchone()[0])


def held_at_most() -> float:
    """The longest a pass may hold a ticket: the task's time limit, after which Celery kills a pool
    process. A pass still going then is stuck on something that never returns (a peer that trickles,
    a lock, a bug), and under a pool that kills nothing (solo, threads) its heartbeat renewed the
    lease for as long as the process lived: the ticket waited behind it for ever. Past this the
    heartbeat leaves the lease to expire; another worker takes the ticket over, and the fence
    refuses the stuck pass's writes should it ever go on."""
    return float(settings.CELERY_TASK_TIME_LIMIT)


def worker_identity() -> str:
    """``host:pid:pass:place:start``: the owner a lease names. ``place`` and ``start`` (``_process_stamp``)
    let a worker on the same host tell that the owner's process is gone (``owner_died_here``)."""
    pid = os.getpid()
    if pid not in _stamps:  # one per process (a forked child has its own)
        _stamps[pid] = _process_stamp(pid)
    return f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:8]}:{_stamps[pid]}"


def _process_start(pid: int) -> str | None:
    """When process ``pid`` of this host started (clock ticks since boot), or None if there is no such
    process, or it is dead and not yet reaped (a zombie), or this system has no /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            # The command name may hold spaces and parentheses: the fields are read after its last ")".
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return None
    if len(fields) < 20 or fields[0] in {"Z", "X", "x"}:
        return None
    return fields[19]


_places: dict[int, str] = {}
_stamps: dict[int, str] = {}


def _place() -> str:
    """This boot of this host and this namespace of process ids ("" if unknown): two processes with
    the same place see each other's pids."""
    pid = os.getpid()
    if pid not in _places:
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
                place = f"{boot.read().strip()}/{os.readlink('/proc/self/ns/pid')}"
            # A /proc mounted from another pid namespace numbers processes otherwise: it says nothing.
            seen = os.readlink("/proc/self") == str(pid)
            _places[pid] = hashlib.sha256(place.encode()).hexdigest()[:12] if seen else ""
        except OSError:
            _places[pid] = ""
    return _places[pid]


def _process_stamp(pid: int) -> str:
    return f"{_place()}:{_process_start(pid) or ''}"


def owner_died_here(owner: str) -> bool:
    """Is ``owner`` (``worker_identity``) a worker process of this host that is gone? True only when
    that is certain: same host name, boot and pid namespace, and its pid is no process now, or
    another process that started at another time. Anything else (another host, an owner named
    otherwise, no /proc) is not known dead."""
    parts = owner.split(":")
    if len(parts) < 5 or not _place():
        return False
    host, pid, place, start = ":".join(parts[:-4]), parts[-4], parts[-2], parts[-1]
    if host != socket.gethostname() or place != _place() or not pid.isdigit() or not start:
        return False
    return _process_start(int(pid)) != start


@dataclass
class Lease:
    ticket_id: int
    owner: str
    epoch: int
    # The owner this lease was taken from without a release (it died or lost the lease); "" if none.
    took_over_from: str = ""
    # This worker's connection holds the ticket's advisory lock.
    locked: bool = False
    # The server process of the session that took the lock (``_Heartbeat`` checks it still holds it).
    session_pid: int | None = None
    # This worker's session was ended while it lived on (seen by its heartbeat): see ``session_cut``.
    cut: bool = False
    # The ticket's advisory lock is held for this pass by the heartbeat's own session, taken again
    # after the database cut the pass's (``_Heartbeat._lock_again``): released by the heartbeat.
    heartbeat_locked: bool = field(default=False, repr=False)
    # The owner this lease was taken from had its session ended while it lived on: the pass it lost
    # was cut off by an outage of the database, not stopped by a crash of its worker.
    took_over_from_a_cut: bool = False
    lost: bool = False
    # The ticket's last timeline number as this worker knows it: read with the ticket (``watch``),
    # then moved on by each of its own fenced transactions. ``others_wrote``: someone else (a
    # customer, a person, a decision) has appended to the timeline since; True until it is read.
    seq: int | None = None
    others_wrote: bool = True
    # Set while a fenced transaction of this lease is open (guards inside it add no statement).
    _fencing: bool = field(default=False, repr=False)
    # When this worker took the lease (its own clock: only it compares): see ``held_at_most``.
    taken_at: float = field(default_factory=time.monotonic, repr=False)

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """A transaction that commits only if this lease is still ours (fencing).

        The fence is checked last, in the same statement that numbers and writes
        the transaction's timeline events: an UPDATE of the lease row that must
        find this epoch and owner. It takes the lease row's lock until commit,
        so a take-over after it waits for this transaction and then sees its
        writes; a take-over before it makes it fail, and nothing of the
        transaction commits. A guard inside another guard of the same lease is
        part of the same transaction and fenced by it: it adds no statement.
        """
        if self._fencing and connection.in_atomic_block:
            yield
            return
        fence = Fence(
            ticket_id=self.ticket_id,
            sql="UPDATE agents_ticketlease SET expires_at = GREATEST(expires_at, now() + interval '1 second') "
            "WHERE ticket_id = %s AND epoch = %s AND owner = %s RETURNING 1",
            params=[self.ticket_id, self.epoch, self.owner],
        )
        outermost = not connection.in_atomic_block
        try:
            with (
                transaction.atomic(savepoint=False),
                rows.write_behind(),
                events_batched(fence=fence, whole_transaction=outermost),
            ):
                self._fencing = True
                try:
                    yield
                finally:
                    self._fencing = False
        except FenceRefused:
            self.lost = True
            raise LeaseLost(f"lease on ticket {self.ticket_id} epoch {self.epoch} is no longer held") from None
        if fence.numbered is not None:
            # A gap between the number this worker knew and its own events' first is someone else's.
            # (Inside a transaction of the caller's, which may still roll back, it knows no more.)
            before, after = fence.numbered
            self.others_wrote = self.others_wrote or before != self.seq or not outermost
            self.seq = after

    def lent(self) -> Lease:
        """A copy of this lease for a tool's handler running in a thread of its own
        (``agents.tool_thread``): it fences that thread's transactions on its own connection, and
        what it learns (the timeline's numbers, a lease lost) comes back only through ``taken_back``,
        so a handler given up at its bound changes nothing this lease knows."""
        return dataclasses.replace(self, _fencing=False, heartbeat_locked=False)  # the lock is not its to let go

    def taken_back(self, lent: Lease) -> None:
        """What the handler's thread learnt with ``lent`` (its own writes numbered, others' seen, the
        lease lost) is this lease's now. Caller: the handler ended within its bound."""
        if lent.seq != self.seq:
            self.seq = lent.seq
        self.others_wrote = self.others_wrote or lent.others_wrote
        self.lost = self.lost or lent.lost

    def watch(self, seq: int) -> None:
        """The ticket was read now with ``seq`` its last timeline number: count others' writes from here."""
        self.seq, self.others_wrote = seq, False

    def alone_since_read(self, seq: int | None = None) -> bool:
        """Has no one but this worker appended to the ticket's timeline since it was read
        (``watch``), as far as its own transactions have seen? ``seq``: the last number read
        just now (with the ticket's row locked), which sees others' writes since this worker's
        last transaction too. (Costs no statement: the numbers come back with the writes.)"""
        return not self.others_wrote and (seq is None or seq == self.seq)

    def renew(self) -> bool:
        """Move the expiry on; False if the lease is no longer this worker's."""
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE agents_ticketlease SET expires_at = now() + make_interval(secs => %s) "
                "WHERE ticket_id = %s AND epoch = %s AND owner = %s",
                [lease_seconds(), self.ticket_id, self.epoch, self.owner],
            )
            return cursor.rowcount == 1

    def start_heartbeat(self) -> None:
        """Have the lease renewed every third of its length while this worker works (see _Heartbeat)."""
        _the_heartbeat().add(self)

    def stop_heartbeat(self) -> None:
        """No renewal of this lease starts after this returns (one under way may still end)."""
        _the_heartbeat().discard(self)

    def unlock(self) -> None:
        """Let go of the advisory lock only (a lease lost to another worker)."""
        try:
            with connection.cursor() as cursor:
                _unlock(cursor, self)
        finally:
            if self.heartbeat_locked:
                _the_heartbeat().unlock(self)

    def release(self, *, ask: tuple[str, list[Any]] = ("NULL", [])) -> Any:
        """Give the lease up: the row, then the advisory lock, in one statement. ``ask``: a question
        (SQL of one value, and its parameters) answered by that same statement, after the release
        (what came in while this worker held the lease); its answer is returned."""
        self.stop_heartbeat()
        question, params = ask
        # The row first, then the lock (the unlock reads the UPDATE's count, so it runs after it):
        # a worker ringing in between sees a released lease, not a dead owner, and takes the lock a
        # moment later (lease_acquire).
        unlock = "pg_advisory_unlock(%s)" if self.locked else "NULL"
        with connection.cursor() as cursor:
            try:
                cursor.execute(
                    "WITH released AS (UPDATE agents_ticketlease SET owner = '', expires_at = now() "
                    "WHERE ticket_id = %s AND epoch = %s AND owner = %s RETURNING 1) "
                    f"SELECT {unlock}, ({question}) FROM (SELECT count(*) FROM released) AS done",
                    [
                        self.ticket_id, self.epoch, self.owner,
                        *([lock_key(self.ticket_id)] if self.locked else []), *params,
                    ],
                )  # fmt: skip
                return cursor.fetchone()[1]
            finally:
                self.locked = False
                if self.heartbeat_locked:  # after the row: a worker ringing between sees a release
                    _the_heartbeat().unlock(self)


class _Heartbeat:
    """One thread per process renews the leases its worker holds, each every third of a lease.

    A thread started and joined for each lease cost a turn more than half a millisecond. The
    renewals use the thread's own connection, kept while a lease is held and closed when none is.

    Every ``CHECK_SECONDS`` it also asks whether the session of each pass still holds its ticket's
    advisory lock. The database ending a session (a failover, a restart, pg_terminate_backend, the
    idle-in-transaction timeout) drops the lock, which reads as a dead owner (invariant 15): the
    sweeper rang the ticket and another worker took it over while this one, alive, was still
    streaming its step, and the take-over counted a stopped worker against the ticket (a few cuts
    parked it). A lock gone from a session whose worker lives on is marked on the lease
    (``session_cut``): the lease is then held as a plain lease, renewed while the pass goes on and
    released when it ends (its next statement meets the cut and waits out the outage), or taken over
    at its expiry, as an outage, not a stop. A killed worker's heartbeat dies with it: taken over at once.
    So that a worker killed after such a cut is still seen dead at once (not at the lease's expiry),
    the heartbeat takes the ticket's lock again on its own session, which dies with the worker, and
    lets go of it when the lease is released (``_lock_again``, ``unlock``). It takes it before it
    marks anything: a lease marked cut and not yet locked again is a window in which the worker's
    death is seen only at expiry, so the lease is marked cut only while another session holds the
    lock for a moment (a worker looking at it to take the ticket over), and locked again next round.
    """

    CHECK_SECONDS = 0.5

    def __init__(self) -> None:
        self.due: dict[int, tuple[Lease, float]] = {}  # id(lease) -> (lease, when to renew it)
        self.changed = threading.Condition()
        self.wakes_at = 0.0  # when the thread wakes up next (0 while it is awake)
        self.check_at = 0.0  # when the sessions of the passes are checked next
        self.pid = os.getpid()
        # Locks this thread's session holds for released leases, to let go of (``unlock``), and the
        # event each releasing pass waits on until it is done.
        self.unlocking: list[tuple[int, threading.Event]] = []
        threading.Thread(target=self._run, name="lease-heartbeat", daemon=True).start()

    @staticmethod
    def interval() -> float:
        return max(0.2, lease_seconds() / 3)

    def add(self, lease: Lease) -> None:
        due = time.monotonic() + self.interval()
        with self.changed:
            self.due[id(lease)] = (lease, due)
            if due < self.wakes_at:  # else the thread is up before this lease is due: let it sleep
                self.changed.notify()

    def discard(self, lease: Lease) -> None:
        with self.changed:
            self.due.pop(id(lease), None)

    def unlock(self, lease: Lease, wait: float = 1.0) -> None:
        """Let go of the ticket's lock this thread's session took again for ``lease`` (released now),
        waiting up to ``wait`` s: a worker taking the ticket next finds the lock free (``_lease_from``)."""
        lease.heartbeat_locked = False
        done = threading.Event()
        with self.changed:
            self.unlocking.append((lock_key(lease.ticket_id), done))
            self.changed.notify()
        done.wait(wait)

    def _run(self) -> None:
        while True:
            with self.changed:
                unlocking, self.unlocking = self.unlocking, []
            if unlocking:
                self._let_go(unlocking)
            with self.changed:
                if self.unlocking:
                    continue
                now = time.monotonic()
                next_at = min((at for _, at in self.due.values()), default=None)
                if any(lease.session_pid for lease, _ in self.due.values()):
                    next_at = min(next_at if next_at is not None else math.inf, self.check_at)
                if next_at is None or next_at > now:
                    if not self.due:  # no lease held: its connection is not kept while idle
                        with contextlib.suppress(Exception):
                            connection.close()
                    self.wakes_at = math.inf if next_at is None else next_at
                    self.changed.wait(None if next_at is None else next_at - now)
                    self.wakes_at = 0.0  # awake: a lease added now is seen by this round
                    continue
                renewing = [lease for lease, at in self.due.values() if at <= now]
                for lease in renewing:
                    self.due[id(lease)] = (lease, now + self.interval())
                checking, relocking = [], []
                if self.check_at <= now:
                    checking = [lease for lease, _ in self.due.values() if lease.session_pid and not lease.cut]
                    # Cut, and the lock not taken again (another session held it a moment): try again.
                    relocking = [lease for lease, _ in self.due.values() if lease.cut]
                    self.check_at = now + self.CHECK_SECONDS
                holding = bool(self.due)
            try:
                for lease in renewing:
                    self._renew(lease)
                if checking:
                    self._check_sessions(checking)
                for lease in relocking:
                    self._lock_again(lease)
            except Exception:  # noqa: BLE001 - the next round tries again, on a new connection
                logger.warning("the lease heartbeat's round failed", exc_info=True)
                holding = False
            finally:
                if not holding:
                    with contextlib.suppress(Exception):
                        connection.close()
                elif not any(lease.heartbeat_locked for lease, _ in list(self.due.values())):
                    # Not while it holds a pass's lock (``_lock_again``): closed as obsolete (at
                    # CONN_MAX_AGE), the lock would go while the pass lives on. A session that
                    # failed fails the next round, which closes it.
                    with contextlib.suppress(Exception):
                        connection.close_if_unusable_or_obsolete()

    def _let_go_later(self, lease: Lease) -> None:
        """A lease this thread stops renewing holds no lock of this thread's session past its next round
        (caller: holds ``changed``)."""
        if lease.heartbeat_locked:
            lease.heartbeat_locked = False
            self.unlocking.append((lock_key(lease.ticket_id), threading.Event()))

    def _let_go(self, unlocking: list[tuple[int, threading.Event]]) -> None:
        try:
            with connection.cursor() as cursor:
                for key, _ in unlocking:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
        except Exception:  # noqa: BLE001 - a session that failed holds no lock any more
            logger.warning("the lease heartbeat could not let go of a ticket's lock", exc_info=True)
            with contextlib.suppress(Exception):
                connection.close()
        finally:
            for _, done in unlocking:
                done.set()

    def _check_sessions(self, leases: list[Lease]) -> None:
        """Find the leases whose pass's session no longer holds the ticket's lock. Each takes the lock
        again on this thread's session first (``_lock_again``), so that the worker's death is seen at
        once from the moment the cut is: a lease marked cut (``session_cut``) before it is locked again
        waits for its expiry if the worker dies in between. Marked cut only if the lock is someone
        else's for the moment (a worker looking at it to take the ticket over), and tried again then."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT held.ticket_id FROM agents_ticketlease AS held "
                "JOIN unnest(%s::bigint[], %s::bigint[], %s::text[], %s::int[]) AS pass(ticket_id, epoch, owner, pid) "
                "ON held.ticket_id = pass.ticket_id AND held.epoch = pass.epoch AND held.owner = pass.owner "
                "WHERE held.session_locked AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' "
                "AND l.granted AND l.objsubid = 1 AND l.pid = pass.pid AND l.classid = %s "
                "AND l.objid::bigint = (pass.ticket_id & 4294967295) "
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))",
                [
                    [lease.ticket_id for lease in leases], [lease.epoch for lease in leases],
                    [lease.owner for lease in leases], [lease.session_pid for lease in leases], LOCK_NAMESPACE,
                ],
            )  # fmt: skip
            lost = {row[0] for row in cursor.fetchall()}
        for lease in leases:
            if lease.ticket_id not in lost:
                continue
            if self._lock_again(lease):
                held = "this worker's heartbeat holds the ticket's lock in its place until the pass ends"
            else:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "UPDATE agents_ticketlease SET session_locked = FALSE, session_cut = TRUE "
                        "WHERE ticket_id = %s AND epoch = %s AND owner = %s AND session_locked",
                        [lease.ticket_id, lease.epoch, lease.owner],
                    )
                    if cursor.rowcount != 1:
                        continue  # the lease is someone else's by now
                lease.cut = True
                held = "the lease is kept until the pass ends"
            logger.warning(
                "ticket %s: the database ended the session of this worker's pass (epoch %s); %s, and the pass "
                "waits the outage out",
                lease.ticket_id,
                lease.epoch,
                held,
            )

    def _lock_again(self, lease: Lease) -> bool:
        """Hold the ticket's lock for a pass whose session was cut, on this thread's session: it dies
        with the worker, so a worker killed before its pass ends is seen dead at once, as one whose
        session lives on. Checked like a pass's session from then on (cut again: taken again). True if
        the lock is held and the lease says so."""
        with connection.cursor() as cursor:
            key = lock_key(lease.ticket_id)
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
            if not cursor.fetchone()[0]:
                return False  # another session has it: the lease is someone else's by now, or about to be
            cursor.execute(
                "UPDATE agents_ticketlease SET session_locked = TRUE, session_cut = FALSE "
                "WHERE ticket_id = %s AND epoch = %s AND owner = %s",
                [lease.ticket_id, lease.epoch, lease.owner],
            )
            if cursor.rowcount != 1:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
                return False
            with self.changed:
                if id(lease) not in self.due:  # released meanwhile: its release did not see this lock
                    self.unlocking.append((key, threading.Event()))
                    return False
                lease.heartbeat_locked = True
                lease.session_pid = connection.connection.info.backend_pid
                lease.cut = False
        return True

    def _renew(self, lease: Lease) -> None:
        if time.monotonic() - lease.taken_at > held_at_most():
            with self.changed:
                self.due.pop(id(lease), None)
                self._let_go_later(lease)
            logger.error(
                "ticket %s: held for more than %g s (CELERY_TASK_TIME_LIMIT) by a pass that does not end; "
                "its lease is left to expire and another worker takes the ticket over",
                lease.ticket_id,
                held_at_most(),
            )
            return
        try:
            renewed = lease.renew()
        except Exception:  # noqa: BLE001 - the next round tries again; the lease outlasts two misses
            logger.warning("could not renew the lease on ticket %s", lease.ticket_id, exc_info=True)
            return
        if renewed:
            return
        with self.changed:
            if self.due.pop(id(lease), None) is None:
                return  # released meanwhile: nothing was lost
            self._let_go_later(lease)
        lease.lost = True
        logger.warning("lost the lease on ticket %s (epoch %s)", lease.ticket_id, lease.epoch)


_heartbeat: _Heartbeat | None = None
_heartbeat_lock = threading.Lock()


def _the_heartbeat() -> _Heartbeat:
    global _heartbeat
    with _heartbeat_lock:
        if _heartbeat is None or _heartbeat.pid != os.getpid():  # a forked child starts its own
            _heartbeat = _Heartbeat()
        return _heartbeat


def _unlock(cursor: object, lease: Lease) -> None:
    if lease.locked:
        try:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [lock_key(lease.ticket_id)])  # type: ignore[attr-defined]
        finally:
            lease.locked = False


def lease_acquire(*, ticket_id: int, owner: str) -> Lease | None:
    """Take the ticket's lease if it is free, expired, or its owner's session is gone; None if
    someone else holds it (or the ticket does not exist)."""
    return lease_acquire_and_read(ticket_id=ticket_id, owner=owner, then=[])[0]


def lease_acquire_and_read(
    *, ticket_id: int, owner: str, then: Sequence[tuple[str, Sequence[Any]]]
) -> tuple[Lease | None, list[list[tuple[Any, ...]]]]:
    """``lease_acquire``, with the reads ``then`` sent in the same round trip right after it: they see the
    ledger as it is once the lease is taken. Their rows are returned in order (read whether or
    not the lease was taken; the caller uses them only with a lease)."""
    # Expiry is written and compared on the database's clock, one clock for every host (a worker whose
    # clock runs ahead would take a live owner's lease; one behind would write leases already expired).
    # The advisory lock first (the INSERT reads it), then the row, in one statement. Free only
    # if no live session holds the lock: then a lease still marked as held by a locking owner
    # belongs to a dead one, and may be taken over before it expires. No row for a ticket that
    # does not exist (the foreign key would fail the statement, and the reads with it).
    # A lock gone from a lease not expired is taken over only after the owner's heartbeat has had
    # time to say its worker lives on and only its session was cut (``_Heartbeat``, ``session_cut``):
    # the first statement leaves such a lease alone and says so, and the second, a moment later,
    # takes it if it is still marked as held by a lock (its owner dead: no heartbeat marked it).
    # An owner that ran on this host and whose process is gone has no heartbeat to wait for: its
    # ticket is taken over at once (every recovery of a killed worker paid the wait, on top of the
    # sweep that found it).
    found, read = _acquire_and_read(ticket_id=ticket_id, owner=owner, then=then, take_lost_session=False)
    if found[0][1] is None and found[0][-2]:
        _lease_from(found[0], ticket_id=ticket_id, owner=owner)  # lets go of the advisory lock
        if not owner_died_here(found[0][-1] or ""):
            time.sleep(_Heartbeat.CHECK_SECONDS * 3)
        found, read = _acquire_and_read(ticket_id=ticket_id, owner=owner, then=then, take_lost_session=True)
    return _lease_from(found[0], ticket_id=ticket_id, owner=owner), read


def _acquire_and_read(
    *, ticket_id: int, owner: str, then: Sequence[tuple[str, Sequence[Any]]], take_lost_session: bool
) -> tuple[list[tuple[Any, ...]], list[list[tuple[Any, ...]]]]:
    acquire = (
        """
        WITH advisory AS (SELECT pg_try_advisory_lock(%s) AS locked),
        before AS (
            SELECT owner, session_cut, session_locked AND owner <> '' AND expires_at >= now() AS held_locked
              FROM agents_ticketlease WHERE ticket_id = %s
        ),
        taken AS (
            INSERT INTO agents_ticketlease
                   (ticket_id, owner, epoch, expires_at, acquired_at, previous_owner, session_locked, session_cut)
            SELECT %s, %s, 1, now() + make_interval(secs => %s), now(), '', advisory.locked, FALSE FROM advisory
             WHERE EXISTS (SELECT 1 FROM tickets_ticket WHERE id = %s)
            ON CONFLICT (ticket_id) DO UPDATE
               SET owner = EXCLUDED.owner, epoch = agents_ticketlease.epoch + 1,
                   expires_at = EXCLUDED.expires_at, acquired_at = EXCLUDED.acquired_at,
                   previous_owner = agents_ticketlease.owner, session_locked = EXCLUDED.session_locked,
                   session_cut = FALSE
             WHERE agents_ticketlease.owner = '' OR agents_ticketlease.expires_at < now()
                OR (%s AND EXCLUDED.session_locked AND agents_ticketlease.session_locked)
            RETURNING epoch, previous_owner
        )
        SELECT advisory.locked, taken.epoch, taken.previous_owner,
               EXISTS (SELECT 1 FROM before WHERE before.owner = taken.previous_owner AND before.session_cut),
               taken.epoch IS NULL AND advisory.locked AND EXISTS (SELECT 1 FROM before WHERE before.held_locked),
               (SELECT owner FROM before)
          FROM advisory LEFT JOIN taken ON TRUE
        """,
        [lock_key(ticket_id), ticket_id, ticket_id, owner, lease_seconds(), ticket_id, take_lost_session],
    )
    if then:
        found, *read = reads.fetch_together([acquire, *then])
        return found, read
    return reads.fetch(*acquire), []


def _lease_from(found: tuple[Any, ...], *, ticket_id: int, owner: str) -> Lease | None:
    with connection.cursor() as cursor:
        locked, *row, cut, _, _ = found
        if row[0] is None:
            if locked:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [lock_key(ticket_id)])
            return None
        if not locked:
            # Taken from an owner that released the row and is about to release the lock.
            for _ in range(5):
                cursor.execute("SELECT pg_try_advisory_lock(%s)", [lock_key(ticket_id)])
                if cursor.fetchone()[0]:
                    locked = True
                    cursor.execute(
                        "UPDATE agents_ticketlease SET session_locked = TRUE WHERE ticket_id = %s AND epoch = %s",
                        [ticket_id, row[0]],
                    )
                    break
                time.sleep(0.01)
    return Lease(
        ticket_id=ticket_id,
        owner=owner,
        epoch=int(row[0]),
        took_over_from=row[1] or "",
        locked=locked,
        session_pid=connection.connection.info.backend_pid if locked else None,
        took_over_from_a_cut=bool(row[1]) and bool(cut),
    )
