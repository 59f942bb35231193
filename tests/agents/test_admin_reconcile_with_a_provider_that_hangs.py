"""The admin's "Reconcile with the payment provider now", on refunds selected while the provider hangs,
asks it once, not once a refund: each question waited out PAYMENTS_TIMEOUT_SECONDS, so a selection of
fifty held the operator's page (and a web worker) for fifty timeouts, past any proxy's patience. The
refunds are settled as the reconciler's round settles them, and the page says the provider did not
answer instead of "Reconciled"."""

from __future__ import annotations

import pytest

from agents import refunds as refund_module
from agents.models import Refund, RefundStatus
from payments.provider import PaymentProvider
from tests.agents.test_reconciler_with_a_provider_that_hangs import refunds_left_submitted_long_ago
from tests.conftest import silent_server
from tickets.models import Ticket, TicketStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("quick_provider_retries"),
]


def test_the_reconcile_action_asks_a_provider_that_never_answers_once(sandbox, monkeypatch, admin_client):  # noqa: ANN001
    tickets = refunds_left_submitted_long_ago(sandbox, monkeypatch, 4)
    selected = [str(pk) for pk in Refund.objects.values_list("pk", flat=True)]

    with silent_server() as (port, accepted):
        monkeypatch.setattr(
            refund_module, "_provider", PaymentProvider(api_base=f"http://127.0.0.1:{port}", timeout_seconds=1)
        )
        page = admin_client.post(
            "/admin/agents/refund/", {"action": "reconcile_refunds", "_selected_action": selected}, follow=True
        )
        asked = len(accepted)

    assert asked == 1, f"a provider that never answers was asked {asked} times from one click, a timeout each"
    assert "The payment provider did not answer" in page.content.decode()
    for ticket in tickets:  # each goes to a person, as in the reconciler's round
        assert Ticket.objects.get(pk=ticket.pk).status == TicketStatus.WITH_HUMAN
    assert set(Refund.objects.values_list("status", flat=True)) == {RefundStatus.SUBMITTED}
