"""A worker sends one of beat's rounds only when beat sent none lately, and of many workers one does
(support.celery.RoundsWhileBeatIsDown; with real workers:
tests/agents/test_running_workers_sweep_while_beat_is_down.py)."""

from __future__ import annotations

import pytest

from agents import tasks
from support import celery
from support.pauses import lift_all
from tests.workers import purge_broker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def beat_quiet():  # noqa: ANN201
    client, prefix = celery._rounds_client()
    key = celery._sent_lately_key(prefix, "agents.sweep")
    client.delete(key)
    yield client, key
    client.delete(key)
    purge_broker()
    lift_all()


def test_a_worker_sends_no_round_while_beat_sends_them(beat_quiet):  # noqa: ANN001
    tasks.sweep.apply_async()  # beat's round, taken by the broker

    assert celery.send_round_if_beat_is_quiet("agents.sweep") is False


def test_of_workers_looking_while_beat_is_quiet_one_sends_the_round(beat_quiet, settings):  # noqa: ANN001
    client, key = beat_quiet

    assert [celery.send_round_if_beat_is_quiet("agents.sweep") for _ in range(3)] == [True, False, False]
    assert 0 < client.ttl(key) <= celery.ROUND_INTERVALS_MISSED * settings.AGENT_SWEEP_SECONDS


def test_only_rounds_sent_every_so_many_seconds_are_looked_at():
    from datetime import timedelta

    from celery.schedules import crontab, schedule

    assert celery._round_seconds(3.0) == 3.0
    assert celery._round_seconds(timedelta(minutes=1)) == 60.0
    assert celery._round_seconds(schedule(timedelta(seconds=30))) == 30.0
    assert celery._round_seconds(crontab(minute="*/5")) is None
