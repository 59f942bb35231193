"""A refund due while the payment provider is out of reach is paid once when it is back.

The refund's tries at the provider (four, all under its key, a few seconds in all) ended in "We
couldn't confirm your refund" and a person, for a provider that refused connections for more than
those seconds: the refund was left uncertain and never paid by the agent, although nothing was
wrong with it. Now an unreachable provider is an outage of a dependency (AGENT_OUTAGE_PATIENCE_SECONDS):
the refund stays submitted under its key, and the run tries it again with the backoff (asking the
provider first what happened under the key), so it is paid exactly once when the provider is back,
and the customer is answered once. Past the patience it is left to the reconciler and a person, as
before; never paid twice. Real worker and beat processes; the provider reached through a proxy the
test cuts.
"""

from __future__ import annotations

import time
from urllib.parse import urlparse

import pytest

from agents.models import AgentRun, Refund, RefundStatus, RunStatus
from agents.services import DELAYED_NOTE, PARKED_NOTE
from tests.agents.test_money_path import assert_money_invariants, at_rest, order_for, paid
from tests.conftest import make_customer
from tests.workers import TcpProxy, wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(300)]


@pytest.fixture
def provider_proxy(sandbox):  # noqa: ANN001, ANN201
    target = urlparse(sandbox.base_url)
    proxy = TcpProxy(target.hostname, target.port).up()
    yield proxy
    proxy.down()


def refund_words(ticket) -> list[str]:  # noqa: ANN001
    return list(
        Message.objects.filter(ticket=ticket, is_public=True)
        .exclude(author_kind=AuthorKind.CUSTOMER)
        .values_list("body", flat=True)
    )


def test_a_refund_due_while_the_provider_is_down_is_paid_once_when_it_is_back(sandbox, provider_proxy, cluster):
    customer = make_customer()
    order = order_for(customer, "PD-8801", 5000, sandbox)
    provider_proxy.down()
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Broken", body="Please refund order PD-8801, it arrived broken."
    )
    env = {"STRIPE_API_BASE": f"http://127.0.0.1:{provider_proxy.port}", "PAYMENTS_TIMEOUT_SECONDS": "3"}
    cluster.worker(AGENT_OUTAGE_PATIENCE_SECONDS="240", AGENT_OUTAGE_RETRY_MAX_SECONDS="5", **env)
    cluster.beat()

    # The refund tried and refused more than once (its four tries each time), then a while more.
    wait_until(
        lambda: (
            Refund.objects.filter(order=order, attempts__gte=3).exists()
            or Refund.objects.filter(order=order).exclude(status=RefundStatus.SUBMITTED).exists()
        ),
        timeout=120,
        what="the refund tried three times",
        cluster=cluster,
    )
    time.sleep(5)
    ticket.refresh_from_db()
    assert ticket.status != TicketStatus.WITH_HUMAN, f"handed to a person during the outage: {refund_words(ticket)}"
    assert paid(sandbox, order) == []
    provider_proxy.up()

    wait_until(lambda: at_rest(ticket), timeout=90, what="the ticket to come to rest", cluster=cluster)
    time.sleep(3)  # a sweep or a reconciler round more: nothing is paid again
    assert [r["amount"] for r in paid(sandbox, order)] == [5000]
    [refund] = Refund.objects.filter(order=order)
    assert refund.status == RefundStatus.SUCCEEDED
    assert_money_invariants(sandbox)
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WAITING_ON_CUSTOMER
    words = refund_words(ticket)
    assert PARKED_NOTE not in words and not any("couldn't confirm" in w for w in words), words
    assert words.count(DELAYED_NOTE) <= 1
    agent = Message.objects.filter(ticket=ticket, author_kind=AuthorKind.AGENT)
    assert agent.count() == 1 and "PD-8801" in agent.get().body
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.COMPLETED


def test_a_refund_whose_provider_stays_down_past_the_patience_is_left_to_the_reconciler_and_never_paid_twice(
    sandbox, provider_proxy, cluster
):
    from agents import refunds as refund_module

    customer = make_customer()
    order = order_for(customer, "PD-8802", 5000, sandbox)
    provider_proxy.down()
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Broken", body="Please refund order PD-8802, it arrived broken."
    )
    env = {"STRIPE_API_BASE": f"http://127.0.0.1:{provider_proxy.port}", "PAYMENTS_TIMEOUT_SECONDS": "3"}
    cluster.worker(AGENT_OUTAGE_PATIENCE_SECONDS="15", AGENT_OUTAGE_RETRY_MAX_SECONDS="3", **env)
    cluster.beat()

    def parked() -> bool:
        ticket.refresh_from_db()
        return ticket.status == TicketStatus.WITH_HUMAN

    wait_until(parked, timeout=150, what="the ticket parked", cluster=cluster)
    provider_proxy.up()
    time.sleep(3)  # sweeps with the provider back: the agent does not pay behind the person
    assert paid(sandbox, order) == []
    [run] = AgentRun.objects.filter(ticket=ticket)
    assert run.status == RunStatus.FAILED and "AGENT_OUTAGE_PATIENCE_SECONDS" in run.outcome
    [refund] = Refund.objects.filter(order=order)
    assert refund.status in {RefundStatus.SUBMITTED, RefundStatus.UNCERTAIN}  # open: the reconciler's

    refund_module.reconcile_open_refunds(older_than_seconds=0)  # beat's reconciler, past its bound
    refund.refresh_from_db()
    assert refund.status == RefundStatus.FAILED  # the provider has nothing under its key
    assert paid(sandbox, order) == []
    assert_money_invariants(sandbox)
    words = refund_words(ticket)
    assert words.count(PARKED_NOTE) == 1
