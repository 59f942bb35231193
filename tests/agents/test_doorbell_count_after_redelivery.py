"""A doorbell the broker delivers twice is counted out of the queue once (agents.doorbells).

The sweeper trusts a ticket's mark ("its doorbell is still queued") only while the broker holds as
many messages as were counted sent and not yet received. A message given back by the broker (its
worker died before acknowledging it, RabbitMQ's consumer timeout, Redis's visibility timeout) is
received again and was counted out twice: the count drifted one below what the queue holds, for
good. A doorbell lost afterwards then left the queue holding exactly as many messages as counted,
the loss went unseen, and its ticket waited with work for ten minutes, unrung, until its mark aged
out. A message is counted out once, by its id, however many times it is delivered.
"""

from __future__ import annotations

import pytest
from celery.worker.request import Request

from agents import tasks
from support.celery import app
from tests.agents.test_sweeps_ring_once_per_queued_doorbell import open_waiting_tickets, queued_messages, take_doorbells
from tests.workers import purge_broker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers]


@pytest.fixture(autouse=True)
def _empty_broker():
    purge_broker()
    yield
    purge_broker()


def delivered(queue):  # noqa: ANN001, ANN201
    """The next message, delivered as to a worker: the worker's "received" is signalled for it."""
    message = queue.get(no_ack=False)
    assert message is not None
    request = Request(message, app=app, task=app.tasks[message.headers["task"]])
    tasks._message_received(request=request)
    return message


def test_a_doorbell_lost_after_another_was_delivered_twice_is_rung_again():
    [first] = open_waiting_tickets(1)  # its doorbell queued and marked
    with app.connection_for_read() as conn:
        queue = app.amqp.queues[app.conf.task_default_queue](conn.default_channel)
        # The doorbell is delivered; its worker dies before acknowledging it, and the broker gives
        # it to the next worker.
        delivered(queue).requeue()
        again = delivered(queue)
        assert again.headers["task"] == "agents.advance_ticket" and again.payload[0] == [first]
        again.ack()
    assert queued_messages() == 0

    [second] = open_waiting_tickets(1)
    tasks.reconcile_refunds.delay()  # a round of beat's, queued behind the second doorbell
    with app.connection_for_read() as conn:
        queue = app.amqp.queues[app.conf.task_default_queue](conn.default_channel)
        # The second doorbell is lost with the broker's messages (taken off, never delivered).
        lost = queue.get(no_ack=True)
        assert lost is not None and lost.headers["task"] == "agents.advance_ticket"
    assert queued_messages() == 1  # beat's round is left

    rung = tasks.sweep()

    assert rung == 2 and take_doorbells() == [first, second], (
        f"the sweeper trusted ticket {second}'s mark: its lost doorbell was not rung again"
    )


def delivered_again(queue, message_id: str) -> None:  # noqa: ANN001
    """The message ``message_id``, given back by the broker, is delivered to a worker and done; the
    others stay queued (a broker may give a message back at the head of the queue or at its end)."""
    others = []
    while (message := queue.get(no_ack=False)) is not None:
        if message.headers["id"] != message_id:
            others.append(message)
            continue
        tasks._message_received(request=Request(message, app=app, task=app.tasks[message.headers["task"]]))
        message.ack()
    for message in others:
        message.requeue()


def test_a_doorbell_delivered_again_leaves_the_mark_of_the_ring_since():
    [ticket] = open_waiting_tickets(1)
    with app.connection_for_read() as conn:
        queue = app.amqp.queues[app.conf.task_default_queue](conn.default_channel)
        held = delivered(queue)  # its worker dies holding it
        # The ticket's lease is free and its doorbell is not queued: the sweeper rings it.
        assert tasks.sweep() == 1
        held.requeue()  # the broker gives the first doorbell back, and a worker receives it again
        delivered_again(queue, held.headers["id"])

    for _ in range(3):
        tasks.sweep()

    assert take_doorbells() == [ticket], "the sweeps rang again a ticket whose doorbell was still queued"
