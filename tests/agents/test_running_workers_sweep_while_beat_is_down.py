"""What a killed worker held is carried on by the workers still running, while beat is down.

Two workers run, beat does not (a deploy that stops it, its host lost). One worker is killed with
SIGKILL while it holds a ticket's message: the doorbell it was working on, or a retry it holds until
the ticket's wait ends. The broker gives that message back only after its visibility timeout (an
hour on Redis). A worker swept only when it connected to the broker, so the one still running never
looked, and the customer waited an hour. Now a running worker sends beat's rounds itself when none
was sent for a few of their intervals (``support.celery.RoundsWhileBeatIsDown``).
"""

from __future__ import annotations

import json
import signal
import time

import pytest
import redis
from django.conf import settings

from agents.models import AgentProfile, AgentRun
from agents.profiles import active_profile
from tests.agents.test_backoff_without_beat import WAIT
from tests.agents.test_crash_recovery import assert_no_step_generated_twice, at_rest, open_ticket, replies
from tests.workers import Cluster, Proc, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(180)]


def workers_up(cluster: Cluster, **env: str) -> list[Proc]:
    """Two workers, ready, their sweeps on connecting done (they find nothing: no ticket yet)."""
    workers = [cluster.worker(**env) for _ in range(2)]
    for worker in workers:
        wait_until(lambda w=worker: "ready." in w.log(), timeout=60, what=f"{worker.name} to be ready")
    time.sleep(3)
    return workers


def retry_held() -> bool:
    """A worker holds a message due later (a retry), received and not yet acknowledged."""
    held = redis.Redis.from_url(settings.REDIS_URL).hvals("unacked")
    return any(json.loads(message)[0]["headers"].get("eta") for message in held)


def holding_a_retry(worker: Proc) -> bool:
    """The last message of the agent's this worker logged was received, not yet run: the retry."""
    lines = [line for line in worker.log().splitlines() if "agents.advance_ticket[" in line]
    return bool(lines) and lines[-1].endswith("received")


def test_a_doorbell_held_by_a_killed_worker_is_carried_on_by_a_running_one_while_beat_is_down(cluster):
    workers = workers_up(cluster, faults="after_step_stored")  # whichever takes the doorbell dies, once

    ticket = open_ticket("Where is my order A-8711?", "A-8711")
    killed = wait_until(
        lambda: next((w for w in workers if not w.alive()), None), timeout=60, what="a worker killed", cluster=cluster
    )
    assert killed.popen.returncode == -signal.SIGKILL, killed.log()

    wait_until(lambda: at_rest(ticket), timeout=45, what="the ticket to come to rest", cluster=cluster)
    assert_no_step_generated_twice(ticket)
    assert len(replies(ticket)) == 1 and "A-8711" in replies(ticket)[0]


def test_a_retry_held_by_a_killed_worker_is_carried_on_by_a_running_one_while_beat_is_down(cluster, tmp_path):
    AgentProfile.objects.filter(pk=active_profile().pk).update(
        model="tests.agents.test_backoff_without_beat.SlowDownOnce"
    )
    workers = workers_up(cluster, SLOW_DOWN_ONCE_MARKER=str(tmp_path / "slowed-down"))

    ticket = open_ticket("Where is my order A-8611?", "A-8611")
    wait_until(
        lambda: AgentRun.objects.filter(ticket=ticket, retry_not_before__isnull=False).exists() and retry_held(),
        timeout=60, what="a worker to hold the retry", cluster=cluster,
    )  # fmt: skip
    holder = wait_until(
        lambda: next((w for w in workers if holding_a_retry(w)), None), timeout=5, what="the retry's holder"
    )
    holder.signal(signal.SIGKILL)

    wait_until(lambda: at_rest(ticket), timeout=WAIT + 40, what="the ticket to come to rest", cluster=cluster)
    assert len(replies(ticket)) == 1 and "A-8611" in replies(ticket)[0]


def test_workers_send_no_round_of_their_own_while_beat_sends_them(cluster):
    from tests.agents.test_rounds_queued_while_no_worker_runs import EVERY_SECOND, ROUNDS, sent_by_beat

    beat = cluster.beat(**EVERY_SECOND)
    wait_until(lambda: all(sent_by_beat(beat.log(), name) for name in ROUNDS), timeout=60, what="beat's rounds")
    worker = cluster.worker(**EVERY_SECOND)
    wait_until(lambda: "ready." in worker.log(), timeout=60, what="the worker to be ready")

    time.sleep(8)  # eight intervals of every round

    assert "no round of it was sent lately" not in worker.log(), worker.log()
    assert beat.alive() and sent_by_beat(beat.log(), "agents.sweep") >= 8


def test_a_running_worker_sends_each_of_beats_rounds_while_beat_is_down(cluster):
    """The expiry of approvals and of the customer's questions, and the refunds' reconciling, too."""
    from tests.agents.test_rounds_queued_while_no_worker_runs import EVERY_SECOND, ROUNDS, done

    worker = cluster.worker(**EVERY_SECOND)  # no beat

    def each_round_sent_and_done_twice() -> bool:
        log = worker.log()
        return all(f"{name}: no round of it was sent lately" in log and done(log, name) >= 2 for name in ROUNDS)

    wait_until(
        each_round_sent_and_done_twice, timeout=60, what="each round sent by the worker and done", cluster=cluster
    )
