"""Beat's rounds queued while no worker runs are done once when a worker comes back, not once each.

Beat sends a sweep every few seconds (and the reconciler, the expiry of approvals and of questions
every minute or so), whether or not a worker takes them. With every worker down for an hour, a
thousand sweeps waited in the queue, and the worker that came back ran them back to back, each
reading every ticket with work, before the customers' doorbells queued behind them. A round with a
newer one of its kind queued behind it has nothing left to do that the newer one will not do: it is
passed over. The newest of each still runs, and what waits is done.
"""

from __future__ import annotations

import re

import pytest

from tests.agents.test_crash_recovery import at_rest, replies
from tests.agents.test_sweeps_ring_once_per_queued_doorbell import open_waiting_tickets, queued_messages
from tests.workers import purge_broker, wait_until
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(240)]

ROUNDS = ["agents.sweep", "agents.reconcile_refunds", "approvals.expire_due", "agents.expire_confirmations"]
EVERY_SECOND = {
    "AGENT_SWEEP_SECONDS": "1",
    "REFUND_RECONCILE_SECONDS": "1",
    "APPROVAL_EXPIRY_SECONDS": "1",
    "AGENT_CONFIRMATION_EXPIRY_SECONDS": "1",
}


def sent_by_beat(log: str, name: str) -> int:
    return len(re.findall(rf"Sending due task \S+ \({re.escape(name)}\)", log))


def done(log: str, name: str) -> int:
    """The rounds of this task a worker did (a round passed over returns nothing)."""
    return len(re.findall(rf"Task {re.escape(name)}\[[^]]+\] succeeded in [0-9.e-]+s: (?!None)", log))


def sent_by_the_worker(log: str, name: str) -> int:
    """Rounds the worker sent itself, beat being down (``support.celery.RoundsWhileBeatIsDown``)."""
    return log.count(f"{name}: no round of it was sent lately")


def test_a_worker_back_after_beat_queued_many_rounds_does_each_round_once(cluster):  # noqa: ANN001
    tickets = open_waiting_tickets(2)
    purge_broker()  # their doorbells are lost: only a sweep rings them

    beat = cluster.beat(**EVERY_SECOND)
    wait_until(lambda: all(sent_by_beat(beat.log(), name) >= 4 for name in ROUNDS), timeout=90,
               what="beat to queue four rounds of each kind", cluster=cluster)  # fmt: skip
    beat.stop()
    queued = {name: sent_by_beat(beat.log_path.read_text(), name) for name in ROUNDS}
    # What the broker holds, not what beat's log says it sent: beat stopped between its "Sending due
    # task" line and the broker taking the message has logged a round that was never queued.
    in_queue = queued_messages()

    worker = cluster.worker(**EVERY_SECOND)

    wait_until(lambda: all(at_rest(Ticket.objects.get(pk=pk)) for pk in tickets), timeout=90,
               what="the waiting tickets answered", cluster=cluster)  # fmt: skip

    def every_round_taken() -> bool:  # each round received is logged twice: received, then succeeded
        taken = sum(worker.log().count(f"Task {name}[") for name in ROUNDS)
        return queued_messages() == 0 and taken >= 2 * (in_queue + 1)  # and the sweep at start

    wait_until(every_round_taken, timeout=60, what="every queued round taken", cluster=cluster)
    log = worker.log()
    ran = {name: done(log, name) for name in ROUNDS}
    # The newest sweep queued is the one the worker asked for at its start; of beat's others, the last.
    # Those the worker sent itself since, beat being down, are new rounds (the newest then): each done too.
    own = {name: sent_by_the_worker(log, name) for name in ROUNDS}
    assert all(1 <= ran[name] <= 1 + own[name] for name in ROUNDS), (
        f"rounds done {ran} of those queued {queued} (and one sweep at start, and {own} the worker sent itself)"
    )
    for pk in tickets:
        assert len(replies(Ticket.objects.get(pk=pk))) == 1
