"""The reconciler fails a refund the provider has no record of, tells the customer and hands the ticket to
a person in one transaction. A worker that takes the ticket meanwhile (recovery: the refund call was
interrupted) waits for it, then finds a person has the ticket and sends nothing: a refund is never
paid after the customer was told it could not be confirmed (a person might refund it by hand)."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection

from agents import refunds as refund_module
from agents.models import Refund, RefundStatus
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


class WorkerStopped(BaseException):
    pass


def test_a_worker_taking_the_ticket_as_the_reconciler_fails_a_refund_sends_nothing(sandbox, monkeypatch):  # noqa: ANN001, E501
    customer = make_customer()
    order = order_for(customer, "RW-1001", 10000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $40 of RW-1001")
    model = ScriptedRefund(json.dumps({"order_number": "RW-1001", "amount_cents": 4000}))
    provider = refund_module.provider()
    create = provider.create_refund

    def stop(**kwargs):  # noqa: ANN003, ANN202
        raise WorkerStopped()

    monkeypatch.setattr(provider, "create_refund", stop)
    with pytest.raises(WorkerStopped):
        advance(ticket.pk, model=model)
    monkeypatch.setattr(provider, "create_refund", create)
    Refund.objects.update(updated_at=Refund.objects.get().created_at.replace(year=2000))
    refund = Refund.objects.select_related("order").get()
    assert refund.status == RefundStatus.SUBMITTED

    real_escalate = refund_module.refund_escalate
    worker: dict = {}

    def a_worker_takes_the_ticket_meanwhile(*, refund, reason, **more):  # noqa: ANN001, ANN003, ANN202
        # The reconciler has decided (failed, under its locks); a worker takes the ticket now, on its
        # own connection, and recovery tries the refund again under its key.
        def take_it() -> None:
            try:
                worker["outcome"] = advance(refund.ticket_id, model=model)
            finally:
                connection.close()

        worker["thread"] = threading.Thread(target=take_it)
        worker["thread"].start()
        worker["thread"].join(timeout=1.0)  # it waits for the reconciler's locks (or would pay now)
        return real_escalate(refund=refund, reason=reason, **more)

    monkeypatch.setattr(refund_module, "refund_escalate", a_worker_takes_the_ticket_meanwhile)
    refund_module.refund_reconcile(refund=refund)
    worker["thread"].join(timeout=60)

    refund = Refund.objects.get()
    told = list(
        Message.objects.filter(ticket=ticket, client_msg_id=f"refund-problem:{refund.pk}").values_list(
            "body", flat=True
        )
    )
    # Told once that it could not be confirmed, handed to a person: the worker found the person and
    # sent nothing. Never paid after the customer was told it was not (a person might refund by hand).
    assert paid(sandbox, order) == [], (refund.status, told)
    assert refund.status == RefundStatus.FAILED and len(told) == 1
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
