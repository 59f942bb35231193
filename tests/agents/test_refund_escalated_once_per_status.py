"""An unsettled refund is escalated once per status, however often it is reconciled.

The reconciler (beat, every minute, or staff from the admin) asks the provider again while a refund
stays unsettled; while the provider is away each answer is another error. The escalation's private
note was keyed by refund and status, and a second, different reason under the same key failed the
reconcile (a 500 in the admin, and the beat task stopped before the other refunds). Now a refund
already escalated in its status has nothing new to say: no second note, event or hand-off.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents import refunds as refund_module
from agents.models import Refund, RefundStatus
from agents.runner import advance
from payments.provider import ProviderUncertain
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import order_for
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Message, Ticket, TicketEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


class Unreachable:
    """The provider, unreachable, each time with another error (a timeout, then a refused connection)."""

    def __init__(self) -> None:
        self.errors = iter(["Read timed out", "Connection refused"])

    def find_refund(self, **kwargs):  # noqa: ANN003, ANN201
        raise ProviderUncertain(f"could not reach the payment provider: {next(self.errors)}")


def left_uncertain(sandbox, number: str) -> tuple[Ticket, Refund]:  # noqa: ANN001
    """A $10 refund on order ``number``, left uncertain an hour ago, as a worker that died between
    the provider's answer and its own commit leaves it."""
    customer = make_customer()
    order_for(customer, number, 5000, sandbox)
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body=f"Refund {number} please")
    advance(ticket.pk, model=Refunds((number, 1000)))
    refund = Refund.objects.get(ticket=ticket)
    Refund.objects.filter(pk=refund.pk).update(
        status=RefundStatus.UNCERTAIN, updated_at=timezone.now() - timedelta(hours=1)
    )
    return ticket, refund


def reconcile_in_the_admin(admin_client, refund: Refund) -> int:  # noqa: ANN001
    """Staff press "Reconcile with the payment provider now" on the refund: the response's status."""
    action = {"action": "reconcile_refunds", "_selected_action": [refund.pk]}
    return admin_client.post("/admin/agents/refund/", action).status_code


def test_reconciling_an_uncertain_refund_twice_from_the_admin_is_not_a_500(admin_client, sandbox, monkeypatch):
    ticket, refund = left_uncertain(sandbox, "R-8001")
    monkeypatch.setattr(refund_module, "provider", lambda: stub)
    stub = Unreachable()
    admin_client.raise_request_exception = False

    first = reconcile_in_the_admin(admin_client, refund)
    second = reconcile_in_the_admin(admin_client, refund)

    assert first == 302
    assert second == 302, second
    assert_escalated_once(ticket)


def assert_escalated_once(ticket) -> None:  # noqa: ANN001
    events = TicketEvent.objects.filter(ticket=ticket, kind="refund_escalated")
    notes = Message.objects.filter(ticket=ticket, client_msg_id__startswith="refund-note:")
    assert events.count() == 1, list(events.values_list("payload", flat=True))
    assert notes.count() == 1, list(notes.values_list("body", flat=True))


def test_the_beat_reconciler_survives_a_second_different_provider_error(sandbox, monkeypatch):
    ticket, _ = left_uncertain(sandbox, "R-8002")
    stub = Unreachable()
    monkeypatch.setattr(refund_module, "provider", lambda: stub)

    refund_module.reconcile_open_refunds()
    refund_module.reconcile_open_refunds()  # the next beat tick: the provider still away, another error
    assert_escalated_once(ticket)


def test_a_pending_refund_escalated_then_reconciled_while_the_provider_is_down_is_not_a_500(admin_client, sandbox):  # noqa: ANN001
    """With the real sandbox, no stub: the provider reports the refund pending past the bound (escalated,
    private note keyed refund-note:<id>:1), then is unreachable at the next reconcile."""
    customer = make_customer()
    order_for(customer, "R-8003", 5000, sandbox)
    sandbox.fault("refund_status:pending")
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund R-8003 please")
    advance(ticket.pk, model=Refunds(("R-8003", 1000)))
    refund = Refund.objects.get(ticket=ticket)
    assert refund.status == RefundStatus.PENDING
    Refund.objects.filter(pk=refund.pk).update(updated_at=timezone.now() - timedelta(hours=1))
    admin_client.raise_request_exception = False

    assert reconcile_in_the_admin(admin_client, refund) == 302
    refund.refresh_from_db()
    assert refund.status == RefundStatus.PENDING and refund.escalated_at is not None

    sandbox.stop()  # the provider is away at the next reconcile (the fixture restarts it for the next test)
    refund_module._provider = None
    second = reconcile_in_the_admin(admin_client, refund)

    assert second == 302, second
    assert_escalated_once(ticket)
