"""A take-over and hand-back while no worker is up (a deploy), with real worker processes and the
payment sandbox: the refund the person stopped is not paid when the customer presses Confirm."""

from __future__ import annotations

import pytest

from agents.models import AgentRun, CallStatus, RunStatus
from tests.agents.test_money_gates import confirm, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(180)]


def test_a_take_over_and_hand_back_during_a_deploy_does_not_let_the_stopped_refund_be_paid(sandbox, cluster, person):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "R-2202", 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $50.00 on order R-2202"
    )
    old = cluster.worker(REFUND_CUSTOMER_CONFIRMATION="1")
    wait_until(
        lambda: [c for c in refund_calls(ticket) if c.status == CallStatus.AWAITING_CONFIRMATION],
        timeout=60, what="the question to the customer", cluster=cluster,
    )  # fmt: skip
    old.stop()  # a deploy: no worker for a moment
    ticket_services.ticket_take_over(ticket=ticket, user=person)  # the person stops the refund...
    ticket_services.ticket_hand_back(ticket=ticket, user=person)  # ...and gives the chat back
    cluster.worker(REFUND_CUSTOMER_CONFIRMATION="1")
    cluster.beat()
    (call,) = refund_calls(ticket)
    status = confirm(ticket, call)
    wait_until(
        lambda: AgentRun.objects.filter(ticket=ticket).exclude(status__in=[RunStatus.RUNNING]).count()
        == AgentRun.objects.filter(ticket=ticket).count()
        and refund_calls(ticket)[0].status not in {CallStatus.AWAITING_CONFIRMATION, CallStatus.STARTED},
        timeout=60, what="the agent to settle", cluster=cluster,
    )  # fmt: skip
    assert paid(sandbox, order) == [], f"the refund the person stopped was paid after the Confirm (HTTP {status})"
