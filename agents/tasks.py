"""Celery tasks of the agent: interfaces only. Ids in, state re-read from Postgres."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING

from celery import Task, bootsteps, shared_task
from celery.backends.base import DisabledBackend
from celery.signals import after_task_publish, task_received
from celery.worker.request import Request
from django.db import DatabaseError, close_old_connections, transaction
from django.dispatch import receiver

from agents import doorbells
from agents.confirmation import confirmations_expire_due
from agents.refunds import reconcile_open_refunds
from agents.runner import advance
from agents.selectors import backoffs_ending, tickets_with_agent_work
from agents.services import runs_note_stopped
from support.celery import BeatRound, app
from support.pauses import Pause
from tickets.signals import ticket_given_back, ticket_needs_agent

if TYPE_CHECKING:
    from celery.worker.consumer import Consumer

logger = logging.getLogger(__name__)

doorbell_pause = Pause("doorbells", 5.0)


class NoResultTask(Task):
    """A task whose result nobody reads (the ledger is Postgres). Its backend is made once, not once
    per sending thread: Celery looks a thread's result backend up by scanning every installed
    package's entry points, and Django runs each ASGI request in a thread of its own, so every
    customer message paid for that scan before its doorbell rang."""

    ignore_result = True
    _no_result_backend: DisabledBackend | None = None

    @property
    def backend(self) -> DisabledBackend:
        if self._no_result_backend is None:
            self._no_result_backend = DisabledBackend(self.app)
        return self._no_result_backend

    @backend.setter
    def backend(self, value: object) -> None:  # Celery sets it; results stay disabled
        pass


class NoResultRound(BeatRound, NoResultTask):
    """One of beat's rounds (``support.celery.BeatRound``) whose result nobody reads."""


class RetryRequest(Request):
    """A message of ``advance_ticket`` as a worker receives it. A retry (a message due later, from a
    countdown) is held for what is left of its ticket's wait on the database's clock, not until the
    time written in it: that time is on the clock of the host that sent it, and the worker held it
    until its own clock reached it. A worker whose clock ran 90 s behind the sender's held a retry
    due in 8 s for 98 s, and while beat was down nothing else rang the ticket. A worker whose clock
    runs ahead holds it to the wait's end too (``_retry_if_early`` stays for a wait made longer after
    the message came). The time written in it stands when the database cannot be asked."""

    @cached_property
    def eta(self) -> datetime | None:
        written = super().eta
        if written is None or not self.args:
            return written
        return _wait_ends_on_this_clock(int(self.args[0]), written=written)


def _wait_ends_on_this_clock(ticket_id: int, *, written: datetime) -> datetime:
    """When the ticket's wait ends on this host's clock: now, and the seconds left of it on the
    database's clock (none left: now). Read by the worker's consumer as the message comes in, on the
    connection it keeps (``close_old_connections``: one broken since, by a restart, is replaced)."""
    try:
        close_old_connections()
        waits = backoffs_ending(ticket_id=ticket_id, limit=1)
    except DatabaseError:
        logger.warning(
            "ticket %s: its wait could not be read; its retry is held to the time its sender wrote", ticket_id
        )
        return written
    left = waits[0][1] if waits else 0.0
    return datetime.now(tz=UTC) + timedelta(seconds=left)


@shared_task(name="agents.advance_ticket", base=NoResultTask, Request=RetryRequest)
def advance_ticket(ticket_id: int) -> str:
    """The one agent task. Idempotent: duplicates and concurrent deliveries are harmless."""
    outcome = advance(int(ticket_id))
    if outcome.retry_in is not None:
        advance_ticket.apply_async(args=[ticket_id], countdown=outcome.retry_in)
    elif outcome.more_work:
        ring(ticket_id)
    elif advance_ticket.request.eta is not None:
        _retry_if_early(int(ticket_id))
    return outcome.state


def _retry_if_early(ticket_id: int) -> None:
    """A retry (a countdown's message) that came before its wait was over is scheduled again for what
    is left of it. Its time is on the clock of the host that sent it, compared on the clock of the
    worker that received it: a worker whose clock runs ahead runs it early, finds the run still in its
    backoff (on the database's clock) and leaves it, and while beat is down nothing else rings it when
    the wait ends. One message schedules one: a wait is never rung more than once per retry sent."""
    for _, seconds in backoffs_ending(ticket_id=ticket_id, limit=1):
        logger.info("ticket %s: its retry came %.1f s before its wait ends; scheduled again", ticket_id, seconds)
        advance_ticket.apply_async(args=[ticket_id], countdown=seconds)


def ring(ticket_id: int) -> None:
    """Ring the ticket's doorbell after the current transaction commits. Carries no state."""
    transaction.on_commit(lambda: _send_doorbell(ticket_id))


def _send_doorbell(ticket_id: int) -> None:
    """A broker that cannot be reached loses only the doorbell: what was committed stays, the
    request that committed it succeeds, and the sweeper rings the ticket once the broker is back.
    After a doorbell failed, the broker is not asked for a few seconds (``doorbell_pause``): a broker
    that stalls holds one customer's request for its timeout, not every request meanwhile."""
    if doorbell_pause.paused():
        logger.warning(
            "ticket %s: the doorbell is not sent, the broker failed a moment ago; the sweeper rings it", ticket_id
        )
        return
    doorbells.mark(ticket_id)  # before it is sent: a worker may receive it at once, and unmarks it then
    try:
        # Tried once: Celery's publish retries (three more, each a new connection that a frozen broker
        # accepts and never answers, each waiting out its timeout) held a customer's send for ~50 s.
        advance_ticket.apply_async(args=[ticket_id], retry=False)
    except Exception:  # noqa: BLE001 - kombu's and the transport's errors alike; nothing to undo
        doorbells.unsent([ticket_id])
        doorbell_pause.failed()
        logger.exception("ticket %s: the doorbell could not be sent to the broker; the sweeper rings it", ticket_id)


@receiver(ticket_needs_agent)
def _on_ticket_needs_agent(sender: object, ticket_id: int, **kwargs: object) -> None:
    ring(ticket_id)


@receiver(ticket_given_back)
def _on_ticket_given_back(sender: object, ticket_id: int, **kwargs: object) -> None:
    runs_note_stopped(ticket_id=ticket_id)


def tickets_needing_a_ring(*, limit: int = 500) -> list[int]:
    """Tickets with work for the agent whose lease is free or expired."""
    return tickets_with_agent_work(limit=limit)


@shared_task(name="agents.sweep", base=NoResultRound)
def sweep(at_start: bool = False) -> int:
    """Re-ring every ticket with pending work or an expired lease whose doorbell is not still queued
    (``agents.doorbells``): lost doorbells only delay work, and sweeps while no worker takes the
    queued ones do not pile more on them. ``at_start``: the sweep a worker asks for when it comes up
    (or reconnects to the broker) rings them all, marked or not (``SweepOnConnecting``)."""
    ticket_ids = doorbells.unmarked(tickets_needing_a_ring(), trust_marks=not at_start)
    for sent, ticket_id in enumerate(ticket_ids):
        try:
            advance_ticket.delay(ticket_id)
        except Exception:
            doorbells.unsent(ticket_ids[sent:])
            raise
    if ticket_ids:
        logger.info("sweeper rang %d tickets", len(ticket_ids))
    return len(ticket_ids)


@shared_task(name="agents.ring_when_waits_end", base=NoResultTask)
def ring_when_waits_end() -> int:
    """Ring each ticket waiting out a backoff when its wait ends. A worker that died after committing
    a wait and before scheduling its retry (or a retry lost with the broker's messages) leaves the
    ticket to beat's sweeper alone; asked for at worker start, so that it is carried on while beat
    is down too. A ring that finds the run already carried on costs nothing."""
    waits = backoffs_ending()
    for ticket_id, seconds in waits:
        advance_ticket.apply_async(args=[ticket_id], countdown=seconds)
    return len(waits)


@after_task_publish.connect
def _message_sent(**kwargs: object) -> None:
    doorbells.sent()


@task_received.connect
def _message_received(request: Request, **kwargs: object) -> None:
    """A doorbell a worker received is no longer in the queue: the sweeper may ring its ticket again
    once it has work and a free lease (this one's pass ended, or its worker died). A retry waiting
    out its countdown was never marked. A message the broker gives again is counted out once."""
    doorbell = request.name == advance_ticket.name and request.eta is None and bool(request.args)
    doorbells.received([int(request.args[0])] if doorbell else [], message_id=request.id)


class SweepOnConnecting(bootsteps.StartStopStep):
    """A worker asks for one sweep each time it connects to the broker: when it comes up, and when
    it is back after losing the broker. What a dead worker left (its doorbell unacknowledged, given
    back by the broker only after its visibility timeout) is carried on now, even while beat is
    down, and what waits out a backoff is rung when its wait ends. A worker that loses the broker
    drops the retries it holds (Celery counts on the broker giving them back), and a broker back
    without its data (a flushed or restarted Redis, a RabbitMQ that lost its queue) gives back
    nothing: with a sweep only at start (Celery's ``worker_ready``), a retry held then was never
    run while beat was down, and the customer never answered. Beat's sweeps find nothing more to do
    for it; a sweep that cannot be sent waits for beat. It rings every ticket with work, marked as
    rung or not: the broker may have lost its queue, which the marks' count may not show
    (``doorbells.unmarked``). Queued behind what the broker still holds, it finds those tickets
    answered: a ticket is rung twice at most, once per connection."""

    # A consumer's step: started again (after the steps it requires) each time the consumer
    # reconnects to the broker, unlike a worker's steps and its signals, sent once per process.
    requires = {"celery.worker.consumer.tasks:Tasks"}

    def start(self, c: Consumer) -> None:
        try:
            sweep.delay(at_start=True)
            ring_when_waits_end.delay()
        except Exception:  # noqa: BLE001 - kombu's and the transport's errors alike; beat sweeps anyway
            logger.exception("the sweep asked for on connecting to the broker could not be sent")


app.steps["consumer"].add(SweepOnConnecting)


@shared_task(name="agents.reconcile_refunds", base=NoResultRound)
def reconcile_refunds() -> dict[str, int]:
    """Settle refunds left submitted or uncertain from the provider's records."""
    return reconcile_open_refunds()


@shared_task(name="agents.expire_confirmations", base=NoResultRound)
def expire_confirmations() -> int:
    """Record "expired" on questions the customer did not answer in time (the agent then tells them)."""
    return confirmations_expire_due()
