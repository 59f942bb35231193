"""The reconciler decides on a refund as it is when it writes, not as it read it.

The reconciler reads an old submitted refund, finds nothing at the provider under its key and no
worker on the ticket; a worker then takes the ticket and pays the refund under the same key (a
retry of the same call). The reconciler's write sees it: the refund is succeeded, nobody is told
it could not be confirmed, and the ticket stays with the agent. (With the worker's try still in
flight, its submitted write has moved the refund on: it is not failed under the worker.)
"""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from agents import refunds as refund_module
from agents.models import Refund, RefundStatus, TicketLease
from agents.runner import advance
from tests.agents.test_money_path import order_for, paid
from tests.agents.test_refunds import ScriptedRefund
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Message, Ticket, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def its_lease_expired_long_ago() -> None:
    """A worker that stopped long ago (``WorkerStopped``: the process going down) left its lease owned,
    as a killed worker does; by now it has expired."""
    TicketLease.objects.update(expires_at=timezone.now().replace(year=2000))


class WorkerStopped(BaseException):
    """The worker stops between committing the refund's intent and calling the provider."""


def refund_submitted_long_ago_never_sent(sandbox, monkeypatch, number: str):  # noqa: ANN001, ANN201
    """A $40 refund on a $100 order whose worker stopped after committing its intent, before the
    provider heard of it, long enough ago for the reconciler to give up on it. Returns (ticket,
    order, model, refund as the reconciler reads it)."""
    customer = make_customer()
    order = order_for(customer, number, 10000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=f"Refund $40 of {number}")
    model = ScriptedRefund(json.dumps({"order_number": number, "amount_cents": 4000}))
    provider = refund_module.provider()
    create = provider.create_refund

    def stop(**kwargs):  # noqa: ANN003, ANN202
        raise WorkerStopped()

    monkeypatch.setattr(provider, "create_refund", stop)
    with pytest.raises(WorkerStopped):
        advance(ticket.pk, model=model)
    monkeypatch.setattr(provider, "create_refund", create)
    its_lease_expired_long_ago()
    Refund.objects.update(updated_at=Refund.objects.get().created_at.replace(year=2000))
    refund = Refund.objects.select_related("order").get()  # the reconciler's read
    assert refund.status == RefundStatus.SUBMITTED
    return ticket, order, model, refund


def test_the_reconciler_does_not_escalate_a_refund_a_worker_paid_after_it_looked(sandbox, monkeypatch):  # noqa: ANN001
    ticket, order, model, refund = refund_submitted_long_ago_never_sent(sandbox, monkeypatch, "RC-1001")

    real_held = refund_module.ticket_lease_held

    def worker_takes_the_ticket_just_after(ticket_id):  # noqa: ANN001, ANN202
        held = real_held(ticket_id)  # nobody on it now...
        advance(ticket_id, model=model)  # ...and then a worker takes it and pays the refund under its key
        return held

    monkeypatch.setattr(refund_module, "ticket_lease_held", worker_takes_the_ticket_just_after)
    refund_module.refund_reconcile(refund=refund)

    refund = Refund.objects.get()
    assert [r["amount"] for r in paid(sandbox, order)] == [4000]
    assert refund.status == RefundStatus.SUCCEEDED
    told = list(
        Message.objects.filter(ticket=ticket, client_msg_id__startswith=f"refund-told:{refund.pk}:").values_list(
            "body", flat=True
        )
    )
    status = Ticket.objects.get(pk=ticket.pk).status
    assert (told, refund.escalated_at, status) == ([], None, status) and status != TicketStatus.WITH_HUMAN, (
        f"a refund paid once and recorded succeeded was escalated by the reconciler: customer told {told!r}, "
        f"ticket {status}"
    )
