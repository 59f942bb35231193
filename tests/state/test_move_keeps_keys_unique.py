"""A deployment moved to a new database never sends a refund under a key the provider already holds.

Moved with ``export_state --all --open-only`` (the README's example), the new database's ids start
again past the tickets it carried; the resolved tickets left behind had ids beyond them, and their
refunds' keys are held by the same payment provider. A call's idempotency key carries a random part
made when its intent is recorded, so a new ticket under an old ticket's ids still has a key of its own.
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from agents.models import Refund, ToolCall
from state import bundle
from tests.state.test_bundle import ask, customer_with_paid_order, empty_the_ledger, restore
from tickets.models import Ticket

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(120)]


def test_a_refund_on_the_moved_deployment_is_paid_though_a_ticket_left_behind_had_its_ids(tmp_path, sandbox):
    alice, _ = customer_with_paid_order(sandbox, "R-1001", 4999)
    bob, bobs_order = customer_with_paid_order(sandbox, "R-2002", 4999)
    open_ticket = ask(alice, "Where is my order R-1001?")
    done = ask(bob, "Please refund $20 on order R-2002")
    assert Refund.objects.get(ticket=done).status == "succeeded"
    old_key = ToolCall.objects.get(ticket=done, name="issue_refund").idempotency_key
    Ticket.objects.filter(pk=done.pk).update(status="resolved")

    # Move the deployment as the README shows: the open tickets, with personal data.
    path = tmp_path / "open-tickets.tar"
    call_command(
        "export_state", "--all", "--open-only", "--include-personal-data", output=str(path), stdout=io.StringIO()
    )
    assert json.loads(bundle.read(path).files[bundle.MANIFEST])["selection"]["tickets"] == [open_ticket.pk]
    empty_the_ledger()  # the new deployment's database; the payment provider is the same
    restore(path)

    # The new deployment's first new customer asks for a refund on their own order.
    carol, carols_order = customer_with_paid_order(sandbox, "R-3003", 4999)
    fresh = ask(carol, "Please refund $20 on order R-3003")

    call = ToolCall.objects.get(ticket=fresh, name="issue_refund")
    paid = [r for r in sandbox.refunds() if r["payment_intent"] == carols_order.payment_reference]
    assert [r["amount"] for r in paid] == [2000], (
        f"carol's refund was not paid ({call.status}: {call.error}); its key {call.idempotency_key} is the key "
        f"{old_key} of bob's ticket #{done.pk}, left behind by the move"
    )
    assert call.idempotency_key != old_key
