"""A run waiting out a backoff is carried on after its worker died, even while beat is down.

A failed step (here the model server's 429 with Retry-After) commits the end of its wait, then the
task schedules its retry. A worker killed in between (SIGKILL at ``before_lease_release``) never
schedules it: the doorbell it held is given back by the broker only after its visibility timeout
(an hour on Redis), and beat's sweeper is the only other ring. With beat down (a deploy that
restarts the workers first, a beat host lost), the fresh worker's own sweep at start found the run
in its wait and left it, and nothing rang it when the wait was over: the customer waited an hour.
A worker that starts now also rings each ticket waiting out a backoff when its wait ends.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from agents.llm import ModelError
from agents.models import AgentProfile, AgentRun, RunStatus
from agents.offline_model import OfflineDeterministicModel
from agents.profiles import active_profile
from tests.agents.test_crash_recovery import at_rest, open_ticket, replies
from tests.workers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(180)]

WAIT = 8  # the server's Retry-After, seconds: longer than a fresh worker takes to come up
# A worker sends beat's rounds itself once beat sent none for a few intervals (support.celery's
# RoundsWhileBeatIsDown): at 60 s, not before this test is over, so that it shows the retry alone.
NO_WORKERS_SWEEP_MEANWHILE = {"AGENT_SWEEP_SECONDS": "60"}


class SlowDownOnce:
    """A model server that answers its first request with 429 and Retry-After (once per test,
    across worker processes: a marker file), then as the offline model."""

    name = "slow-down-once"

    def __init__(self) -> None:
        self.inner = OfflineDeterministicModel(token_delay_ms=0)

    def complete(self, *, messages, tools, on_token=None):  # noqa: ANN001, ANN201
        try:
            Path(os.environ["SLOW_DOWN_ONCE_MARKER"]).touch(exist_ok=False)
        except FileExistsError:
            return self.inner.complete(messages=messages, tools=tools, on_token=on_token)
        raise ModelError("rate limited", retryable=True, status_code=429, retry_after=WAIT)


def test_a_run_whose_worker_died_before_scheduling_its_retry_is_carried_on_by_a_fresh_worker_without_beat(
    cluster, tmp_path
):
    AgentProfile.objects.filter(pk=active_profile().pk).update(
        model="tests.agents.test_backoff_without_beat.SlowDownOnce"
    )
    marker = str(tmp_path / "slowed-down")
    ticket = open_ticket("Where is my order A-8301?", "A-8301")

    doomed = cluster.worker(faults="before_lease_release", SLOW_DOWN_ONCE_MARKER=marker)
    doomed.wait_dead(timeout=60)
    assert doomed.popen.returncode == -signal.SIGKILL, doomed.log()
    run = AgentRun.objects.get(ticket=ticket)
    # A 429 is the endpoint's outage, counted on it rather than among the failures about the ticket.
    assert run.status == RunStatus.RUNNING and run.outage_failures == 1 and run.retry_not_before is not None

    cluster.worker(SLOW_DOWN_ONCE_MARKER=marker, **NO_WORKERS_SWEEP_MEANWHILE)  # no beat

    wait_until(lambda: at_rest(ticket), timeout=WAIT + 40, what="the ticket to come to rest", cluster=cluster)
    assert len(replies(ticket)) == 1 and "A-8301" in replies(ticket)[0]
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
