"""A refund whose worker died before it was sent, then stopped by a person taking the ticket over, is
reviewed when the customer asks again -- like every other refund a person stopped.

README, "Refunds: the rules": a refund on an order on which a person **stopped one** (took over,
resolved or closed the ticket while it waited to be paid), in any ticket: asking again, in a new or
reopened ticket or once the first reason has gone, is reviewed.

Here the worker carrying the refund died right after the call's intent committed (before the provider
was asked). A person took the ticket over before any worker ran the refund again. The pass that ends
the run for the person writes the interrupted call down in the words of every stop by a person
(``agents.recovery._record_only``), so the same request asked again in a new ticket is reviewed.
"""

from __future__ import annotations

import pytest
from django.db import connection

from agents import faults
from agents.models import CallStatus, Refund, RefundStatus
from agents.runner import advance
from approvals.models import ApprovalRequest, ApprovalStatus
from tests.agents.conftest import WorkerDied
from tests.agents.test_money_gates import Refunds, refund_calls
from tests.agents.test_money_path import order_for, paid
from tests.conftest import make_customer
from tickets import services as ticket_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def _as_a_killed_worker_leaves_it(ticket_id: int) -> None:
    with connection.cursor() as cursor:  # held by nobody alive, expired
        cursor.execute(
            "UPDATE agents_ticketlease SET owner = 'dead-worker', expires_at = now() - interval '1 second' "
            "WHERE ticket_id = %s",
            [ticket_id],
        )


@pytest.mark.parametrize("then", ["take_over", "resolve"])
def test_a_refund_a_person_stopped_after_its_worker_died_is_reviewed_when_asked_again(
    sandbox, person, monkeypatch, then
):  # noqa: ANN001
    customer = make_customer()
    order = order_for(customer, "RV-2401", 5000, sandbox)  # $50.00: under every threshold
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $50 on RV-2401")
    hit = faults.hit

    def dies_after_the_intent(point: str) -> None:
        if point == "after_call_started":
            raise WorkerDied()
        hit(point)

    monkeypatch.setattr(faults, "hit", dies_after_the_intent)
    with pytest.raises(WorkerDied):
        advance(ticket.pk, model=Refunds(("RV-2401", 5000)))
    monkeypatch.setattr(faults, "hit", hit)
    _as_a_killed_worker_leaves_it(ticket.pk)
    (first,) = refund_calls(ticket)
    assert first.status == CallStatus.STARTED and paid(sandbox, order) == []

    # A person takes the ticket (or resolves it) before any worker tried the refund again.
    if then == "take_over":
        ticket_services.ticket_take_over(ticket=ticket.pk, user=person)
    else:
        ticket_services.ticket_resolve(ticket=ticket.pk, user=person)
    advance(ticket.pk, model=Refunds(("RV-2401", 5000)))  # the doorbell: the run ends for the person
    first.refresh_from_db()
    assert first.status != CallStatus.SUCCEEDED and paid(sandbox, order) == []  # the person stopped it

    # The customer asks again for the same refund, in a new ticket.
    second, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $50 on RV-2401")
    advance(second.pk, model=Refunds(("RV-2401", 5000)))

    (again,) = refund_calls(second)
    approved = set(
        ApprovalRequest.objects.filter(status=ApprovalStatus.APPROVED).values_list("tool_call_id", flat=True)
    )
    unreviewed = [
        r.amount_cents
        for r in Refund.objects.filter(order=order, status=RefundStatus.SUCCEEDED)
        if r.tool_call_id not in approved
    ]
    assert again.approval_required and unreviewed == [], (
        "a refund a person stopped (its worker had died before sending it) was asked again in a new ticket "
        f"and paid without a staff review: paid {unreviewed}; first call {first.status}: {first.error!r}; "
        f"second call {again.status}, approval_required={again.approval_required}"
    )
