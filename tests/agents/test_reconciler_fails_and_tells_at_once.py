"""The reconciler fails a refund the provider has no record of, tells the customer and hands the ticket to
a person in one transaction. A worker that takes the ticket meanwhile (recovery: the refund call was
interrupted) waits for it, then finds a person has the ticket and sends nothing: a refund is never
paid after the customer was told it could not be confirmed (a person might refund it by hand)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from agents import refunds as refund_module
from agents.models import Refund, RefundStatus
from agents.runner import advance
from tests.agents.test_money_path import paid
from tests.agents.test_reconciler_races_worker import refund_submitted_long_ago_never_sent
from tickets.models import Message, Ticket, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def test_a_worker_taking_the_ticket_as_the_reconciler_fails_a_refund_sends_nothing(sandbox, monkeypatch):  # noqa: ANN001, E501
    ticket, order, model, refund = refund_submitted_long_ago_never_sent(sandbox, monkeypatch, "RW-1001")

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
        Message.objects.filter(ticket=ticket, client_msg_id__startswith=f"refund-told:{refund.pk}:").values_list(
            "body", flat=True
        )
    )
    # Told once that it could not be confirmed, handed to a person: the worker found the person and
    # sent nothing. Never paid after the customer was told it was not (a person might refund by hand).
    assert paid(sandbox, order) == [], (refund.status, told)
    assert refund.status == RefundStatus.FAILED and len(told) == 1
    assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
