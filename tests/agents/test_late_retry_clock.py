"""A retry is held by the worker that receives it for what is left of its wait on the database's clock.

A failed step commits the end of its wait on the database's clock, and its task schedules a retry
with a countdown. Celery turns the countdown into a time on the sending host's clock, and the worker
that receives the message holds it until its own clock reaches that time: a worker whose clock runs
90 s behind the sender's (and the database's) held a retry due in 8 s for 98 s. While beat was down
nothing else rang the ticket, and the customer waited for the worker's clock offset. (A worker whose
clock runs ahead runs it early: tests/agents/test_early_retry_clock.py.)
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import AgentProfile, AgentRun, RunStatus
from agents.profiles import active_profile
from agents.runner import advance
from agents.tasks import advance_ticket
from tests.agents.test_backoff_without_beat import NO_WORKERS_SWEEP_MEANWHILE, WAIT
from tests.agents.test_crash_recovery import at_rest, open_ticket, replies
from tests.workers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(180)]

BEHIND = timedelta(seconds=90)


def test_a_retry_received_by_a_worker_whose_clock_runs_behind_is_carried_on_when_its_wait_ends(
    cluster, monkeypatch, tmp_path
):
    marker = str(tmp_path / "slowed-down")
    monkeypatch.setenv("SLOW_DOWN_ONCE_MARKER", marker)
    AgentProfile.objects.filter(pk=active_profile().pk).update(
        model="tests.agents.test_backoff_without_beat.SlowDownOnce"
    )
    worker = cluster.worker(SLOW_DOWN_ONCE_MARKER=marker, **NO_WORKERS_SWEEP_MEANWHILE)  # no beat
    start_sweep = re.compile(r"agents\.ring_when_waits_end\[[^]]+\] succeeded")
    wait_until(lambda: start_sweep.search(worker.log()), timeout=60, what="the worker's start sweep", cluster=cluster)

    # The first pass, on a host whose clock is the database's: the server's 429, a wait of WAIT s.
    monkeypatch.setattr("agents.tasks._send_doorbell", lambda ticket_id: None)
    ticket = open_ticket("Where is my order A-8511?", "A-8511")
    first = advance(ticket.pk)
    assert first.state == "retry" and first.retry_in is not None and first.retry_in <= WAIT
    # Its retry, due in WAIT s on the sender's clock, as the worker 90 s behind reads it.
    advance_ticket.apply_async(args=[ticket.pk], eta=timezone.now() + timedelta(seconds=first.retry_in) + BEHIND)

    wait_until(lambda: at_rest(ticket), timeout=WAIT + 30, what="the ticket to come to rest", cluster=cluster)
    assert len(replies(ticket)) == 1 and "A-8511" in replies(ticket)[0]
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED
