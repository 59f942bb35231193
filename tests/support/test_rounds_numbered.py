"""A round of beat's is passed over only when a newer one of its kind was sent (support.celery):
whatever keeps the number from being read, the round is done, as before rounds were numbered."""

from __future__ import annotations

import pytest
import redis

from agents import tasks
from support import celery
from support.pauses import lift_all

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def last_sent():  # noqa: ANN201
    client, prefix = celery._rounds_client()
    key = f"{prefix}:rounds-sent:agents.sweep"
    client.delete(key)
    yield lambda number: client.set(key, number)
    client.delete(key)
    lift_all()


def test_a_round_behind_a_newer_one_is_passed_over_and_the_newest_is_done(last_sent):  # noqa: ANN001
    last_sent(7)
    assert tasks.sweep.apply(headers={celery.ROUND_HEADER: 6}).get() is None
    assert tasks.sweep.apply(headers={celery.ROUND_HEADER: 7}).get() == 0


def test_a_round_whose_count_redis_lost_is_done(last_sent):  # noqa: ANN001
    assert tasks.sweep.apply(headers={celery.ROUND_HEADER: 6}).get() == 0


def test_a_round_is_done_while_redis_cannot_be_read(last_sent, monkeypatch):  # noqa: ANN001
    last_sent(7)
    client, _ = celery._rounds_client()

    def unreachable(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(client, "get", unreachable)
    assert tasks.sweep.apply(headers={celery.ROUND_HEADER: 6}).get() == 0


def test_a_round_is_not_passed_over_for_a_newer_one_the_broker_never_took(last_sent):  # noqa: ANN001
    """Beat on a host cut from the broker (RabbitMQ; Redis, where rounds are counted, still reached), or
    a broker refusing publishes: each round beat tried was numbered, none was sent. The sweep a worker
    asked for at its start (the one that rings every ticket whose doorbell the broker lost) was passed
    over for a "newer round queued" that was never queued, and the customer waited for beat's return."""
    from tests.conftest import make_customer
    from tests.workers import purge_broker
    from tickets import services as ticket_services

    ticket, _ = ticket_services.ticket_open(customer=make_customer(), subject="Help", body="Hello there")
    purge_broker()  # its doorbell is lost with the broker's queue
    client, prefix = celery._rounds_client()
    try:
        tasks.sweep.apply_async(kwargs={"at_start": True})  # a worker's start sweep, queued
        number = int(client.get(f"{prefix}:rounds-sent:agents.sweep"))
        # Beat's next round: the broker cannot be reached from its host.
        with celery.app.connection_for_write(url="redis://127.0.0.1:1/0") as cut:
            with pytest.raises(Exception):  # noqa: B017, PT011 - kombu's and the transport's errors alike
                tasks.sweep.apply_async(connection=cut, retry=False)

        # The worker takes the start sweep up.
        rang = tasks.sweep.apply(kwargs={"at_start": True}, headers={celery.ROUND_HEADER: number}).get()

        assert rang == 1, "the start sweep was passed over for a round the broker never took: the ticket is not rung"
        assert ticket.pk in tasks.tickets_needing_a_ring()
    finally:
        purge_broker()
