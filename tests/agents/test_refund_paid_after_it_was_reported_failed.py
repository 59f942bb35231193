"""A refund reported failed to the customer that the payment provider pays after all is told, once.

The worker sent the refund (the payment sandbox stores it seconds after it was asked for) and was
killed with SIGKILL before any answer came. Past the bound, with no worker on the ticket and no
record at the provider, the reconciler settled it failed: the customer read that the refund "could
not be completed" and the ticket went to a person. Then the request landed and the provider paid it.
The recheck recorded the payment, but the customer was never told the money was on its way after
all, and the person on the ticket, reading only the failure, could refund it again by hand. Once the
ledger learns it was paid, the customer is told once (a keyed message, however often the recheck
runs), the timeline says the refund reported failed was paid, and staff get a note not to pay again.
The same holds for a refund its worker gave up on as unconfirmed, found paid by the reconciler later.
"""

from __future__ import annotations

import signal

import pytest

from agents import refunds as refund_module
from agents.models import Refund, RefundStatus
from agents.runner import advance
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import assert_money_invariants, order_for, paid
from tests.agents.test_refund_failed_unseen import _first_request_stays_on_its_way
from tests.conftest import make_customer
from tests.workers import wait_until
from tickets import services as ticket_services
from tickets.models import AuthorKind, Message, Ticket, TicketEvent, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(240),
    pytest.mark.workers,
]


def _written_after(ticket: Ticket, message: Message, *, public: bool) -> list[Message]:
    return list(
        Message.objects.filter(ticket=ticket, is_public=public, pk__gt=message.pk)
        .exclude(author_kind=AuthorKind.CUSTOMER)
        .order_by("pk")
    )


def test_a_refund_reported_failed_then_paid_by_the_provider_is_told_to_the_customer_once(sandbox, cluster, settings):  # noqa: ANN001
    settings.REFUND_UNCERTAIN_AFTER_SECONDS = 1
    customer = make_customer()
    order = order_for(customer, "LT-1001", 15000, sandbox)
    sandbox.fault("latency:6000")  # the refund is stored six seconds after it was asked for
    ticket, _ = ticket_services.ticket_open(
        customer=customer, subject="Refund", body="Please refund $150 on order LT-1001, it arrived broken."
    )
    doomed = cluster.worker()
    wait_until(lambda: not sandbox.faults(), timeout=60, what="the refund to reach the provider", cluster=cluster)
    doomed.signal(signal.SIGKILL)
    doomed.wait_dead(timeout=30)
    (refund,) = Refund.objects.filter(ticket=ticket)
    assert refund.status == RefundStatus.SUBMITTED

    def settled_failed() -> bool:
        refund_module.reconcile_open_refunds()
        refund.refresh_from_db()
        return refund.status == RefundStatus.FAILED

    wait_until(settled_failed, timeout=30, what="the reconciler to give up on it", cluster=cluster, interval=0.5)
    assert not paid(sandbox, order), "the request landed before the reconciler gave up: the case is not reproduced"
    told_failed = Message.objects.get(ticket=ticket, client_msg_id=f"refund-told:{refund.pk}:1")
    assert "could not be completed" in told_failed.body

    wait_until(lambda: paid(sandbox, order), timeout=60, what="the request to land at the provider")
    refund_module.reconcile_open_refunds()
    refund_module.reconcile_open_refunds()  # asked again: nothing more to say

    refund.refresh_from_db()
    assert refund.status == RefundStatus.SUCCEEDED, (refund.status, refund.error)
    told_after = _written_after(ticket, told_failed, public=True)
    assert len(told_after) == 1, f"after 'could not be completed' the customer read {[m.body for m in told_after]}"
    assert "$150.00" in told_after[0].body and "LT-1001" in told_after[0].body, told_after[0].body
    assert "could not" not in told_after[0].body, told_after[0].body
    notes = [m.body for m in _written_after(ticket, told_failed, public=False)]
    assert any(refund.provider_refund_id in body for body in notes), f"no note tells staff it was paid: {notes}"
    paid_event = TicketEvent.objects.get(ticket=ticket, kind="refund_succeeded")
    assert paid_event.is_public and paid_event.payload.get("reported_failed"), paid_event.payload
    ticket.refresh_from_db()
    assert ticket.status == TicketStatus.WITH_HUMAN  # the person keeps it, now knowing it was paid
    assert [r["metadata"]["idempotency_key"] for r in paid(sandbox, order)] == [refund.idempotency_key]
    assert_money_invariants(sandbox)


@pytest.mark.usefixtures("quick_provider_retries")
def test_a_refund_said_unconfirmed_then_found_paid_is_told_to_the_customer_once(sandbox, monkeypatch, settings):  # noqa: ANN001
    settings.REFUND_PROVIDER_ATTEMPTS = 1
    customer = make_customer()
    order = order_for(customer, "LT-2001", 5000, sandbox)
    held = _first_request_stays_on_its_way(monkeypatch)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund $50 on LT-2001")
    advance(ticket.pk, model=Refunds(("LT-2001", 5000)))  # no answer: given up as unconfirmed, to a person
    (refund,) = Refund.objects.filter(ticket=ticket)
    told = Message.objects.get(ticket=ticket, client_msg_id=f"escalation:{refund.tool_call_id}")
    assert "couldn't confirm" in told.body, told.body

    held["land"]()  # the request was paid after all
    refund_module.reconcile_open_refunds()
    refund_module.reconcile_open_refunds()

    refund.refresh_from_db()
    assert refund.status == RefundStatus.SUCCEEDED, (refund.status, refund.error)
    told_after = _written_after(ticket, told, public=True)
    assert len(told_after) == 1, f"after 'couldn't confirm' the customer read {[m.body for m in told_after]}"
    assert "$50.00" in told_after[0].body and "couldn't" not in told_after[0].body, told_after[0].body
    notes = [m.body for m in _written_after(ticket, told, public=False)]
    assert any(refund.provider_refund_id in body for body in notes), f"no note tells staff it was paid: {notes}"
    assert [r["metadata"]["idempotency_key"] for r in paid(sandbox, order)] == [refund.idempotency_key]
    assert_money_invariants(sandbox)
