"""A customer who writes while a run waits is told so once per message, across the run's pauses.

A refund above what staff must review waits for an approval; a customer who writes meanwhile is told
"still under review" (``waiting:<message>``). After the approval the same run waits for the
customer's Confirm: a customer who writes again is told too (the first message is not told twice),
and the ticket is not rung again and again.
"""

from __future__ import annotations

import pytest

from agents import tasks
from agents.confirmation import WAITING_NOTE as CONFIRM_WAITING_NOTE
from agents.models import AgentRun, RunStatus
from agents.runner import advance
from approvals import services as approval_services
from approvals.models import ApprovalRequest
from tests.agents.test_money_path import order_for, write
from tests.approvals.conftest import make_staff
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Message

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.customer_confirms,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def test_a_message_during_the_confirmation_after_an_approval_is_acknowledged(sandbox, monkeypatch):  # noqa: ANN001
    bob = make_customer(flagged=True)  # every refund for bob is reviewed by staff
    order_for(bob, "B-8802", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=bob, subject="Refund", body="Please refund order B-8802")
    assert advance(ticket.pk).state == RunStatus.WAITING_APPROVAL

    # During the review the customer writes; they are told it is under review.
    first = write(ticket, "Any news on my refund?")
    advance(ticket.pk)
    assert Message.objects.filter(ticket=ticket, client_msg_id=f"waiting:{first.pk}").exists()

    # Staff approve: the same run now waits for the customer's Confirm.
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=approval.pk, user=make_staff("first-approver", can_decide=True),
                                      approve=True)  # fmt: skip
    advance(ticket.pk)
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.WAITING_CONFIRMATION

    # The customer writes again before pressing a button (a typed question, not an answer).
    second = write(ticket, "Is the amount the full order?")
    try:
        advance(ticket.pk)
        crashed = None
    except Exception as exc:  # noqa: BLE001 - what the worker's task would raise
        crashed = exc
    assert crashed is None, f"the worker's pass failed on a message written during the confirmation: {crashed!r}"
    assert Message.objects.filter(
        ticket=ticket, client_msg_id=f"waiting:{second.pk}", body=CONFIRM_WAITING_NOTE
    ).exists(), "the customer's message during the confirmation was never acknowledged"
    assert ticket.pk not in tasks.tickets_needing_a_ring(), "the sweeper rings this ticket on every sweep"


@pytest.mark.workers
def test_with_real_workers_the_message_is_acknowledged_and_the_ticket_not_rung_forever(sandbox, cluster):  # noqa: ANN001
    bob = make_customer(flagged=True)
    order_for(bob, "B-8803", 64900, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=bob, subject="Refund", body="Please refund order B-8803")
    advance(ticket.pk)
    first = write(ticket, "Any news on my refund?")
    advance(ticket.pk)
    approval = ApprovalRequest.objects.get(ticket=ticket)
    approval_services.approval_decide(approval_id=approval.pk, user=make_staff("second-approver", can_decide=True),
                                      approve=True)  # fmt: skip
    advance(ticket.pk)
    assert AgentRun.objects.get(ticket=ticket).status == RunStatus.WAITING_CONFIRMATION
    assert Message.objects.filter(ticket=ticket, client_msg_id=f"waiting:{first.pk}").exists()

    # A real worker and beat (sweeping every second) take it from here.
    worker = cluster.worker(REFUND_CUSTOMER_CONFIRMATION="1")
    cluster.beat()
    second = write(ticket, "Is the amount the full order?")

    acknowledged = Message.objects.filter(ticket=ticket, client_msg_id=f"waiting:{second.pk}")
    told = _eventually(acknowledged.exists, 8)
    failures = sum(
        "raised unexpected" in line and "already used for a different message" in line
        for line in worker.log().splitlines()
    )
    assert told and failures == 0, (
        f"message written during the confirmation acknowledged: {told}; the worker's pass failed {failures} "
        "time(s) in 8 s, the sweeper ringing the ticket again after each"
    )


def _eventually(predicate, timeout: float) -> bool:  # noqa: ANN001
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False
