"""A worker killed right after it gave up on a refund, before it told anyone, with real workers.

The worker records that it gives up on the refund (refused by the provider, or never confirmed) and
dies (SIGKILL at ``after_refund_given_up``) before the transaction that tells the customer and hands
the ticket to a person. Whoever carries on (the worker that takes the ticket over, or beat's
reconciler first) tells the customer once, in plain words, and a person gets the ticket: the refund
is not left failed with the customer told nothing and no one asked to check it.
"""

from __future__ import annotations

import signal

import pytest

from agents import refunds as refund_module
from agents.models import AgentRun, CallStatus, Refund, RefundStatus, RunStatus, ToolCall
from tests.agents.test_money_path import assert_money_invariants, paid, public_words
from tests.conftest import make_customer, make_order
from tests.workers import Cluster, wait_until
from tickets import services as ticket_services
from tickets.models import Ticket, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(180)]

REFUSED = "could not be completed by our payment provider"
UNCONFIRMED = "couldn't confirm your refund"


def at_rest(ticket: Ticket) -> bool:
    runs = AgentRun.objects.filter(ticket=ticket)
    return runs.exists() and not runs.filter(status=RunStatus.RUNNING).exists()


def killed_after_giving_up(cluster: Cluster, ticket: Ticket) -> Refund:
    doomed = cluster.worker(faults="after_refund_given_up", REFUND_RETRY_FIRST_WAIT_MS="5",
                            REFUND_RETRY_MAX_WAIT_MS="20")  # fmt: skip
    doomed.wait_dead(timeout=60)
    assert doomed.popen.returncode == -signal.SIGKILL, doomed.log()
    refund = Refund.objects.get(ticket=ticket)
    assert refund.escalated_at is not None  # given up on, in the ledger
    assert not public_words(ticket)  # and nobody told yet
    return refund


def test_a_refund_the_provider_refused_is_told_and_handed_to_a_person_after_the_worker_dies_giving_up(
    sandbox,  # noqa: ANN001
    cluster,  # noqa: ANN001
) -> None:
    customer = make_customer()
    order = make_order(customer, number="GU-5101", total_cents=5000)
    # The provider holds a smaller payment than our order says: it refuses a refund of $50.00.
    sandbox.seed_payment(order.payment_reference, 1000, order.currency)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order GU-5101")

    refund = killed_after_giving_up(cluster, ticket)
    assert refund.status == RefundStatus.FAILED
    cluster.worker()
    cluster.beat()
    wait_until(lambda: at_rest(ticket), timeout=60, what="the ticket to come to rest", cluster=cluster)

    words = public_words(ticket)
    assert sum(REFUSED in w for w in words) == 1, words
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN, words
    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    assert call.status == CallStatus.FAILED, (call.status, call.error)
    assert paid(sandbox, order) == []
    assert_money_invariants(sandbox)


def test_an_unconfirmed_refund_the_reconciler_settles_after_the_worker_dies_giving_up_is_told_to_the_customer(
    sandbox,  # noqa: ANN001
    cluster,  # noqa: ANN001
) -> None:
    customer = make_customer()
    order = make_order(customer, number="GU-5102", total_cents=5000)
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    sandbox.fault("error_before_commit", count=100)  # no try reaches the provider
    sandbox.fault("error_before_commit", method="GET", path="/v1/refunds*", count=100)  # nor any lookup
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Please refund order GU-5102")

    refund = killed_after_giving_up(cluster, ticket)
    assert refund.status == RefundStatus.UNCERTAIN
    # Beat's reconciler comes first: the provider still cannot be asked, and the refund is past its bound.
    refund_module.reconcile_open_refunds(older_than_seconds=0)
    cluster.worker()
    cluster.beat()
    wait_until(lambda: at_rest(ticket), timeout=60, what="the ticket to come to rest", cluster=cluster)

    words = public_words(ticket)
    assert sum(UNCONFIRMED in w or REFUSED in w for w in words) == 1, words
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN, words
    assert paid(sandbox, order) == []
    sandbox.clear_faults()
    assert_money_invariants(sandbox)
