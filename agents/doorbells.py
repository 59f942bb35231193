"""Which tickets have a doorbell waiting in the broker's queue, so that the sweeper rings each once.

The sweeper rings every ticket with work whose lease is free. While no worker takes doorbells (a
deploy, a backlog, every worker busy) that used to queue one more doorbell per waiting ticket on
every sweep, each a pass some worker runs later. Now every doorbell sent is marked in Redis (a
sorted set of ticket ids), a worker unmarks a ticket when it receives its doorbell, and the sweeper
rings only unmarked tickets.

A mark is never taken on trust: a doorbell lost with the broker (flushed, purged, restarted without
its data) leaves its mark behind. Every message sent to the queue is counted, and every message a
worker receives uncounted; a queue holding fewer messages than that count has lost some, and the
sweeper then drops every mark and rings every ticket again, as it did before marks. Marks and the
count are best effort like the doorbells themselves: if Redis cannot be reached, the sweeper rings
every ticket.

A message is counted out once, by its id, however many times the broker delivers it: one given back
(its worker died before acknowledging it, RabbitMQ's consumer timeout, Redis's visibility timeout)
and received again was counted out twice, and the count drifted below what the queue holds for good;
a doorbell lost afterwards then went unseen, and its ticket waited unrung until its mark aged out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis
from django.conf import settings

from support.celery import app
from support.pauses import Pause
from support.redis_client import LazyRedis

logger = logging.getLogger(__name__)

marks_pause = Pause("doorbell marks", 5.0)
# A mark older than this is dropped whatever the queue holds: a last resort for a doorbell lost in
# a way the queue's length hides, when every other mark still stands for a queued doorbell.
MARK_KEPT_SECONDS = 600

_client = LazyRedis(timeout=3)

# Counted out, and its ticket unmarked, once per message id: the id is kept while the broker may still
# give the message back (Redis's visibility timeout, or a task's time limit past which RabbitMQ's
# consumer timeout comes). A doorbell delivered again leaves the ticket's mark alone: by then the mark
# stands for a newer doorbell, rung since the first delivery, and still queued.
_COUNT_OUT_ONCE = """
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  redis.call('DECR', KEYS[1])
  for i = 2, #ARGV do redis.call('ZREM', KEYS[3], ARGV[i]) end
end
"""


def _received_kept_seconds() -> int:
    visibility = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("visibility_timeout", 3600)
    return 2 * int(max(visibility, settings.CELERY_TASK_TIME_LIMIT))


def _key(what: str = "doorbells") -> str:
    return f"{settings.CACHES['default'].get('KEY_PREFIX', 'support')}:{what}"


def _count_key() -> str:
    return _key("queued-messages")


def _redis_seconds(client: redis.Redis) -> float:
    """Now on Redis's clock: the hosts that mark and trim may not agree on the time."""
    seconds, micros = client.time()
    return seconds + micros / 1_000_000


def queued_in_broker() -> int:
    """Messages waiting in the broker's default queue (those a worker holds are not among them)."""
    with app.connection_for_read() as conn:
        queue = app.amqp.queues[app.conf.task_default_queue](conn.default_channel)
        try:
            return int(queue.queue_declare(passive=True).message_count)
        except conn.channel_errors:
            return 0  # no such queue (Redis keeps none while it is empty; a RabbitMQ that lost it)


def unmarked(ticket_ids: list[int], *, trust_marks: bool = True) -> list[int]:
    """Of these tickets, those with no doorbell queued; each is marked as rung from now on.

    Caller sends a doorbell for every ticket returned. Marks that stand for more doorbells than the
    broker holds are dropped first: a doorbell lost with the broker is rung again. ``trust_marks``
    False (the sweep a worker asks for when it starts): every ticket is returned, and marked anew.
    The count sees a lost doorbell only while it is not low, and a send not counted (Redis failed
    for a moment) makes it low: a broker flushed while a worker was down then hid the lost doorbell
    from every sweep until the queue was next found empty, and from a worker's start sweep for good
    while beat was down too."""
    if not ticket_ids:
        return []
    if marks_pause.paused():
        return ticket_ids
    try:
        client = _client()
        key, now = _key(), _redis_seconds(client)
        client.zremrangebyscore(key, "-inf", now - MARK_KEPT_SECONDS)
        # Read before and after the queue: a message received meanwhile (or sent) moves the count,
        # and the lower of the two never makes it drift low (a lost doorbell then hidden for good).
        counted = int(client.get(_count_key()) or 0)
        queued = queued_in_broker()
        counted = min(counted, int(client.get(_count_key()) or 0))
        if queued < counted or (queued == 0 and client.zcard(key)):
            # Messages were lost, or marks stand for doorbells never sent (their send failed and the
            # mark could not be taken back): with nothing queued, no mark stands for anything.
            logger.warning(
                "the broker holds %d messages of the %d sent and not received: every waiting ticket is rung again",
                queued, counted,
            )  # fmt: skip
            client.delete(key)
            client.incrby(_count_key(), queued - counted)  # what was sent or received meanwhile still counts
        elif counted < 0:
            # A message whose send could not be counted (Redis failed, or was flushed, meanwhile) is
            # received once more than it was counted sent: a count below nothing starts again from nothing.
            client.incrby(_count_key(), -counted)
        pipe = client.pipeline(transaction=False)
        for ticket_id in ticket_ids:
            pipe.zadd(key, {str(ticket_id): now}, nx=trust_marks)
        added = pipe.execute()
        if not trust_marks:
            return ticket_ids
    except Exception:  # noqa: BLE001 - Redis's and the broker's errors alike: ring them all, as before marks
        marks_pause.failed()
        logger.exception("doorbell marks could not be read; every ticket with work is rung")
        return ticket_ids
    return [ticket_id for ticket_id, new in zip(ticket_ids, added, strict=True) if new]


def mark(ticket_id: int) -> None:
    """Marks a doorbell sent outside the sweeper (a customer's message, a decision, more work)."""
    if marks_pause.paused():
        return
    try:
        client = _client()
        client.zadd(_key(), {str(ticket_id): _redis_seconds(client)}, nx=True)
    except redis.RedisError:
        marks_pause.failed()
        logger.warning("ticket %s: its doorbell could not be marked; the sweeper may ring it once more", ticket_id)


def unsent(ticket_ids: Iterable[int]) -> None:
    """The doorbells of these tickets, marked, could not be sent: the sweeper rings them again."""
    members = [str(ticket_id) for ticket_id in ticket_ids]
    if not members or marks_pause.paused():
        return
    try:
        _client().zrem(_key(), *members)
    except redis.RedisError:
        marks_pause.failed()  # the marks are dropped by the sweep that finds the queue empty
        logger.warning("doorbell marks of tickets %s, not sent, could not be removed", members)


def sent() -> None:
    """A message was sent to the broker's queue (after the broker took it)."""
    if marks_pause.paused():
        return
    try:
        _client().incr(_count_key())
    except redis.RedisError:
        marks_pause.failed()
        logger.warning("a message sent to the broker could not be counted")


def received(ticket_ids: Iterable[int], *, message_id: str) -> None:
    """A worker received a message, a doorbell of these tickets or none: it is no longer in the queue.
    A message delivered again (same ``message_id``) is not counted out again."""
    if marks_pause.paused():
        return
    members = [str(ticket_id) for ticket_id in ticket_ids]
    try:
        count_out_once = _client().register_script(_COUNT_OUT_ONCE)  # sent by its hash after the first time
        count_out_once(
            keys=[_count_key(), _key(f"received:{message_id}"), _key()], args=[_received_kept_seconds(), *members]
        )
    except redis.RedisError:
        # Counted as still queued: the sweeper takes the queue for one that lost messages, drops
        # every mark and rings every waiting ticket again (once).
        marks_pause.failed()
        logger.warning("a message received could not be uncounted (doorbell of tickets %s)", members)
