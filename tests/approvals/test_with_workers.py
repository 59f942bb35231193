"""Approvals with real worker processes and the payment sandbox as a separate process."""

from __future__ import annotations

import time

import pytest
import redis
from django.conf import settings
from django.test import Client

from agents.conversation import request_of
from agents.models import AgentRun, CallStatus, ModelStep, RunStatus, StepStatus, ToolCall
from agents.runner import advance
from agents.tasks import tickets_needing_a_ring
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.test_refunds import ScriptedRefund
from tests.approvals.test_approvals import provider_refunds, refund_ticket, replies
from tests.conftest import make_customer, make_order
from tests.workers import purge_broker, wait_until
from tickets import services as ticket_services

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.workers, pytest.mark.timeout(300)]


def decide_over_http(approver, approval: ApprovalRequest, decision: str, note: str = "") -> None:  # noqa: ANN001
    client = Client()
    client.force_login(approver)
    # The amount is confirmed as the dashboard asks above settings.APPROVAL_CONFIRM_ABOVE_CENTS.
    data = {"decision": decision, "note": note, "confirm_amount": str(approval.amount_cents)}
    response = client.post(f"/staff/approvals/{approval.pk}/decide/", data)
    assert response.status_code == 302


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_a_paused_refund_resumes_on_the_staff_decision_end_to_end(sandbox, cluster, approver, decision):
    cluster.worker()
    ticket, order = refund_ticket(sandbox, number="W-1001" if decision == "approve" else "W-1002")
    wait_until(
        lambda: ApprovalRequest.objects.filter(ticket=ticket).exists(), timeout=60, what="the pause", cluster=cluster
    )
    approval = ApprovalRequest.objects.get(ticket=ticket)

    decide_over_http(approver, approval, decision, note="not eligible")
    wait_until(lambda: len(replies(ticket)) == 1, timeout=60, what="the reply after the decision", cluster=cluster)

    call = ToolCall.objects.get(ticket=ticket, name="issue_refund")
    if decision == "approve":
        assert call.status == CallStatus.SUCCEEDED
        assert len(provider_refunds(sandbox, order)) == 1
        assert "I've refunded $649.00" in replies(ticket)[0]
    else:
        assert call.status == CallStatus.REJECTED
        assert provider_refunds(sandbox, order) == []
        assert "not eligible" in replies(ticket)[0]


def test_two_hundred_paused_tickets_hold_no_worker_and_a_new_ticket_is_served(sandbox, cluster, approver):
    paused, orders = [], []
    customer = make_customer()
    for n in range(200):
        order = make_order(customer, total_cents=64900, number=f"W-2{n:03d}")
        ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=f"Refund {order.number}")
        # Straight to the refund call (no lookup step first): same pause, fewer steps to set up.
        advance(ticket.pk, model=ScriptedRefund(f'{{"order_number": "{order.number}", "amount_cents": 64900}}'))
        paused.append(ticket)
        orders.append(order)
    sandbox.seed_payment(orders[0].payment_reference, 64900, "usd")  # the one approved below
    assert AgentRun.objects.filter(status=RunStatus.WAITING_APPROVAL).count() == 200
    assert not set(tickets_needing_a_ring()) & {t.pk for t in paused}  # the sweeper leaves them alone
    purge_broker()

    worker = cluster.worker()
    cluster.beat()
    customer = make_customer()
    make_order(customer, number="W-3001")
    fresh, _ = ticket_services.ticket_open(customer=customer, subject="Order", body="Where is my order W-3001?")
    wait_until(lambda: len(replies(fresh)) == 1, timeout=60, what="the new ticket to be served", cluster=cluster)

    time.sleep(2)  # a few sweeps
    assert AgentRun.objects.filter(status=RunStatus.WAITING_APPROVAL).count() == 200
    assert redis.Redis.from_url(settings.REDIS_URL).llen("celery") == 0  # nothing queued or sleeping for them
    assert worker.alive()
    assert "paused" not in worker.log()  # no task was spent on a paused ticket

    one = ApprovalRequest.objects.get(ticket=paused[0])
    decide_over_http(approver, one, "approve")
    wait_until(lambda: len(replies(paused[0])) == 1, timeout=60, what="the approved ticket to resume", cluster=cluster)
    assert AgentRun.objects.filter(status=RunStatus.WAITING_APPROVAL).count() == 199


def test_a_deploy_while_paused_neither_loses_nor_breaks_the_pending_approval(sandbox, cluster, approver):
    old = cluster.worker()
    ticket, order = refund_ticket(sandbox, number="W-4001")
    wait_until(
        lambda: ApprovalRequest.objects.filter(ticket=ticket).exists(), timeout=60, what="the pause", cluster=cluster
    )
    old.stop()  # the deploy: every worker goes away...
    new_prompt = "You are the support agent (release 2). Keep answers short."
    cluster.worker(AGENT_SYSTEM_PROMPT=new_prompt)  # ...and comes back with new code and a changed prompt
    approval = ApprovalRequest.objects.get(ticket=ticket)
    assert approval.status == ApprovalStatus.PENDING

    decide_over_http(approver, approval, "approve")
    wait_until(lambda: len(replies(ticket)) == 1, timeout=60, what="the resumed run", cluster=cluster)

    assert len(provider_refunds(sandbox, order)) == 1
    run = AgentRun.objects.get(ticket=ticket)
    assert run.status == RunStatus.COMPLETED
    steps = list(ModelStep.objects.filter(run=run, status=StepStatus.COMPLETED).order_by("index"))
    # The run keeps the profile version it started with: a deploy with another prompt in the
    # environment changes nothing for it (AGENT_SYSTEM_PROMPT only seeds the first version).
    assert run.profile.version == 1
    assert new_prompt not in steps[0].request_messages[0]["content"]  # asked before the deploy
    assert all(new_prompt not in str(m) for m in request_of(steps[-1]))  # and after it


def _approve_as_the_card_shows(approver, approval: ApprovalRequest) -> str:  # noqa: ANN001
    """Read the dashboard, then press the card's Approve, sending back what the card showed of the payment
    provider's refunds. Returns the card's page."""
    client = Client()
    client.force_login(approver)
    page = client.get("/staff/approvals/").content.decode()
    card = page.split(f'id="approval-{approval.pk}"', 1)[1]
    shown = card.split('name="provider_seen" value="', 1)[1].split('"', 1)[0]
    data = {"decision": "approve", "provider_seen": shown, "confirm_amount": str(approval.amount_cents)}
    assert client.post(f"/staff/approvals/{approval.pk}/decide/", data).status_code == 302
    return card


def test_money_refunded_at_the_provider_while_a_refund_waits_is_shown_before_it_is_paid(
    sandbox, provider, cluster, approver
):  # noqa: ANN001
    """With a real worker: a $300 refund waits for staff; meanwhile a colleague refunds $300 of the same
    payment in the provider's dashboard. The approval, from a card read before, does not pay it: it comes
    back to staff saying what the provider holds, and is paid once approved knowing it."""
    cluster.worker()
    customer = make_customer()
    order = make_order(customer, total_cents=60000, number="W-3001")
    sandbox.seed_payment(order.payment_reference, order.total_cents, order.currency)
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $300 of order W-3001, it arrived broken"
    )
    read = ApprovalRequest.objects.filter(ticket=ticket, status=ApprovalStatus.PENDING, evidence__has_key="provider")
    wait_until(read.exists, timeout=60, what="the request, the provider read", cluster=cluster)
    first = read.get()
    provider.create_refund(
        payment_reference=order.payment_reference, amount_cents=30000, currency="usd",
        idempotency_key="dashboard-w-3001", metadata={},
    )  # fmt: skip

    card = _approve_as_the_card_shows(approver, first)
    assert "payment provider holds" not in card
    again = read.exclude(pk=first.pk)
    wait_until(again.exists, timeout=60, what="the refund handed back to staff", cluster=cluster)
    assert [r["amount"] for r in provider_refunds(sandbox, order)] == [30000], "paid on top of the dashboard's"
    second = again.get()
    assert "$300.00" in second.reason and "since the request" in second.reason, second.reason

    card = _approve_as_the_card_shows(approver, second)
    assert "payment provider holds $300.00" in card
    call = ToolCall.objects.filter(ticket=ticket, name="issue_refund")
    wait_until(lambda: call.get().status == CallStatus.SUCCEEDED, timeout=60, what="the refund paid", cluster=cluster)
    assert sorted(r["amount"] for r in provider_refunds(sandbox, order)) == [30000, 30000]
