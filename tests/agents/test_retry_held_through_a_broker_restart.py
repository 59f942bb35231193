"""A retry a worker holds is carried on after the broker restarts without its data, even while beat is down.

A failed step (the model server's 429 with Retry-After) commits the end of its wait, and its task
schedules a retry with a countdown. The worker that receives that message holds it until it is due;
the broker keeps it as unacknowledged. When the broker goes away the worker drops what it holds
(the broker gives it back on reconnect, Celery counts on it), and a broker restarted without its
data (a flushed Redis, a RabbitMQ whose queue was not durable) gives nothing back. The worker's
sweep at start rang such waits, but a worker that reconnects does not start again: with beat down,
the customer was never answered. A worker now sweeps, as it does at start, after each reconnect.
"""

from __future__ import annotations

import json

import pytest
import redis
from django.conf import settings

from agents.models import AgentProfile, AgentRun, RunStatus
from agents.profiles import active_profile
from tests.agents.test_backoff_without_beat import NO_WORKERS_SWEEP_MEANWHILE, WAIT
from tests.agents.test_crash_recovery import at_rest, open_ticket, replies
from tests.workers import TcpProxy, purge_broker, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(180)]


@pytest.fixture
def broker_proxy():  # noqa: ANN201
    """The broker behind a forwarder the test can cut, as a broker that restarts."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    address = client.connection_pool.connection_kwargs
    proxy = TcpProxy(address.get("host", "127.0.0.1"), address.get("port", 6379), idle_timeout=None).up()
    yield proxy
    proxy.down()


def retry_held_by_the_worker() -> bool:
    """A message due later that the worker took and holds unacknowledged (the retry's countdown)."""
    held = redis.Redis.from_url(settings.REDIS_URL).hvals("unacked")
    return any(json.loads(message)[0]["headers"].get("eta") for message in held)


def test_a_retry_held_by_a_worker_is_carried_on_after_the_broker_restarts_without_its_data_and_beat_is_down(
    cluster, broker_proxy, tmp_path
):
    AgentProfile.objects.filter(pk=active_profile().pk).update(
        model="tests.agents.test_backoff_without_beat.SlowDownOnce"
    )
    ticket = open_ticket("Where is my order A-8411?", "A-8411")
    database = settings.REDIS_URL.rsplit("/", 1)[-1]
    broker = f"redis://127.0.0.1:{broker_proxy.port}/{database}"
    worker = cluster.worker(
        CELERY_BROKER_URL=broker, SLOW_DOWN_ONCE_MARKER=str(tmp_path / "slowed-down"), **NO_WORKERS_SWEEP_MEANWHILE
    )  # no beat

    wait_until(
        lambda: (
            AgentRun.objects.filter(ticket=ticket, retry_not_before__isnull=False).exists()
            and retry_held_by_the_worker()
        ),
        timeout=60,
        what="the worker to hold the run's retry",
        cluster=cluster,
    )
    broker_proxy.down()  # the broker stops, and comes back without its data
    wait_until(lambda: "Connection to broker lost" in worker.log(), timeout=30, what="the worker to see the broker go")
    purge_broker()
    broker_proxy.up()

    wait_until(lambda: at_rest(ticket), timeout=WAIT + 40, what="the ticket to come to rest", cluster=cluster)
    assert len(replies(ticket)) == 1 and "A-8411" in replies(ticket)[0]
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED
