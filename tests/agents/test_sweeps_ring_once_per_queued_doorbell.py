"""The sweeper rings a ticket whose doorbell is still queued only once (DESIGN.md, invariant 2).

Each sweep rings every ticket with work whose lease is free. With no worker taking the doorbells (a
deploy, a backlog, every worker busy), every sweep queued one more doorbell per waiting ticket: 50
waiting tickets and five sweeps left 250 doorbells, every one of them a pass a worker runs later. A
doorbell lost with the broker (flushed, purged, restarted without its data) is still rung again by
the next sweep: what the broker lost is seen by the messages it holds, not taken on trust.
"""

from __future__ import annotations

import re

import pytest
import redis
from django.conf import settings
from kombu.exceptions import OperationalError

from agents import doorbells, tasks
from support.celery import app
from tests.agents.test_crash_recovery import at_rest, replies
from tests.conftest import make_customer
from tests.workers import purge_broker, wait_until
from tickets import services as ticket_services
from tickets.models import Ticket

pytestmark = pytest.mark.django_db(transaction=True)


def queued_messages() -> int:
    """Messages waiting in the broker's queue, as the broker counts them."""
    if not settings.BROKER_IS_AMQP:
        return int(redis.Redis.from_url(settings.CELERY_BROKER_URL).llen(app.conf.task_default_queue))
    with app.connection_for_read() as conn:
        queue = app.amqp.queues[app.conf.task_default_queue](conn.default_channel)
        return int(queue.queue_declare(passive=True).message_count)


def take_doorbells() -> list[int]:
    """Takes every message off the queue, as a worker would; the tickets of the doorbells among them."""
    rung: list[int] = []
    with app.connection_for_read() as conn:
        queue = app.amqp.queues[app.conf.task_default_queue](conn.default_channel)
        while (message := queue.get(no_ack=True)) is not None:
            if message.headers.get("task") == "agents.advance_ticket":
                args, _kwargs, _embed = message.decode()
                rung.append(int(args[0]))
    return sorted(rung)


def open_waiting_tickets(count: int) -> list[int]:
    customer = make_customer()
    return [
        ticket_services.ticket_open(customer=customer, subject=f"Help {n}", body="Where is my order?")[0].pk
        for n in range(count)
    ]


@pytest.fixture(autouse=True)
def _empty_broker():
    purge_broker()
    yield
    purge_broker()


def test_sweeps_without_a_worker_queue_one_doorbell_per_waiting_ticket():
    tickets = open_waiting_tickets(50)
    purge_broker()  # the doorbells of the new messages are lost
    assert queued_messages() == 0

    for _ in range(5):
        tasks.sweep()

    assert queued_messages() == 50, "each sweep rang again every ticket whose doorbell was still queued"
    assert take_doorbells() == tickets


def test_doorbells_lost_with_the_broker_are_rung_again_by_the_next_sweep():
    tickets = open_waiting_tickets(20)
    tasks.sweep()

    purge_broker()  # flushed with the doorbells it held
    tasks.sweep()
    assert take_doorbells() == tickets

    purge_broker()
    tasks.sweep()
    tasks.sweep()
    assert take_doorbells() == tickets


def test_a_lost_doorbell_is_rung_again_while_other_messages_wait_in_the_queue():
    tickets = open_waiting_tickets(2)
    purge_broker()
    # Beat's other rounds, queued meanwhile, are as many messages as the lost doorbells, and more.
    tasks.reconcile_refunds.delay()
    tasks.expire_confirmations.delay()
    tasks.ring_when_waits_end.delay()

    tasks.sweep()

    assert take_doorbells() == tickets


@pytest.mark.workers
@pytest.mark.timeout(180)
def test_a_worker_back_after_sweeps_answers_each_waiting_ticket_in_one_pass(cluster):
    tickets = open_waiting_tickets(10)
    purge_broker()
    for _ in range(5):  # beat's rounds while no worker ran
        tasks.sweep()

    worker = cluster.worker()

    wait_until(lambda: all(at_rest(Ticket.objects.get(pk=pk)) for pk in tickets), timeout=90,
               what="every ticket answered", cluster=cluster)  # fmt: skip
    # The sweep the worker asked for at its start ran, and nothing it rang is left in the queue.
    wait_until(lambda: "agents.sweep" in worker.log() and queued_messages() == 0, timeout=30,
               what="the queue to empty", cluster=cluster)  # fmt: skip
    passes = len(re.findall(r"agents\.advance_ticket\[[^]]+\] received", worker.log()))
    assert passes == len(tickets), f"{passes} doorbells answered for {len(tickets)} waiting tickets"
    for pk in tickets:
        assert len(replies(Ticket.objects.get(pk=pk))) == 1


def test_doorbells_the_broker_refused_during_a_sweep_are_rung_by_the_next(monkeypatch):
    tickets = open_waiting_tickets(3)
    purge_broker()
    sent = tasks.advance_ticket.delay

    def broker_gone(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OperationalError("Error 111 connecting to the broker. Connection refused.")

    monkeypatch.setattr(tasks.advance_ticket, "delay", broker_gone)
    with pytest.raises(OperationalError):
        tasks.sweep()
    monkeypatch.setattr(tasks.advance_ticket, "delay", sent)

    tasks.sweep()

    assert take_doorbells() == tickets


def _count_one_low() -> None:
    """The marks' count of queued messages one below what the broker was sent (``agents.doorbells``):
    a send whose count Redis failed a moment, or (before) a message received while a sweep read the
    count and the queue apart. The queue holds the one doorbell just rung."""
    assert queued_messages() == 1
    doorbells._client().set(doorbells._count_key(), 0)


def test_the_sweep_a_worker_starts_with_rings_a_lost_doorbell_the_count_does_not_show():
    # A broker flushed while the worker was down, and a count one low: the worker's start sweep, the
    # only one while beat is down too, trusted the mark of the lost doorbell (another message, the
    # start's own ring_when_waits_end, stood in the queue for it) and the ticket waited for good.
    tickets = open_waiting_tickets(1)
    _count_one_low()
    purge_broker()
    tasks.ring_when_waits_end.delay()

    tasks.sweep()
    assert take_doorbells() == [], "the count one low hid the lost doorbell from beat's sweep"
    tasks.ring_when_waits_end.delay()
    tasks.sweep(at_start=True)
    assert take_doorbells() == tickets


def test_a_message_received_while_the_sweep_reads_leaves_the_count_as_the_queue(monkeypatch):
    # The sweep read the count, a worker received a message (counting it out), the sweep read the
    # queue: one message gone from both, but the sweep saw it gone from the queue only, took it for
    # lost, and set the count one below what the queue held from then on.
    open_waiting_tickets(1)
    purge_broker()
    doorbells._client().set(doorbells._count_key(), 0)  # the queue is empty, and the count says so
    tasks.reconcile_refunds.delay()
    tasks.expire_confirmations.delay()
    read_queue = doorbells.queued_in_broker

    def a_worker_receives_one_meanwhile() -> int:
        with app.connection_for_read() as conn:
            queue = app.amqp.queues[app.conf.task_default_queue](conn.default_channel)
            message = queue.get(no_ack=True)
        doorbells.received([], message_id=message.properties["correlation_id"])
        return read_queue()

    monkeypatch.setattr(doorbells, "queued_in_broker", a_worker_receives_one_meanwhile)
    tasks.sweep()
    monkeypatch.undo()

    queued = queued_messages()
    assert int(doorbells._client().get(doorbells._count_key())) >= queued, "the count fell below the queue"
