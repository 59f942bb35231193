"""A reconciler round that read a refund as open before it was settled does not tell the customer it
could not be confirmed.

A round reads the open refunds once, then asks the provider about each in turn. A round that
stands still (its worker frozen, while the next rounds go on past it; or a long round behind a
slow provider) can come to a refund another round or the worker has since recorded paid. If the
provider cannot be asked just then, the round escalated it from what it had read: the customer
was told their refund could not be confirmed, and the ticket handed to a person, for a refund the
ledger already showed paid. An escalation is now decided on the refund as it is.
"""

from __future__ import annotations

import pytest

from agents import refunds as refund_module
from agents.models import Refund, RefundStatus
from tests.agents.test_refund_escalated_once_per_status import left_uncertain
from tickets.models import Message, TicketEvent, TicketStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_refund_paid_since_the_round_read_it_is_not_escalated_when_the_provider_is_away(sandbox):  # noqa: ANN001
    ticket, refund = left_uncertain(sandbox, "RS-1001")  # uncertain for an hour; paid at the provider
    read_by_the_round = Refund.objects.select_related("order").get(pk=refund.pk)

    refund_module.reconcile_open_refunds()  # the next round, meanwhile, records it paid
    assert Refund.objects.get(pk=refund.pk).status == RefundStatus.SUCCEEDED
    sandbox.stop()  # the provider is away when the first round comes to it (restarted for the next test)
    refund_module._provider = None

    status = refund_module.refund_reconcile(refund=read_by_the_round)

    ticket.refresh_from_db()
    assert status == RefundStatus.SUCCEEDED
    assert Refund.objects.get(pk=refund.pk).status == RefundStatus.SUCCEEDED
    assert not TicketEvent.objects.filter(ticket=ticket, kind="refund_escalated").exists()
    assert not Message.objects.filter(ticket=ticket, client_msg_id__startswith=f"refund-told:{refund.pk}:").exists()
    assert ticket.status != TicketStatus.WITH_HUMAN
