"""A worker frozen in the middle of a reconciler round does not stop every later round.

Rounds of the reconciler run one at a time: a round holds a session-level advisory lock, and a
tick that finds it held does nothing. A worker stopped mid-round (SIGSTOP, a frozen VM) keeps its
connection alive (the kernel answers TCP keepalives for a stopped process) and, between two
statements, no transaction open for the idle-in-transaction timeout to end: its lock stayed
held for as long as it was frozen, and no refund was settled by anyone. A refund the bank paid
stayed "pending" in the ledger; one with no answer was never handed to a person. A lock whose
holder's session has been idle far longer than any step of a round (a provider call ends within
PAYMENTS_TIMEOUT_SECONDS) is now passed over: the next tick's round goes on.
"""

from __future__ import annotations

import signal

import pytest

from agents.models import Refund, RefundStatus
from agents.runner import advance
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import order_for
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(180)]

FAST_ROUNDS = {
    "REFUND_RECONCILE_SECONDS": "1",
    "PAYMENTS_TIMEOUT_SECONDS": "2",
    "REFUND_RECONCILE_STALLED_SECONDS": "3",
}


def test_a_worker_frozen_mid_round_does_not_stop_the_reconciler(cluster, sandbox, monkeypatch):  # noqa: ANN001
    customer = make_customer()
    order_for(customer, "RF-1001", 5000, sandbox)
    sandbox.fault("refund_status:pending")  # the bank has not settled it yet
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund RF-1001 please")
    advance(ticket.pk, model=Refunds(("RF-1001", 1000)))
    refund = Refund.objects.get(ticket=ticket)
    assert refund.status == RefundStatus.PENDING
    sandbox.settle_refund(refund.provider_refund_id, "succeeded")  # the bank pays it

    # The first round asks the provider, which takes its time; the worker is frozen meanwhile.
    sandbox.fault("latency:1500", method="GET", path="/v1/refunds")
    for name, value in FAST_ROUNDS.items():
        monkeypatch.setenv(name, value)
    frozen = cluster.worker(**FAST_ROUNDS)
    cluster.beat()
    wait_until(lambda: not sandbox.faults(), timeout=60, what="a round to ask the provider", cluster=cluster)
    frozen.signal(signal.SIGSTOP)
    refund.refresh_from_db()
    assert refund.status == RefundStatus.PENDING  # its round had not settled it

    cluster.worker(**FAST_ROUNDS)
    wait_until(
        lambda: Refund.objects.get(pk=refund.pk).status == RefundStatus.SUCCEEDED,
        timeout=90,
        what="a round of another worker to record the refund the bank paid",
        cluster=cluster,
    )
    frozen.signal(signal.SIGCONT)
