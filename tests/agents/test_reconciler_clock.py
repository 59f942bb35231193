"""The reconciler judges a refund's age on the database's clock, not each host's.

A refund left open (the bank still processing it, or a request whose answer never came) is handed to
a person once it has stayed so for ``REFUND_UNCERTAIN_AFTER_SECONDS`` (2 minutes): the customer is
told their refund could not be confirmed, a person takes the ticket. Its age was the reconciler's
clock less the time the worker that sent it wrote with its own. On many hosts, with one clock ten
minutes off (NTP broken on one machine), a refund the bank accepted seconds ago was taken from the
agent at the next tick: by a reconciler whose clock ran ahead, or for a refund sent by a worker whose
clock ran behind. Both times are now the database's, as the lease, backoffs and deadlines are.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from agents import refunds as refund_module
from agents.models import Refund, RefundStatus
from agents.runner import advance
from tests.agents.test_backoff_clock import on_a_host_whose_clock_is_off
from tests.agents.test_money_gates import Refunds
from tests.agents.test_money_path import order_for, public_words
from tests.conftest import make_customer
from tickets import services as ticket_services
from tickets.models import Message, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

SKEW = timedelta(minutes=10)  # far past the 2-minute bound


@pytest.mark.parametrize(
    ("sender", "reconciler"),
    [(timedelta(0), SKEW), (-SKEW, timedelta(0))],
    ids=["reconciled_by_a_host_ahead", "sent_by_a_worker_behind"],
)
def test_a_refund_the_bank_accepted_seconds_ago_stays_with_the_agent_whatever_the_hosts_clocks(
    sandbox, monkeypatch, settings, sender, reconciler
):  # noqa: ANN001
    settings.REFUND_UNCERTAIN_AFTER_SECONDS = 120
    customer = make_customer()
    order_for(customer, "RC-1001", 5000, sandbox)
    sandbox.fault("refund_status:pending")  # the bank has not settled it yet
    ticket, _ = ticket_services.ticket_open(customer=customer, subject="Refund", body="Refund RC-1001 please")

    back = on_a_host_whose_clock_is_off(monkeypatch, sender)
    advance(ticket.pk, model=Refunds(("RC-1001", 1000)))
    back()
    refund = Refund.objects.get(ticket=ticket)
    assert refund.status == RefundStatus.PENDING

    # The next tick of the reconciler, seconds later, on its host.
    back = on_a_host_whose_clock_is_off(monkeypatch, reconciler)
    refund_module.reconcile_open_refunds()
    back()

    refund.refresh_from_db()
    ticket.refresh_from_db()
    assert refund.status == RefundStatus.PENDING and refund.escalated_at is None
    assert ticket.status != TicketStatus.WITH_HUMAN
    assert not [w for w in public_words(ticket) if "couldn't confirm your refund" in w]
    assert not Message.objects.filter(ticket=ticket, client_msg_id__startswith="refund-note:").exists()

    # Past the bound on the database's clock, it goes to a person as before.
    Refund.objects.filter(pk=refund.pk).update(updated_at=refund.updated_at - timedelta(seconds=121))
    refund_module.reconcile_open_refunds()
    refund.refresh_from_db()
    ticket.refresh_from_db()
    assert refund.escalated_at is not None and ticket.status == TicketStatus.WITH_HUMAN
