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
