"""A worker restart carries on by itself (DESIGN.md, invariant 2; the promise: "a worker restart
reloads everything from Postgres by ticket ID and carries on").

The worker that took a ticket's doorbell is killed with SIGKILL while it works on the ticket. The
doorbell it held was never acknowledged: the broker gives it back only after its visibility
timeout (an hour on Redis). Beat's sweeper rings the ticket again within seconds, but beat is a
process of its own that may be down (a deploy that restarts the workers first, a beat host lost):
then the fresh worker sat idle and the customer waited an hour, though the ledger said what to do.
A worker that comes up now asks for one sweep, so it finds what the dead one left.
"""

from __future__ import annotations

import signal

import pytest

from tests.agents.test_crash_recovery import assert_no_step_generated_twice, at_rest, open_ticket, replies
from tests.workers import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(180)]


def test_a_fresh_worker_carries_on_a_ticket_its_dead_predecessor_left_without_beat(cluster):
    ticket = open_ticket("Where is my order A-8191?", "A-8191")
    doomed = cluster.worker(faults="after_step_stored")
    doomed.wait_dead(timeout=60)
    assert doomed.popen.returncode == -signal.SIGKILL, doomed.log()
    assert not at_rest(ticket)

    cluster.worker()  # no beat

    wait_until(lambda: at_rest(ticket), timeout=45, what="the ticket to come to rest", cluster=cluster)
    assert_no_step_generated_twice(ticket)
    assert len(replies(ticket)) == 1 and "A-8191" in replies(ticket)[0]
